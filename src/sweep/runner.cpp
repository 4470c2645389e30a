#include "sweep/runner.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/check.h"
#include "parallel/target_levels.h"
#include "speculative/simulate.h"
#include "sweep/interrupt.h"

namespace tf::sweep {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

// A short label of the point's swept parameters for progress lines.
std::string label(const Point& p, const std::vector<std::string>& names) {
  std::ostringstream os;
  os << p.method << " " << names[size_t(p.prompt)] << " ctx=" << p.context;
  if (p.budget >= 0) os << " B=" << p.budget;
  if (p.chunk >= 0) os << "/" << p.chunk;
  if (p.gamma1 >= 0 || p.gamma2 >= 0) {
    os << " g=";
    if (p.gamma1 >= 0) os << p.gamma1;
    if (p.gamma1 >= 0 && p.gamma2 >= 0) os << ",";
    if (p.gamma2 >= 0) os << p.gamma2;
  }
  if (!p.draft.empty()) os << " " << p.draft;
  if (p.sink >= 0) os << " s/w=" << p.sink << "/" << p.window;
  if (!p.reretrieve.empty() && p.reretrieve != "never") os << " rr=" << p.reretrieve;
  os << " T=" << p.temperature << " seed=" << p.seed;
  if (p.rep) os << " rep=" << p.rep;
  if (!p.simulate_acceptance.empty()) os << " SIMULATED acceptance " << p.simulate_acceptance;
  return os.str();
}

}  // namespace

speculative::MethodRequest method_request(const Point& p, const std::vector<int64_t>& stop_ids) {
  speculative::MethodRequest r;
  r.method = p.method;
  r.draft = p.draft;
  const MethodParams mp = method_params(p.method);
  const bool three_level = mp.gamma1 && mp.gamma2;
  if (p.method != "ar") {
    if (three_level) r.gammas = {p.gamma1 >= 0 ? p.gamma1 : 2, p.gamma2 >= 0 ? p.gamma2 : 6};
    else if (mp.gamma1) r.gammas = {p.gamma1 >= 0 ? p.gamma1 : 4};
    else if (mp.gamma2) r.gammas = {p.gamma2 >= 0 ? p.gamma2 : 6};
  }
  if (p.budget >= 0) r.budget = p.budget;
  if (p.chunk >= 0) r.chunk = p.chunk;
  if (p.sink >= 0) r.sink = p.sink;
  if (p.window >= 0) r.window = p.window;
  if (!p.reretrieve.empty()) r.reretrieve = p.reretrieve;
  r.sampling.temperature = float(p.temperature);
  r.sampling.top_p = float(p.top_p);
  r.sampling.seed = p.seed;
  r.max_new_tokens = p.max_new;
  r.stop_ids = stop_ids;
  if (!p.simulate_acceptance.empty())
    r.simulate_acceptance = speculative::parse_acceptance_rates(p.simulate_acceptance, "--simulate-acceptance", '/');
  return r;
}

RunRecord make_record(const Point& p, const std::vector<std::string>& names, const std::string& prompt_source,
                      const std::vector<int32_t>& prompt, const speculative::MethodOutcome& o, const CompletedRun* ar,
                      int64_t shard, double run_s) {
  RunRecord r;
  r.index = p.index;
  Attrs& a = r.attrs;
  auto I = [&](const std::string& k, int64_t v) { a.emplace_back(k, v); };
  auto R = [&](const std::string& k, double v) { a.emplace_back(k, v); };
  auto S = [&](const std::string& k, const std::string& v) { a.emplace_back(k, v); };
  S("key", p.key(names));
  I("unit", p.unit);
  I("baseline_index", p.baseline);
  I("shard", shard);
  S("prompt", names[size_t(p.prompt)]);
  S("prompt_source", prompt_source);
  S("prompt_hash", token_hash(prompt));
  I("context", p.context);
  I("max_new_tokens", p.max_new);
  S("method", p.method);
  S("draft", p.draft);
  I("budget", p.budget);
  I("chunk", p.chunk);
  I("gamma1", p.gamma1);
  I("gamma2", p.gamma2);
  I("sink", p.sink);
  I("window", p.window);
  S("reretrieve", p.reretrieve);
  // "" for a real run; else the simulated rates per verifying level ("0.35/0.9137"): the run's
  // alpha_l<l> then measure the simulation, and its tokens are not the target's.
  S("simulated_acceptance", p.simulate_acceptance);
  R("temperature", p.temperature);
  R("top_p", p.top_p);
  I("seed", int64_t(p.seed));
  I("rep", p.rep);
  // What run_method resolved the defaults to.
  S("chain", o.resolved.chain.str());
  // The middle levels dropped because their retrieval budget covered the whole context
  // ("target@retrieval:8/8", ","-joined; "" when the chain ran as requested).
  std::string collapsed;
  for (const auto& c : o.resolved.collapsed_levels) collapsed += (collapsed.empty() ? "" : ",") + c;
  S("collapsed_levels", collapsed);
  std::string gs;
  for (auto g : o.resolved.gammas) gs += (gs.empty() ? "" : ",") + std::to_string(g);
  S("resolved_gammas", gs);
  // -1 where the method has no such parameter (run_method resolves them all).
  const MethodParams mp = method_params(p.method);
  I("resolved_budget", mp.budget ? o.resolved.budget : -1);
  I("resolved_chunk", mp.chunk ? o.resolved.chunk : -1);
  I("resolved_sink", mp.streaming ? o.resolved.sink : -1);
  I("resolved_window", mp.streaming ? o.resolved.window : -1);

  const int64_t n = int64_t(o.tokens.size());
  const double nd = double(std::max<int64_t>(1, n));
  I("n_generated", n);
  I("stopped_at_eos", o.stopped_at_eos ? 1 : 0);
  I("top_steps", int64_t(o.steps.size()));
  I("prefill_reused", o.prefill_reused ? 1 : 0);
  const auto& t = o.times;
  R("prefill_ms", double(t.prefill) / 1e6);
  R("decode_ms_per_token", o.decode_ms_per_token);
  R("e2e_ms_per_token", o.e2e_ms_per_token);
  R("tokens_per_s", o.decode_ms_per_token > 0 ? 1000.0 / o.decode_ms_per_token : 0.0);
  const bool is_ar = p.is_baseline();
  const double ar_dec = is_ar ? o.decode_ms_per_token : ar ? ar->decode_ms_per_token : std::nan("");
  const double ar_e2e = is_ar ? o.e2e_ms_per_token : ar ? ar->e2e_ms_per_token : std::nan("");
  R("speedup_vs_ar", ar_dec / o.decode_ms_per_token);
  R("speedup_e2e_vs_ar", ar_e2e / o.e2e_ms_per_token);
  // Exactness at T = 0: the speculative output must be ar's, token for token.
  int64_t equal = -1;
  // (A simulated run differs from ar by design: -1, not checked.)
  if (p.temperature == 0 && (is_ar || ar) && p.simulate_acceptance.empty())
    equal = is_ar || ar->tokens == o.tokens ? 1 : 0;
  I("tokens_equal_ar", equal);
  I("retrieval_rebuilds", o.retrieval_rebuilds);
  S("token_kinds", o.token_kinds);
  for (const auto& [k, v] : std::vector<std::pair<const char*, int64_t>>{
           {"prefill_ns", t.prefill}, {"setup_ns", t.setup}, {"retrieval_build_ns", t.retrieval_build},
           {"draft_prefill_ns", t.draft_prefill}, {"draft_ns", t.draft}, {"middle_ns", t.middle}, {"verify_ns", t.verify},
           {"retrieval_rebuild_ns", t.retrieval_rebuild}, {"decode_ns", t.decode}, {"total_ns", t.total}})
    I(k, v);
  R("draft_ms_per_token", double(t.draft) / 1e6 / nd);
  R("middle_ms_per_token", double(t.middle) / 1e6 / nd);
  R("verify_ms_per_token", double(t.verify) / 1e6 / nd);
  R("rebuild_ms_per_token", double(t.retrieval_rebuild) / 1e6 / nd);
  R("other_ms_per_token", double(t.decode - t.draft - t.middle - t.verify - t.retrieval_rebuild) / 1e6 / nd);
  R("setup_ms", double(t.setup) / 1e6);
  R("retrieval_build_ms", double(t.retrieval_build) / 1e6);
  R("draft_prefill_ms", double(t.draft_prefill) / 1e6);
  R("run_s", run_s);
  I("n_levels", int64_t(o.levels.size()));
  for (const auto& l : o.levels) {
    const std::string s = "_l" + std::to_string(l.level);
    S("spec" + s, l.spec);
    I("gamma" + s, l.gamma);
    I("steps" + s, l.steps);
    I("drafted" + s, l.drafted);
    I("accepted" + s, l.accepted);
    I("rejected" + s, l.rejected);
    R("alpha" + s, l.alpha);
    R("tau" + s, l.tau);
    I("ns" + s, l.ns);
    if (&l == &o.levels.back()) {
      R("avg_tokens" + s, l.avg_tokens);
      R("alpha_top", l.alpha);
      R("tau_top", l.tau);
    }
    r.datasets.push_back({"accepted_hist" + s, l.accepted_hist, "steps"});
  }
  r.datasets.push_back({"tokens", o.tokens, "token id"});
  if (!o.steps.empty()) {
    for (size_t l = 1; l <= o.levels.size(); ++l) {
      std::vector<int32_t> d, acc;
      for (const auto& st : o.steps) {
        d.push_back(l < st.drafted.size() ? int32_t(st.drafted[l]) : 0);
        acc.push_back(l < st.accepted.size() ? int32_t(st.accepted[l]) : 0);
      }
      r.datasets.push_back({"steps/drafted_l" + std::to_string(l), d, "tokens"});
      r.datasets.push_back({"steps/accepted_l" + std::to_string(l), acc, "tokens"});
    }
    std::vector<int32_t> gen;
    for (const auto& st : o.steps) gen.push_back(int32_t(st.generated));
    r.datasets.push_back({"steps/generated", gen, "tokens"});
    // Per-step phase times: level 0 is the drafter, l >= 1 the verifying levels.
    for (size_t l = 0; l <= o.levels.size(); ++l) {
      std::vector<int64_t> ns;
      for (const auto& st : o.steps) ns.push_back(l < st.ns.size() ? st.ns[l] : 0);
      r.datasets.push_back({"steps/ns_l" + std::to_string(l), ns, "ns"});
    }
  }
  return r;
}

SweepStats run_points(LlamaModel& target, const Tokenizer* tok, PromptSet& prompts, const std::vector<Point>& points,
                      ResultsWriter& out, const RunnerOptions& opt) {
  const auto& names = prompts.names();
  SweepStats st;
  const auto t_start = std::chrono::steady_clock::now();
  std::map<int64_t, const Point*> by_index;
  for (const auto& p : points) by_index[p.index] = &p;
  int64_t todo = 0;
  for (const auto& p : points)
    if (!out.completed().count(p.key(names))) ++todo;
  st.skipped = int64_t(points.size()) - todo;
  if (opt.progress && st.skipped)
    std::fprintf(stderr, "resuming %s: %lld of %zu runs already done\n", out.path().c_str(), (long long)st.skipped,
                 points.size());
  speculative::DraftModels drafts;
  double run_seconds = 0;
  size_t i = 0;
  while (i < points.size()) {
    // One (prompt, context) group: consecutive in grid order.
    size_t j = i;
    while (j < points.size() && points[j].prompt == points[i].prompt && points[j].context == points[i].context) ++j;
    bool pending = false;
    for (size_t k = i; k < j; ++k) pending |= !out.completed().count(points[k].key(names));
    if (pending) {
      const std::vector<int32_t> prompt = prompts.cut(points[i].prompt, points[i].context, tok);
      for (auto id : prompt)
        TF_CHECK(id >= 0 && id < target.config().vocab_size,
                 "sweep: prompt " << names[size_t(points[i].prompt)] << " holds token " << id
                                  << ", outside the target's vocabulary of " << target.config().vocab_size);
      // Driven tensor parallelism: the workers take their prefill too.
      const std::unique_ptr<speculative::PrefillSnapshot> snap =
          parallel::TargetLevels(target).snapshot(prompt, speculative::PhaseClock(opt.device_sync));
      ++st.prefills;
      for (size_t k = i; k < j; ++k) {
        const Point& p = points[k];
        const std::string key = p.key(names);
        if (out.completed().count(key)) continue;
        const CompletedRun* ar = nullptr;
        if (!p.is_baseline()) {
          auto b = by_index.find(p.baseline);
          TF_CHECK(b != by_index.end(), "sweep: the ar baseline of point " << p.index << " is not in this shard");
          auto it = out.completed().find(b->second->key(names));
          TF_CHECK(it != out.completed().end(), "sweep: the ar baseline of point " << p.index << " has not run");
          ar = &it->second;
        }
        const auto t0 = std::chrono::steady_clock::now();
        speculative::MethodRequest req = method_request(p, opt.stop_ids);
        req.device_sync = opt.device_sync;
        req.target_path = opt.target_path;
        req.full_hierarchy = opt.full_hierarchy;
        speculative::MethodOutcome o = speculative::run_method(target, req, prompt, snap.get(), &drafts);
        const double run_s = seconds_since(t0);
        RunRecord rec = make_record(p, names, prompts.source(p.prompt), prompt, o, ar, opt.shard, run_s);
        {
          const DeferSignals defer;  // the file and the interrupt note change together
          out.append(rec);
          if (opt.on_saved) opt.on_saved(int64_t(out.completed().size()));
        }
        st.append_ms += out.last_append_ms();
        ++st.ran;
        run_seconds += seconds_since(t0);
        if (opt.progress) {
          const double eta = run_seconds / double(st.ran) * double(todo - st.ran);
          std::string levels;
          for (const auto& l : o.levels) {
            char b[32];
            std::snprintf(b, sizeof b, "%s%.2f", levels.empty() ? "" : "/", l.alpha);
            levels += b;
          }
          if (!p.simulate_acceptance.empty()) {  // what the simulated decisions gave, against the rates set
            levels += " (per decision ";
            for (const auto& l : o.levels) {
              char b[32];
              std::snprintf(b, sizeof b, "%s%.2f", &l == &o.levels.front() ? "" : "/",
                            l.accepted + l.rejected ? double(l.accepted) / double(l.accepted + l.rejected) : 0.0);
              levels += b;
            }
            levels += ")";
          }
          const double speed = o.decode_ms_per_token > 0 ? 1000.0 / o.decode_ms_per_token : 0.0;
          const double su = p.is_baseline() ? 1.0 : ar->decode_ms_per_token / o.decode_ms_per_token;
          std::fprintf(stderr, "[%*lld/%lld] %s: %.1f tok/s, %.2fx ar%s%s, %.1f s | ETA %s\n",
                       int(std::to_string(todo).size()), (long long)st.ran, (long long)todo,
                       label(p, names).c_str(), speed, su, levels.empty() ? "" : ", alpha ", levels.c_str(), run_s,
                       hms(eta).c_str());
        }
      }
    }
    i = j;
  }
  st.seconds = seconds_since(t_start);
  return st;
}

}  // namespace tf::sweep
