#include "sweep/results.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/check.h"

namespace tf::sweep {

namespace fs = std::filesystem;

const h5::AttrValue* RunRecord::find(const std::string& name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

std::string run_group_name(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", (long long)index);
  return buf;
}

const std::vector<Column>& summary_columns() {
  using K = Column::Kind;
  static const std::vector<Column> cols = {
      // the grid point
      {K::i64, "index"}, {K::str, "prompt"}, {K::i64, "context"}, {K::i64, "max_new_tokens"}, {K::str, "method"},
      {K::str, "draft"}, {K::i64, "budget"}, {K::i64, "chunk"}, {K::i64, "gamma1"}, {K::i64, "gamma2"},
      {K::i64, "sink"}, {K::i64, "window"}, {K::str, "reretrieve"}, {K::f64, "temperature"}, {K::f64, "top_p"},
      {K::i64, "seed"}, {K::i64, "rep"}, {K::i64, "shard"},
      // what the method resolved its defaults to
      {K::str, "chain"}, {K::str, "resolved_gammas"}, {K::i64, "resolved_budget"}, {K::i64, "resolved_chunk"},
      {K::i64, "resolved_sink"}, {K::i64, "resolved_window"},
      // metrics
      {K::i64, "n_generated"}, {K::i64, "top_steps"}, {K::f64, "prefill_ms"}, {K::f64, "decode_ms_per_token"},
      {K::f64, "e2e_ms_per_token"}, {K::f64, "tokens_per_s"}, {K::f64, "speedup_vs_ar"},
      {K::f64, "speedup_e2e_vs_ar"}, {K::i64, "tokens_equal_ar"}, {K::f64, "alpha_l1"}, {K::f64, "tau_l1"},
      {K::f64, "alpha_l2"}, {K::f64, "tau_l2"}, {K::f64, "alpha_top"}, {K::f64, "tau_top"},
      {K::f64, "avg_tokens_l1"}, {K::f64, "avg_tokens_l2"}, {K::i64, "retrieval_rebuilds"},
      {K::f64, "draft_ms_per_token"}, {K::f64, "middle_ms_per_token"}, {K::f64, "verify_ms_per_token"},
      {K::f64, "rebuild_ms_per_token"}, {K::f64, "other_ms_per_token"}, {K::f64, "setup_ms"},
      {K::f64, "retrieval_build_ms"}, {K::f64, "draft_prefill_ms"}, {K::f64, "run_s"}};
  return cols;
}

namespace {

struct SummaryType {
  h5::Handle type, str;
  std::vector<size_t> offset;
  size_t size = 0;
};

SummaryType summary_type() {
  SummaryType t;
  t.str = h5::Handle(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.str, kSummaryStrLen);
  H5Tset_strpad(t.str, H5T_STR_NULLTERM);
  for (const auto& c : summary_columns()) {
    t.offset.push_back(t.size);
    t.size += c.kind == Column::str ? kSummaryStrLen : 8;
  }
  t.type = h5::Handle(H5Tcreate(H5T_COMPOUND, t.size));
  const auto& cols = summary_columns();
  for (size_t i = 0; i < cols.size(); ++i) {
    const hid_t m = cols[i].kind == Column::i64 ? H5T_NATIVE_INT64
                    : cols[i].kind == Column::f64 ? H5T_NATIVE_DOUBLE
                                                  : t.str.id();
    H5Tinsert(t.type, cols[i].name.c_str(), t.offset[i], m);
  }
  return t;
}

std::string utc_now() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A tf::Error's message without its " [file:line]" suffix, to extend it in one line.
std::string without_location(const tf::Error& e) {
  const std::string s = e.what();
  const size_t at = s.rfind(" [");
  return at == std::string::npos ? s : s.substr(0, at);
}

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = bool(std::getline(sa, la)), gb = bool(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(end)";
    if (!gb) lb = "(end)";
    if (la != lb) return "'" + la + "' in the file, '" + lb + "' now";
  }
}

}  // namespace

void check_schema(hid_t file, const std::string& path) {
  TF_CHECK(h5::has_attr(file, "schema") && h5::get_string_attr(file, "schema") == kSchema,
           path << ": not a triforce sweep file (root attribute schema != " << kSchema << ")");
  const int64_t v = h5::get_int_attr(file, "schema_version");
  TF_CHECK(v == kSchemaVersion,
           path << ": schema version " << v << ", this build reads and writes version " << kSchemaVersion);
  TF_CHECK(h5::exists(file, "/runs") && h5::exists(file, "/summary") && h5::exists(file, "/config"),
           path << ": incomplete sweep file (expected /config, /runs and /summary)");
}

std::vector<CompletedRun> read_completed(hid_t file, const std::string& path) {
  h5::Handle runs = h5::open_group(file, "/runs");
  std::vector<CompletedRun> out;
  for (const auto& name : h5::member_names(runs)) {
    h5::Handle g = h5::open_group(runs, name);
    CompletedRun c;
    c.index = h5::get_int_attr(g, "index");
    TF_CHECK(run_group_name(c.index) == name, path << ": /runs/" << name << " holds index " << c.index);
    c.key = h5::get_string_attr(g, "key");
    c.decode_ms_per_token = h5::get_real_attr(g, "decode_ms_per_token");
    c.e2e_ms_per_token = h5::get_real_attr(g, "e2e_ms_per_token");
    for (auto t : h5::read_int_vector(g, "tokens")) c.tokens.push_back(int32_t(t));
    out.push_back(std::move(c));
  }
  h5::Handle ds(H5Dopen2(file, "/summary", H5P_DEFAULT));
  h5::Handle space(H5Dget_space(ds));
  const auto rows = H5Sget_simple_extent_npoints(space);
  TF_CHECK(rows == hssize_t(out.size()),
           path << ": /summary has " << rows << " rows for " << out.size() << " runs");
  return out;
}

void init_file(hid_t file, const FileHeader& header) {
  h5::set_attr(file, "schema", std::string(kSchema));
  h5::set_attr(file, "schema_version", kSchemaVersion);
  h5::set_attr(file, "created_utc", utc_now());
  for (const auto& [k, v] : header.root) h5::set_attr(file, k, v);
  h5::write_string_dataset(file, "config", header.config);
  h5::create_group(file, "/runs");
  SummaryType t = summary_type();
  hsize_t dims = 0, maxdims = H5S_UNLIMITED, chunk = 64;
  h5::Handle space(H5Screate_simple(1, &dims, &maxdims));
  h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl, 1, &chunk);
  h5::Handle ds(H5Dcreate2(file, "/summary", t.type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  TF_CHECK(ds.valid(), "sweep file: cannot create /summary");
}

void add_summary_row(hid_t file, hid_t g) {
  SummaryType t = summary_type();
  std::vector<char> row(t.size, 0);
  const auto& cols = summary_columns();
  for (size_t i = 0; i < cols.size(); ++i) {
    char* dst = row.data() + t.offset[i];
    const bool has = h5::has_attr(g, cols[i].name);
    if (cols[i].kind == Column::i64) {
      int64_t v = -1;
      if (has) v = int64_t(h5::get_real_attr(g, cols[i].name));
      std::memcpy(dst, &v, 8);
    } else if (cols[i].kind == Column::f64) {
      double v = has ? h5::get_real_attr(g, cols[i].name) : std::nan("");
      std::memcpy(dst, &v, 8);
    } else {
      std::string s;
      if (has) {
        h5::AttrValue a = h5::get_attr(g, cols[i].name);
        if (auto* p = std::get_if<std::string>(&a)) s = *p;
      }
      std::strncpy(dst, s.c_str(), kSummaryStrLen - 1);
    }
  }
  h5::Handle ds(H5Dopen2(file, "/summary", H5P_DEFAULT));
  TF_CHECK(ds.valid(), "sweep file: no /summary");
  hsize_t n = 0;
  {
    h5::Handle space(H5Dget_space(ds));
    H5Sget_simple_extent_dims(space, &n, nullptr);
  }
  const hsize_t grown = n + 1, one = 1;
  TF_CHECK(H5Dset_extent(ds, &grown) >= 0, "sweep file: cannot grow /summary");
  h5::Handle fspace(H5Dget_space(ds));
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &n, nullptr, &one, nullptr);
  h5::Handle mspace(H5Screate_simple(1, &one, nullptr));
  TF_CHECK(H5Dwrite(ds, t.type, mspace, fspace, H5P_DEFAULT, row.data()) >= 0, "sweep file: cannot write /summary");
}

void add_run(hid_t file, const RunRecord& r) {
  TF_CHECK(r.find("key"), "sweep: run " << r.index << " has no key");
  h5::Handle g = h5::create_group(file, "/runs/" + run_group_name(r.index));
  h5::set_attr(g, "index", r.index);
  for (const auto& [k, v] : r.attrs) h5::set_attr(g, k, v);
  for (const auto& d : r.datasets)
    std::visit([&](const auto& v) { h5::write_vector(g, d.name, v, d.units); }, d.data);
  add_summary_row(file, g);
}

void check_output_path(const std::string& path) {
  std::error_code ec;
  TF_CHECK(!fs::is_directory(path, ec), path << ": is a folder; expected the path of the results file");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  const auto st = fs::status(parent, ec);
  TF_CHECK(fs::exists(st), path << ": the folder " << parent.string() << " does not exist");
  TF_CHECK(fs::is_directory(st), path << ": " << parent.string() << " is not a folder");
  TF_CHECK(::access(parent.c_str(), W_OK | X_OK) == 0,
           path << ": cannot write in the folder " << parent.string() << ": " << std::strerror(errno));
}

ResultsWriter::ResultsWriter(std::string path, const FileHeader& header, bool write)
    : path_(std::move(path)), write_(write) {
  std::error_code ec;
  if (write_) fs::remove(path_ + ".tmp", ec);  // a leftover of a killed append (the caller holds the lock)
  if (fs::exists(path_)) {
    std::string old;
    try {
      image_ = h5::read_checked(path_);
      h5::Handle f = h5::open_in_memory(image_, path_, false);
      check_schema(f, path_);
      old = h5::read_string_dataset(f, "config");
      for (auto& c : read_completed(f, path_)) done_.emplace(c.key, std::move(c));
    } catch (const tf::Error& e) {
      TF_FAIL(without_location(e) << "; left as it is: move it away to start afresh, or give another --out");
    }
    TF_CHECK(old == header.config, path_ << ": written by a different sweep config (" << first_difference(old, header.config)
                                         << "); resume needs the same config, or choose another --out");
    return;
  }
  if (!write_) return;
  {
    h5::Handle f = h5::create_in_memory(path_);
    init_file(f, header);
    image_ = h5::image_of(f, path_);
  }
  const std::string err = h5::write_atomically(path_, image_);
  TF_CHECK(err.empty(), path_ << ": cannot create the results file (" << err << "); nothing was written");
}

void ResultsWriter::append(const RunRecord& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto* key = r.find("key");
  TF_CHECK(key && std::holds_alternative<std::string>(*key), "sweep: run " << r.index << " has no key");
  const std::string& k = std::get<std::string>(*key);
  TF_CHECK(!done_.count(k), path_ << ": run " << k << " is already in the file");
  if (write_) {
    h5::Bytes next;
    {
      h5::Handle f = h5::open_in_memory(image_, path_, true);
      add_run(f, r);
      next = h5::image_of(f, path_);
    }
    const std::string err = h5::write_atomically(path_, next);
    TF_CHECK(err.empty(), path_ << ": run " << r.index << " was not saved (" << err << "); the file keeps the "
                                << done_.size() << " runs completed before it, and the same command resumes");
    image_ = std::move(next);
  }
  CompletedRun c;
  c.index = r.index;
  c.key = k;
  auto real = [&](const char* n) {
    const auto* v = r.find(n);
    if (!v) return std::nan("");
    if (auto* d = std::get_if<double>(v)) return *d;
    if (auto* i = std::get_if<int64_t>(v)) return double(*i);
    return std::nan("");
  };
  c.decode_ms_per_token = real("decode_ms_per_token");
  c.e2e_ms_per_token = real("e2e_ms_per_token");
  for (const auto& d : r.datasets)
    if (d.name == "tokens")
      if (auto* v = std::get_if<std::vector<int32_t>>(&d.data)) c.tokens = *v;
  done_.emplace(k, std::move(c));
  last_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tf::sweep
