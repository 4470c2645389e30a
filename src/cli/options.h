// Shared option handling for every subcommand: Boost.Program_options over the
// command line, then the INI file named by --config; the command line wins.
#pragma once
#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "cli/token_ids.h"

namespace tf::cli {

namespace po = boost::program_options;

// Parses args (argv after the subcommand) against `desc`, adding --help and
// --config. Returns false when --help was printed.
bool parse(const std::string& subcommand, const std::vector<std::string>& args,
           po::options_description& desc, po::variables_map& vm,
           const po::positional_options_description* positional = nullptr);

// The embedded default model (SmolLM2-135M-Instruct Q4_1 GGUF) in the cache
// that scripts/fetch_default_model.sh fills; a one-line error when absent.
std::string default_model_path();

}  // namespace tf::cli
