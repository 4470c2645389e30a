#include "sweep/merge.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "core/check.h"
#include "io/h5_file.h"
#include "io/h5_image.h"
#include "sweep/lock.h"
#include "sweep/prompts.h"
#include "sweep/results.h"

namespace tf::sweep {

namespace fs = std::filesystem;

namespace {

struct Input {
  std::string path;
  h5::Handle file;
  std::string config;
  std::vector<CompletedRun> runs;
};

Input open_input(const std::string& path) {
  Input in;
  in.path = path;
  in.file = h5::open_checked(path);
  check_schema(in.file, path);
  in.config = h5::read_string_dataset(in.file, "config");
  in.runs = read_completed(in.file, path);
  return in;
}

}  // namespace

MergeStats merge_files(const std::string& out, const std::vector<std::string>& inputs) {
  TF_CHECK(!inputs.empty(), "merge: no input files");
  std::error_code ec;
  for (const auto& in : inputs)
    TF_CHECK(!(fs::exists(out) && fs::equivalent(out, in, ec)), "merge: the output " << out << " is also an input");
  std::vector<Input> ins;
  for (const auto& p : inputs) ins.push_back(open_input(p));
  for (size_t k = 1; k < ins.size(); ++k)
    TF_CHECK(ins[k].config == ins[0].config, "merge: " << ins[k].path << " was written by another sweep config than "
                                                       << ins[0].path << " (conflicting /config)");
  // (index, input, key) in grid order; duplicates and conflicts refused.
  std::map<std::string, size_t> key_at;
  std::map<int64_t, std::pair<std::string, size_t>> index_at;
  std::vector<std::tuple<int64_t, size_t>> order;
  for (size_t k = 0; k < ins.size(); ++k)
    for (const auto& r : ins[k].runs) {
      auto [it, fresh] = key_at.emplace(r.key, k);
      TF_CHECK(fresh, "merge: duplicate run " << r.index << " (" << r.key << ") in " << ins[it->second].path << " and "
                                              << ins[k].path);
      auto [jt, fresh_index] = index_at.emplace(r.index, std::make_pair(r.key, k));
      TF_CHECK(fresh_index, "merge: conflicting runs at grid index " << r.index << ": " << jt->second.first << " in "
                                                                     << ins[jt->second.second].path << ", " << r.key
                                                                     << " in " << ins[k].path);
      order.emplace_back(r.index, k);
    }
  std::sort(order.begin(), order.end());

  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails the write (EFBIG) instead of killing the process
  check_output_path(out);
  FileLock lock(out);
  MergeStats st;
  st.inputs = int64_t(ins.size());
  h5::Bytes image;
  {
    h5::Handle f = h5::create_in_memory(out);
    FileHeader h;
    h.config = ins[0].config;
    // Root attributes equal in every input.
    for (const auto& name : h5::attr_names(ins[0].file)) {
      if (name == "schema" || name == "schema_version" || name == "created_utc") continue;
      const h5::AttrValue v = h5::get_attr(ins[0].file, name);
      bool same = true;
      for (size_t k = 1; k < ins.size() && same; ++k)
        same = h5::has_attr(ins[k].file, name) && h5::get_attr(ins[k].file, name) == v;
      if (same) h.root.emplace_back(name, v);
    }
    h.root.emplace_back("merged_from", int64_t(ins.size()));
    init_file(f, h);
    for (size_t k = 0; k < ins.size(); ++k) {
      h5::Handle g = h5::create_group(f, "/shards/" + std::to_string(k));
      h5::copy_attrs(ins[k].file, g);
      h5::set_attr(g, "file", ins[k].path);
      if (h5::has_attr(ins[k].file, "grid_points")) st.grid_points = h5::get_int_attr(ins[k].file, "grid_points");
    }
    h5::Handle runs = h5::open_group(f, "/runs");
    for (const auto& [index, k] : order) {
      const std::string name = run_group_name(index);
      const std::string src = "/runs/" + name;
      TF_CHECK(H5Ocopy(ins[k].file, src.c_str(), runs, name.c_str(), H5P_DEFAULT, H5P_DEFAULT) >= 0,
               "merge: cannot copy " << ins[k].path << ":" << src);
      h5::Handle g = h5::open_group(runs, name);
      h5::set_attr(g, "source_shard", int64_t(k));
      add_summary_row(f, g);
      ++st.runs;
    }
    image = h5::image_of(f, out);
  }
  const std::string err = h5::write_atomically(out, image);
  TF_CHECK(err.empty(), "merge: cannot write " << out << " (" << err << "); nothing was written");
  return st;
}

int64_t check_files(const std::vector<std::string>& inputs, bool list) {
  int64_t total = 0;
  for (const auto& p : inputs) {
    Input in = open_input(p);
    for (const auto& r : in.runs) {
      if (list)
        std::printf("%lld\t%s\t%zu\t%s\n", (long long)r.index, r.key.c_str(), r.tokens.size(),
                    token_hash(r.tokens).c_str());
    }
    total += int64_t(in.runs.size());
  }
  return total;
}

}  // namespace tf::sweep
