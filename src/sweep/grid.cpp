#include "sweep/grid.h"

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "speculative/simulate.h"

namespace tf::sweep {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

int64_t to_int(const std::string& option, const std::string& item) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(item.c_str(), &end, 10);
  TF_CHECK(!item.empty() && end && *end == '\0' && errno == 0,
           "--" << option << ": '" << item << "' is not an integer");
  return v;
}

double to_real(const std::string& option, const std::string& item) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(item.c_str(), &end);
  TF_CHECK(!item.empty() && end && *end == '\0' && errno == 0,
           "--" << option << ": '" << item << "' is not a number");
  return v;
}

// Real numbers in keys: shortest text that reads back to the same double.
std::string real_str(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream t;
    t.precision(p);
    t << v;
    if (std::strtod(t.str().c_str(), nullptr) == v) return t.str();
  }
  return os.str();
}

}  // namespace

std::vector<std::string> parse_string_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  TF_CHECK(!out.empty(), "--" << option << ": expected a comma-separated list, got '" << text << "'");
  return out;
}

std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : parse_string_list(option, text)) {
    const auto c1 = item.find(':');
    if (c1 == std::string::npos) {
      out.push_back(to_int(option, item));
      continue;
    }
    const auto c2 = item.find(':', c1 + 1);
    TF_CHECK(c2 != std::string::npos, "--" << option << ": range '" << item << "' must be FIRST:LAST:STEP");
    const int64_t first = to_int(option, item.substr(0, c1));
    const int64_t last = to_int(option, item.substr(c1 + 1, c2 - c1 - 1));
    const int64_t step = to_int(option, item.substr(c2 + 1));
    TF_CHECK(step > 0 && last >= first, "--" << option << ": range '" << item << "' needs LAST >= FIRST and STEP > 0");
    // In unsigned arithmetic: last - first and v + step may not fit an int64.
    const uint64_t steps = (uint64_t(last) - uint64_t(first)) / uint64_t(step);
    TF_CHECK(steps < 100000, "--" << option << ": range '" << item << "' has too many values");
    for (uint64_t i = 0; i <= steps; ++i) out.push_back(int64_t(uint64_t(first) + i * uint64_t(step)));
  }
  return out;
}

std::vector<double> parse_real_list(const std::string& option, const std::string& text) {
  std::vector<double> out;
  for (const auto& item : parse_string_list(option, text)) out.push_back(to_real(option, item));
  return out;
}

std::vector<std::string> parse_simulate_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& entry : parse_string_list(option, text)) {
    if (entry == "none") {
      if (seen.insert("").second) out.push_back("");
      continue;
    }
    // Per level, its alternatives; then every combination, the last level fastest.
    std::vector<std::vector<double>> levels;
    std::stringstream ss(entry);
    std::string field;
    while (std::getline(ss, field, '/'))
      levels.push_back(speculative::parse_acceptance_rates(field, "--" + option + " '" + entry + "':", '|'));
    TF_CHECK(!levels.empty() && entry.back() != '/',
             "--" << option << ": '" << entry << "': expected none or one rate per verifying level separated by '/'");
    std::vector<std::vector<double>> combos = {{}};
    for (const auto& alts : levels) {
      std::vector<std::vector<double>> next;
      for (const auto& c : combos)
        for (double a : alts) {
          next.push_back(c);
          next.back().push_back(a);
        }
      combos = std::move(next);
    }
    for (const auto& c : combos) {
      const std::string k = speculative::acceptance_str(c, '/');
      if (seen.insert(k).second) out.push_back(k);
    }
  }
  return out;
}

int64_t verifying_levels(const std::string& m) {
  if (m == "ar") return 0;
  if (m == "spec" || m == "retrieval") return 1;
  return 2;  // streaming-hier, triforce, ngram-triforce
}

MethodParams method_params(const std::string& m) {
  //                         draft  γ1     γ2     budget chunk  sink/w reretr
  if (m == "ar") return {false, false, false, false, false, false, false};
  if (m == "spec") return {true, true, false, false, false, false, false};
  if (m == "retrieval") return {false, false, true, true, true, false, true};
  // The middle level is the target on a streaming cache of `budget` tokens.
  if (m == "streaming-hier") return {true, true, true, true, false, true, false};
  // The n-gram drafter keeps no cache, so sink/window do not apply.
  if (m == "ngram-triforce") return {true, true, true, true, true, false, true};
  // triforce and any method added later: every parameter counts, so nothing
  // is deduplicated by mistake.
  return {true, true, true, true, true, true, true};
}

std::string Point::key(const std::vector<std::string>& prompt_names) const {
  std::ostringstream os;
  os << "prompt=" << prompt_names.at(size_t(prompt)) << ";context=" << context << ";max_new=" << max_new
     << ";temperature=" << real_str(temperature) << ";top_p=" << real_str(top_p) << ";seed=" << seed
     << ";rep=" << rep << ";method=" << method << ";draft=" << draft << ";gamma1=" << gamma1
     << ";gamma2=" << gamma2 << ";budget=" << budget << ";chunk=" << chunk << ";sink=" << sink
     << ";window=" << window << ";reretrieve=" << reretrieve;
  // Only simulated runs carry it, so a real run's key is what it always was.
  if (!simulate_acceptance.empty()) os << ";simulate_acceptance=" << simulate_acceptance;
  return os.str();
}

int64_t grid_points_bound(const GridSpec& g) {
  constexpr int64_t kSat = std::numeric_limits<int64_t>::max();
  auto mul = [](int64_t a, int64_t b) { return a == 0 || b <= kSat / a ? a * b : kSat; };
  auto n = [](bool used, size_t size) { return used && size > 0 ? int64_t(size) : int64_t(1); };
  int64_t per_unit = 1;  // ar
  for (const auto& m : g.methods) {
    if (m == "ar") continue;
    const MethodParams mp = method_params(m);
    int64_t k = n(mp.draft, g.drafts.size());
    for (int64_t f : {n(mp.gamma1, g.gamma1.size()), n(mp.gamma2, g.gamma2.size()), n(mp.budget, g.budgets.size()),
                      n(mp.chunk, g.chunks.size()), n(mp.streaming, g.sinks.size()), n(mp.streaming, g.windows.size()),
                      n(mp.reretrieve, g.reretrieve.size()), n(true, g.simulate_acceptance.size())})
      k = mul(k, f);
    per_unit = k >= kSat - per_unit ? kSat : per_unit + k;
  }
  int64_t units = std::max<int64_t>(g.n_prompts, 0);
  for (int64_t f : {int64_t(g.contexts.size()), int64_t(g.max_new.size()), int64_t(g.temperatures.size()),
                    int64_t(g.top_ps.size()), int64_t(g.seeds.size()), std::max<int64_t>(g.repetitions, 0)})
    units = mul(units, f);
  return mul(units, per_unit);
}

std::vector<Point> expand(const GridSpec& g) {
  auto need = [](bool nonempty, const char* what) { TF_CHECK(nonempty, "sweep: the grid has no " << what); };
  need(!g.methods.empty(), "methods (--method)");
  need(!g.contexts.empty(), "context lengths (--context)");
  need(!g.max_new.empty(), "generation lengths (--max-new-tokens)");
  need(!g.temperatures.empty() && !g.top_ps.empty(), "sampling parameters");
  need(!g.seeds.empty(), "seeds (--seed)");
  need(g.n_prompts > 0, "prompts");
  TF_CHECK(g.repetitions >= 1, "--repetitions: expected at least 1, got " << g.repetitions);
  for (auto c : g.contexts) TF_CHECK(c >= 1, "--context: expected positive token counts, got " << c);
  for (auto n : g.max_new) TF_CHECK(n >= 1, "--max-new-tokens: expected at least 1, got " << n);
  for (auto t : g.temperatures) TF_CHECK(t >= 0, "--temperature: expected >= 0, got " << t);
  for (auto p : g.top_ps) TF_CHECK(p > 0 && p <= 1, "--top-p: expected values in (0, 1], got " << p);
  const int64_t bound = grid_points_bound(g);
  TF_CHECK(bound <= kMaxGridPoints, "sweep: the grid has up to " << bound << " points (prompts x contexts x max-new-tokens"
                                        << " x temperatures x top-p x seeds x repetitions x each method's lists); at most "
                                        << kMaxGridPoints << " are allowed: narrow the lists");

  std::vector<Point> out;
  int64_t unit = 0;
  std::vector<std::string> methods = {"ar"};
  for (const auto& m : g.methods)
    if (m != "ar") methods.push_back(m);
  // Simulated tuples per method: those with its number of verifying levels.
  auto arity = [](const std::string& s) { return s.empty() ? 0 : int64_t(std::count(s.begin(), s.end(), '/')) + 1; };
  std::map<std::string, std::vector<std::string>> sims;
  for (const auto& m : methods) {
    if (m == "ar" || g.simulate_acceptance.empty()) {
      sims[m] = {""};  // ar is the real baseline, never simulated
      continue;
    }
    for (const auto& s : g.simulate_acceptance)
      if (s.empty() || arity(s) == verifying_levels(m)) sims[m].push_back(s);
    TF_CHECK(!sims[m].empty(), "--simulate-acceptance: no entry has " << verifying_levels(m) << " rate(s) for method "
                                                                      << m << "'s verifying levels; add one, or none "
                                                                      << "for a real run");
  }
  for (const auto& s : g.simulate_acceptance) {
    bool used = s.empty();
    for (const auto& m : methods) used |= m != "ar" && arity(s) == verifying_levels(m);
    TF_CHECK(used, "--simulate-acceptance: '" << s << "' has " << arity(s)
                                              << " rate(s), which fits no swept method's verifying levels "
                                              << "(spec, retrieval: 1; streaming-hier, triforce, ngram-triforce: 2)");
  }
  for (int64_t pr = 0; pr < g.n_prompts; ++pr)
    for (auto ctx : g.contexts)
      for (auto mn : g.max_new)
        for (auto t : g.temperatures)
          for (auto tp : g.top_ps)
            for (auto seed : g.seeds)
              for (int64_t rep = 0; rep < g.repetitions; ++rep, ++unit) {
                Point base;
                base.unit = unit;
                base.prompt = pr;
                base.context = ctx;
                base.max_new = mn;
                base.temperature = t;
                base.top_p = tp;
                base.seed = seed;
                base.rep = rep;
                const int64_t baseline = int64_t(out.size());
                std::set<std::string> seen;  // keys within this unit (prompt names are irrelevant here)
                const std::vector<std::string> names(size_t(g.n_prompts), "");
                for (const auto& m : methods) {
                  const MethodParams mp = method_params(m);
                  auto vals_s = [](bool used, const std::vector<std::string>& v) {
                    return used && !v.empty() ? v : std::vector<std::string>{""};
                  };
                  auto vals_i = [](bool used, const std::vector<int64_t>& v) {
                    return used && !v.empty() ? v : std::vector<int64_t>{-1};
                  };
                  // ngram-triforce reads only ngram:N drafts (else its default n-gram).
                  std::vector<std::string> drafts = vals_s(mp.draft, g.drafts);
                  if (m == "ngram-triforce") {
                    std::vector<std::string> ng;
                    for (const auto& d : drafts)
                      if (d.rfind("ngram:", 0) == 0) ng.push_back(d);
                    drafts = ng.empty() ? std::vector<std::string>{""} : ng;
                  }
                  for (const auto& d : drafts)
                    for (auto g1 : vals_i(mp.gamma1, g.gamma1))
                      for (auto g2 : vals_i(mp.gamma2, g.gamma2))
                        for (auto b : vals_i(mp.budget, g.budgets))
                          for (auto c : vals_i(mp.chunk, g.chunks))
                            for (auto s : vals_i(mp.streaming, g.sinks))
                              for (auto w : vals_i(mp.streaming, g.windows))
                                for (const auto& rr : vals_s(mp.reretrieve, g.reretrieve))
                                  for (const auto& sim : sims[m]) {
                                  Point p = base;
                                  p.method = m;
                                  p.draft = d;
                                  p.gamma1 = g1;
                                  p.gamma2 = g2;
                                  p.budget = b;
                                  p.chunk = c;
                                  p.sink = s;
                                  p.window = w;
                                  p.reretrieve = rr;
                                  p.simulate_acceptance = sim;
                                  if (!seen.insert(p.key(names)).second) continue;
                                  p.index = int64_t(out.size());
                                  p.baseline = baseline;
                                  out.push_back(p);
                                }
                }
              }
  return out;
}

Shard Shard::parse(const std::string& s) {
  const auto slash = s.find('/');
  TF_CHECK(slash != std::string::npos, "--shard " << s << ": expected I/N, e.g. 0/4");
  Shard sh;
  sh.index = to_int("shard", s.substr(0, slash));
  sh.count = to_int("shard", s.substr(slash + 1));
  TF_CHECK(sh.count >= 1 && sh.index >= 0 && sh.index < sh.count,
           "--shard " << s << ": expected 0 <= I < N");
  return sh;
}

std::vector<Point> select_shard(const std::vector<Point>& all, const Shard& s) {
  if (all.empty()) return {};
  const int64_t units = all.back().unit + 1;
  std::vector<Point> out;
  for (const auto& p : all)
    if (p.unit * s.count / units == s.index) out.push_back(p);
  return out;
}

}  // namespace tf::sweep
