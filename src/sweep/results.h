// The sweep's HDF5 file (layout in docs/RESULTS.md): root provenance attributes,
// /config (the resolved config text), /runs/<index> (one group per run: flat
// attributes + per-step datasets + histograms) and /summary (one compound row
// per run, for plotting).
//
// Crash safety: the file on disk is only ever replaced whole. The writer keeps
// the file's bytes in memory; appending a run adds it to an in-memory copy
// (io/h5_image.h), writes that to <path>.tmp with every write checked, fsyncs
// and renames it over <path>. A SIGKILL at any moment leaves either the old or
// the new complete file (and at most a stale .tmp, removed on the next start
// under the lock); a full disk leaves the old file and a one-line error. The
// file carries a checksum of its bytes, verified before a resume reads it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "io/h5_file.h"
#include "io/h5_image.h"

namespace tf::sweep {

inline constexpr const char* kSchema = "triforce-sweep";
inline constexpr int64_t kSchemaVersion = 1;

using Attrs = std::vector<std::pair<std::string, h5::AttrValue>>;

struct Dataset {
  std::string name;  // relative to the run group; "steps/x" creates steps/
  std::variant<std::vector<int32_t>, std::vector<int64_t>, std::vector<double>> data;
  std::string units;
};

struct RunRecord {
  int64_t index = 0;  // grid point index: the group is /runs/<index, 6 digits>
  Attrs attrs;        // must hold "key"
  std::vector<Dataset> datasets;
  const h5::AttrValue* find(const std::string& name) const;
};

std::string run_group_name(int64_t index);

struct FileHeader {
  Attrs root;          // provenance (schema attrs are added by the writer)
  std::string config;  // resolved config text
};

// What a resumed sweep needs of a completed run.
struct CompletedRun {
  int64_t index = 0;
  std::string key;
  double decode_ms_per_token = 0, e2e_ms_per_token = 0;
  std::vector<int32_t> tokens;
};

// The /summary columns: every grid parameter and summary metric (the names of
// run attributes; a run without one gets -1, NaN or "").
struct Column {
  enum Kind { i64, f64, str } kind;
  std::string name;
};
const std::vector<Column>& summary_columns();
inline constexpr size_t kSummaryStrLen = 64;

// Checks the schema attributes; one-line error naming the file otherwise.
void check_schema(hid_t file, const std::string& path);
// Every run of an open results file (reads attrs and tokens).
std::vector<CompletedRun> read_completed(hid_t file, const std::string& path);

// Creates the empty file structure in an open file.
void init_file(hid_t file, const FileHeader& header);
// Adds one run group (attrs, datasets) and its /summary row.
void add_run(hid_t file, const RunRecord& r);
// Adds the /summary row of a run group already in the file (merge uses it).
void add_summary_row(hid_t file, hid_t run_group);

// A results path the process can write: not a folder, in an existing folder
// that allows writing (one-line tf::Error otherwise). Checked before the lock.
void check_output_path(const std::string& path);

class ResultsWriter {
 public:
  // Missing path: created with no runs (atomically). Existing: its checksum,
  // schema and /config must match the header (a resume), else a one-line
  // error, and the file is left as it is.
  // write = false (a tensor-parallel worker): reads what exists, never writes;
  // append() only records the run as completed.
  ResultsWriter(std::string path, const FileHeader& header, bool write = true);
  const std::map<std::string, CompletedRun>& completed() const { return done_; }
  // Writes the run atomically (see above) and records it as completed.
  void append(const RunRecord& r);
  double last_append_ms() const { return last_ms_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool write_ = true;
  std::map<std::string, CompletedRun> done_;
  h5::Bytes image_;  // the file's bytes as on disk
  double last_ms_ = 0;
};

}  // namespace tf::sweep
