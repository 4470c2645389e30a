// The sweep grid: lists of values per parameter (from the INI / command line)
// expanded into points, one per run. Parameters a method does not read are
// fixed to "n/a" values (-1 / "") before deduplication, so `ar` runs once per
// (prompt, context, sampling, seed, repetition) however many budgets are swept.
//
// Order (outermost first): prompt, context, max_new, temperature, top_p, seed,
// repetition -> a "unit" (its `ar` baseline first, then every other method's
// points). Units sharing (prompt, context) are adjacent, so one prefill serves
// them; a shard is a contiguous block of whole units, so every run finds its
// `ar` baseline in its own shard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tf::sweep {

struct GridSpec {
  std::vector<std::string> methods;  // ar is always added as the baseline
  std::vector<std::string> drafts;
  std::vector<int64_t> contexts;
  std::vector<int64_t> max_new;
  std::vector<int64_t> budgets, chunks, gamma1, gamma2, sinks, windows;
  std::vector<std::string> reretrieve;
  // Simulated acceptance tuples, canonical "A1/A2" ("" = a real run); empty
  // list = real runs only. Each tuple goes to the methods with that many
  // verifying levels; ar is never simulated (parse_simulate_list).
  std::vector<std::string> simulate_acceptance;
  std::vector<double> temperatures, top_ps;
  std::vector<uint64_t> seeds;
  int64_t repetitions = 1;
  int64_t n_prompts = 1;  // prompts are indices into the loaded prompt list
};

struct Point {
  int64_t index = 0;  // position in the whole (unsharded) grid
  int64_t unit = 0;   // baseline unit (see above)
  int64_t prompt = 0;
  int64_t context = 0;
  int64_t max_new = 0;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  int64_t rep = 0;
  std::string method, draft;
  int64_t budget = -1, chunk = -1, gamma1 = -1, gamma2 = -1, sink = -1, window = -1;
  std::string reretrieve;
  std::string simulate_acceptance;  // "" = a real run; else the rates, bottom level first, '/'-separated
  int64_t baseline = -1;  // index of the `ar` point of this unit (itself for ar)

  // Every parameter, canonical: equal keys <=> the same run. Prompt by name.
  std::string key(const std::vector<std::string>& prompt_names) const;
  bool is_baseline() const { return method == "ar"; }
};

// Which grid parameters a method reads (the rest become n/a).
// (speculative::run_method's named methods; gamma2 is the retrieval/middle level's block.)
struct MethodParams {
  bool draft, gamma1, gamma2, budget, chunk, streaming, reretrieve;
};
MethodParams method_params(const std::string& method);

// Expands the grid; a one-line error when it would exceed kMaxGridPoints.
std::vector<Point> expand(const GridSpec& g);
// A grid bigger than this is surely a typo (a range with a small step, a huge
// --repetitions), and expanding it would exhaust memory before the first run.
constexpr int64_t kMaxGridPoints = 1000000;
// An upper bound on expand(g).size() (before deduplication), saturating at INT64_MAX.
int64_t grid_points_bound(const GridSpec& g);

// The sweep's simulate-acceptance list: comma-separated entries, each `none`
// (a real run) or one field per verifying level separated by '/', a field
// being a rate in [0, 1] or alternatives a|b|c (the entry is then the cross
// product): "0.2|0.5/0.9|0.98, none" -> 0.2/0.9, 0.2/0.98, 0.5/0.9, 0.5/0.98, "".
// Canonical entries (shortest round-trip numbers), duplicates dropped.
std::vector<std::string> parse_simulate_list(const std::string& option, const std::string& text);
// Verifying levels of a named sweep method (spec, retrieval: 1; the 3-level ones: 2; ar: 0).
int64_t verifying_levels(const std::string& method);

struct Shard {
  int64_t index = 0, count = 1;
  static Shard parse(const std::string& s);  // "i/n", 0 <= i < n; one-line error naming --shard
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
};
// The points of shard s: contiguous blocks of whole units, unit u -> shard floor(u * n / U).
std::vector<Point> select_shard(const std::vector<Point>& all, const Shard& s);

// "1,2,4" or "256:1024:256" (inclusive range with a step) -> values; errors name `option`.
std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text);
std::vector<double> parse_real_list(const std::string& option, const std::string& text);
std::vector<std::string> parse_string_list(const std::string& option, const std::string& text);

}  // namespace tf::sweep
