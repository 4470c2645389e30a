#include "cli/options.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "parallel/tensor_parallel.h"

namespace tf::cli {

bool parse(const std::string& subcommand, const std::vector<std::string>& args,
           po::options_description& desc, po::variables_map& vm,
           const po::positional_options_description* positional) {
  desc.add_options()("help,h", "show this help")(
      "config", po::value<std::string>(), "INI file with more options; the command line wins")(
      "tp", po::value<int64_t>()->default_value(0),
      "tensor-parallel size: the number of MPI ranks (mpirun -np N triforce ...); 0 = that number");
  try {
    auto parser = po::command_line_parser(args).options(desc);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: triforce " << subcommand << " [options]\n" << desc << "\n";
      return false;
    }
    if (vm.count("config")) {
      const auto path = vm["config"].as<std::string>();
      std::ifstream in(path);
      TF_CHECK(in, "--config " << path << ": cannot open file");
      // Unregistered keys are allowed so one INI can serve several subcommands.
      auto parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
      po::store(parsed, vm);
    }
    po::notify(vm);
    parallel::check_tp_option(vm["tp"].as<int64_t>());
  } catch (const po::error& e) {
    TF_FAIL("triforce " << subcommand << ": " << e.what());
  }
  return true;
}

std::string default_model_path() {
  std::filesystem::path cache;
  if (const char* c = std::getenv("TRIFORCE_CACHE")) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME")) {
    cache = std::filesystem::path(x) / "triforce";
  } else if (const char* h = std::getenv("HOME")) {
    cache = std::filesystem::path(h) / ".cache" / "triforce";
  }
  auto p = cache / "SmolLM2-135M-Instruct.Q4_1.gguf";
  TF_CHECK(std::filesystem::exists(p),
           "no --target given and the default model " << p.string()
                                                      << " is missing: run scripts/fetch_default_model.sh");
  return p.string();
}

}  // namespace tf::cli
