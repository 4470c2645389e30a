// Runs the points of a (shard of a) sweep grid through speculative::run_method and
// appends each completed run to the results file. Points already in the file
// (same key) are skipped, so rerunning the same command resumes. One prefill
// snapshot per (prompt, context length) serves every point that shares it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/llama.h"
#include "speculative/methods.h"
#include "sweep/grid.h"
#include "sweep/prompts.h"
#include "sweep/results.h"
#include "tokenizer/tokenizer.h"

namespace tf::sweep {

struct RunnerOptions {
  std::vector<int64_t> stop_ids;  // empty: ignore EOS (fixed generation lengths)
  int64_t shard = 0;              // recorded in every run
  bool progress = true;           // one line per run on stderr
  std::function<void()> device_sync;  // before every clock read (GPU)
  std::string target_path;            // MethodRequest::target_path
  bool full_hierarchy = false;        // MethodRequest::full_hierarchy (--full-hierarchy)
  std::function<void(int64_t)> on_saved;  // after each run is in the file: the runs it holds
};

// The run record (attributes + datasets) of one point's outcome; `ar` is the
// outcome of the point's baseline (itself for ar), for speedup and equality.
RunRecord make_record(const Point& p, const std::vector<std::string>& prompt_names, const std::string& prompt_source,
                      const std::vector<int32_t>& prompt, const speculative::MethodOutcome& o, const CompletedRun* ar,
                      int64_t shard, double run_s);

struct SweepStats {
  int64_t ran = 0, skipped = 0, prefills = 0;
  double seconds = 0, append_ms = 0;
};

// points: a shard's points in grid order (whole units, baselines included).
SweepStats run_points(LlamaModel& target, const Tokenizer* tok, PromptSet& prompts, const std::vector<Point>& points,
                      ResultsWriter& out, const RunnerOptions& opt);

// The speculative::MethodRequest of a point (n/a parameters left at their defaults).
speculative::MethodRequest method_request(const Point& p, const std::vector<int64_t>& stop_ids);

}  // namespace tf::sweep
