// triforce merge OUT.h5 SHARD.h5...: one results file from a sweep's shards
// (validation rules in src/sweep/merge.h). --check validates without writing;
// --list also prints one line per run (index, key, tokens, tokens hash).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/check.h"
#include "sweep/merge.h"

namespace tf::cli {

int cmd_merge(const std::vector<std::string>& args) {
  po::options_description desc("merge options");
  desc.add_options()("files", po::value<std::vector<std::string>>(), "OUT.h5 SHARD.h5... (with --check: FILE...)")(
      "check", po::bool_switch(), "validate the files only; write nothing")(
      "list", po::bool_switch(), "with --check: one line per run: index, key, tokens, tokens hash")(
      "quiet", po::bool_switch(), "no summary line");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse("merge", args, desc, vm, &pos)) return 0;
  const auto files = vm.count("files") ? vm["files"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (vm["check"].as<bool>() || vm["list"].as<bool>()) {
    TF_CHECK(!files.empty(), "merge --check: expected FILE.h5...");
    const int64_t n = sweep::check_files(files, vm["list"].as<bool>());
    if (!vm["quiet"].as<bool>()) std::fprintf(stderr, "%lld runs in %zu files: valid\n", (long long)n, files.size());
    return 0;
  }
  TF_CHECK(files.size() >= 2, "merge: expected OUT.h5 SHARD.h5... (an output and at least one shard)");
  const std::vector<std::string> inputs(files.begin() + 1, files.end());
  const sweep::MergeStats st = sweep::merge_files(files[0], inputs);
  if (!vm["quiet"].as<bool>()) {
    std::fprintf(stderr, "merged %lld runs from %lld files into %s", (long long)st.runs, (long long)st.inputs,
                 files[0].c_str());
    if (st.grid_points >= 0)
      std::fprintf(stderr, " (the grid has %lld points%s)", (long long)st.grid_points,
                   st.runs == st.grid_points ? ", all present" : "; some are missing");
    std::fprintf(stderr, "\n");
  }
  return 0;
}

}  // namespace tf::cli
