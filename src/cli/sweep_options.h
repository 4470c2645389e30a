// The sweep's options and the grid they describe, apart from running it: the
// sweep INI fuzz target (tests/fuzz) parses configs through exactly these.
#pragma once
#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "sweep/grid.h"

namespace tf::cli {

namespace po = boost::program_options;

// Every option of `triforce sweep` except --help, --config and the offload options.
void add_sweep_options(po::options_description& desc);
// A comma-separated list option; empty when absent or blank.
std::vector<std::string> list_or_empty(const po::variables_map& vm, const std::string& k);
// The grid of the parsed options (methods, lists, sampling, seeds, repetitions);
// n_prompts is left at 1 for the caller. One-line tf::Error naming the option.
sweep::GridSpec grid_from_options(const po::variables_map& vm);

}  // namespace tf::cli
