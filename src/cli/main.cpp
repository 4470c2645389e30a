// triforce: one binary, one subcommand per file (cmd_*.cpp).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/check.h"
#include "core/device.h"
#include "core/env_knobs.h"
#include "parallel/launch.h"

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: triforce <command> [options]\n"
               "commands:\n"
               "  info      print a model's config, parameters, bytes and memory at --context N\n"
               "  logits    write a prompt's logits to .npy\n"
               "  generate  generate text (autoregressive)\n"
               "  sweep     run a grid of methods and parameters into one HDF5 file\n"
               "  merge     merge the HDF5 files of a sweep's shards\n"
               "  tokenize  write a text file's token ids (.npy int32 or one per line)\n"
               "run 'triforce <command> --help' for its options\n");
}
}  // namespace

int main(int argc, char** argv) {
  tf::parallel::init(&argc, &argv);
  if (argc < 2) {
    usage();
    tf::parallel::finalize();
    return 2;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  int rc = 0;
  try {
    if (cmd != "--help" && cmd != "-h" && cmd != "help") tf::check_environment();
    if (cmd == "info") rc = tf::cli::cmd_info(args);
    else if (cmd == "logits") rc = tf::cli::cmd_logits(args);
    else if (cmd == "generate") rc = tf::cli::cmd_generate(args);
    else if (cmd == "sweep") rc = tf::cli::cmd_sweep(args);
    else if (cmd == "merge") rc = tf::cli::cmd_merge(args);
    else if (cmd == "tokenize") rc = tf::cli::cmd_tokenize(args);
    else if (cmd == "--help" || cmd == "-h" || cmd == "help") usage();
    else tf::parallel::abort_all("unknown command '" + cmd + "' (expected info, logits, generate, sweep, merge or tokenize)", 2);
  } catch (const std::exception& e) {
    tf::parallel::abort_all(e.what(), 1);
  }
  tf::release_device_state();  // before the CUDA runtime's own teardown at exit
  tf::parallel::finalize();
  return rc;
}
