#include "cli/options.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "parallel/tensor_parallel.h"
#include "io/npy.h"

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

std::vector<int32_t> parse_token_list(const std::string& csv) {
  std::vector<int32_t> ids;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    TF_CHECK(end && *end == '\0' && v >= 0, "--tokens: '" << item << "' is not a token id");
    ids.push_back(int32_t(v));
  }
  TF_CHECK(!ids.empty(), "--tokens: expected a comma-separated list of token ids");
  return ids;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") {
    Tensor t = read_npy(path);
    TF_CHECK(t.dtype == DType::I32, path << ": expected an int32 .npy array of token ids");
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  std::ifstream in(path);
  TF_CHECK(in, path << ": cannot open token file");
  std::vector<int32_t> ids;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    char* end = nullptr;
    long v = std::strtol(line.c_str(), &end, 10);
    while (end && (*end == ' ' || *end == '\t' || *end == '\r')) ++end;
    TF_CHECK(end && *end == '\0' && v >= 0, path << ":" << lineno << ": expected one token id per line");
    ids.push_back(int32_t(v));
  }
  TF_CHECK(!ids.empty(), path << ": no token ids");
  return ids;
}

}  // namespace tf::cli
