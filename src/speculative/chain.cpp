#include "speculative/chain.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/env_knobs.h"

namespace tf::speculative {

SpecChain::SpecChain(Drafter& drafter, std::vector<LlamaModel*> verifiers, ChainOptions opt)
    : drafter_(&drafter), opt_(std::move(opt)) {
  for (LlamaModel* m : verifiers) {
    owned_.push_back(std::make_unique<ModelRunner>(*m, opt_.max_context));
    levels_.push_back(owned_.back().get());
  }
  init_checks();
}

SpecChain::SpecChain(std::vector<Verifier*> verifiers, Drafter& drafter, ChainOptions opt)
    : drafter_(&drafter), levels_(std::move(verifiers)), opt_(std::move(opt)) {
  init_checks();
}

void SpecChain::init_checks() {
  if (opt_.clock) clock_ = opt_.clock;
  TF_CHECK(!levels_.empty(), "spec chain: needs at least the target");
  TF_CHECK(opt_.gamma.size() >= levels_.size(),
           "spec chain: " << levels_.size() + 1 << " levels need " << levels_.size() << " gamma values");
  for (size_t l = 0; l < levels_.size(); ++l) {
    TF_CHECK(opt_.gamma[l] >= 1, "spec chain: gamma[" << l << "] must be >= 1");
    TF_CHECK(levels_[l]->vocab() == drafter_->vocab(),
             "spec chain: level " << l + 1 << " vocab differs from the drafter's");
  }
  TF_CHECK(opt_.simulate_acceptance.empty() || opt_.simulate_acceptance.size() == levels_.size(),
           "--simulate-acceptance: " << opt_.simulate_acceptance.size() << " rate(s) for " << levels_.size()
                                     << " verifying level(s)");
  for (double a : opt_.simulate_acceptance)
    TF_CHECK(a >= 0.0 && a <= 1.0, "--simulate-acceptance: rate " << a << " outside [0, 1]");
}

const ModelRunner& SpecChain::runner(int level) const {
  auto* r = dynamic_cast<const ModelRunner*>(levels_.at(size_t(level - 1)));
  TF_CHECK(r, "spec chain: level " << level << " is not a ModelRunner");
  return *r;
}

int64_t SpecChain::max_proposal(int level) const {
  // The drafter proposes at most gamma[0]; a middle level stops once it holds
  // gamma[l] tokens, after adding at most one sub-proposal and its extra token.
  int64_t m = opt_.gamma[0];
  for (int l = 1; l <= level; ++l) m = opt_.gamma[size_t(l)] - 1 + m + 1;
  return m;
}

bool SpecChain::use_device_sampling(const SamplingParams& sp) const {
  if (sp.greedy() || !opt_.simulate_acceptance.empty() || !drafter_->samples_on_device()) return false;
  for (auto* r : levels_)
    if (!r->distributions_on_device()) return false;
  // The verify kernel's proposals, and the rows one step leaves on the device.
  return max_proposal(levels() - 2) + 1 <= 32;
}

void SpecChain::verify_into(int level, std::vector<int32_t>& context, const Proposal& sub,
                            const SamplingParams& sp, VerifyResult& vr, std::vector<float>& p, int64_t p_row) {
  Verifier& run = *levels_[size_t(level - 1)];
  LevelMetrics& m = metrics_[size_t(level)];
  ScopedPhase timed(*clock_, m.ns);
  const int64_t V = run.vocab();
  const int64_t g = int64_t(sub.tokens.size());
  const size_t n_ctx = context.size();
  context.insert(context.end(), sub.tokens.begin(), sub.tokens.end());
  const bool top = level == levels() - 1;
  if (sp.greedy()) {
    // T = 0 needs only each row's argmax: no one-hot rows of the vocabulary are
    // built, copied upward or scanned again (three passes over V per row, a
    // quarter of a 5-token verification of a 135M model on the GPU), and on a
    // CUDA level the argmax is the device's: g + 1 int32 come back, no logits.
    run.greedy_ids(context, g + 1, best_);
    context.resize(n_ctx);
    vr = opt_.simulate_acceptance.empty()
             ? verify_greedy(sub.tokens, best_)
             : verify_simulated_greedy(sub.tokens, best_, opt_.simulate_acceptance[size_t(level - 1)],
                                       sim_rng_[size_t(level)]);
  } else if (device_) {
    // The rows stay on the device; the decision comes back.
    DeviceSampler& rows = dev_rows_[size_t(level)];
    Tensor pr = rows.view(p_row, g + 1);
    run.device_distributions(context, g + 1, sp, pr);
    context.resize(n_ctx);
    vr = rows.verify(sub.tokens, sub.q_device, pr, rng_[size_t(level)], top ? opt_.top_mode : opt_.middle_mode);
  } else {
    Tensor lg = run.logits(context, g + 1);
    context.resize(n_ctx);
    const size_t p_offset = size_t(p_row * V);
    if (p.size() < p_offset + size_t((g + 1) * V)) p.resize(p_offset + size_t((g + 1) * V));
    float* pl = p.data() + p_offset;
    if (opt_.simulate_acceptance.empty()) {
      // p rows are made as verification reaches them: none after a rejection.
      vr = verify_logits(sub.tokens, sub.q.data(), lg.ptr<float>(), V, sp, rng_[size_t(level)], pl, scratch_,
                         top ? opt_.top_mode : opt_.middle_mode);
    } else {  // only the decisions are simulated: the forwards above ran at their real shapes
      for (int64_t i = 0; i <= g; ++i) sampling_distribution(lg.ptr<float>() + i * V, V, sp, pl + i * V);
      vr = verify_simulated(sub.tokens, sub.q.data(), pl, V, opt_.simulate_acceptance[size_t(level - 1)],
                            sim_rng_[size_t(level)], rng_[size_t(level)], false);
    }
  }
  ++m.steps;
  m.drafted += g;
  m.accepted += vr.accepted;
  m.rejected += vr.resampled ? 1 : 0;
  if (int64_t(m.accepted_hist.size()) <= vr.accepted) m.accepted_hist.resize(size_t(vr.accepted + 1), 0);
  ++m.accepted_hist[size_t(vr.accepted)];
}

Proposal SpecChain::propose(int level, std::vector<int32_t>& ctx, const SamplingParams& sp) {
  if (level == 0) {
    ScopedPhase timed(*clock_, metrics_[0].ns);
    return drafter_->propose(ctx, opt_.gamma[0], sp, rng_[0]);
  }
  const int64_t V = drafter_->vocab();
  Proposal out;
  const size_t n_ctx = ctx.size();
  VerifyResult vr;
  while (int64_t(out.tokens.size()) < opt_.gamma[size_t(level)]) {
    Proposal sub = propose(level - 1, ctx, sp);
    // Emitted token k was drawn (marginally) from p row k: that is its proposal
    // upward, so the rows are made in place at the end of out.q (or of this
    // level's device rows) and the ones past the emitted tokens cut off. At
    // T = 0 proposals carry no q (greedy verification reads ids only).
    const int64_t q_rows = int64_t(out.tokens.size());
    verify_into(level, ctx, sub, sp, vr, out.q, q_rows);
    if (!sp.greedy() && !device_) out.q.resize(size_t(q_rows + int64_t(vr.tokens.size())) * size_t(V));
    for (int32_t t : vr.tokens) {
      out.tokens.push_back(t);
      ctx.push_back(t);
    }
  }
  if (device_) out.q_device = dev_rows_[size_t(level)].view(0, int64_t(out.tokens.size()));
  ctx.resize(n_ctx);
  return out;
}

bool warm_step_graphs_default() {
  static const bool on = switch_from_env("TRIFORCE_WARM_STEP_GRAPHS", false);
  return on;
}

void SpecChain::warm_step_graphs(const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  // Any id will do: the rows are thrown away, and slots past the prompt are
  // rewritten before anything reads them (as after a rejection).
  const int32_t filler = prompt.back();
  std::vector<int32_t> seq = prompt;
  for (int level = 1; level < levels(); ++level) {
    Verifier& run = *levels_[size_t(level - 1)];
    // The proposals level - 1 can send: the drafter's gamma[0]; a middle level's
    // gamma[l] up to max_proposal(l). A verification forwards them and the token before.
    const int64_t g_min = opt_.gamma[size_t(level - 1)], g_max = max_proposal(level - 1);
    for (int64_t g = g_min; g <= g_max && g + 1 <= 32; ++g) {
      seq.resize(prompt.size());
      seq.insert(seq.end(), size_t(g), filler);
      for (int rep = 0; rep < 2; ++rep) {
        if (sp.greedy()) {
          run.greedy_ids(seq, g + 1, best_);
        } else if (device_) {
          Tensor pr = dev_rows_[size_t(level)].view(0, g + 1);
          run.device_distributions(seq, g + 1, sp, pr);
        } else {
          (void)run.logits(seq, g + 1);
        }
      }
      run.sync(prompt);
    }
  }
  // The drafter's steps, with an RNG of its own: the run's draws start where they would.
  for (int rep = 0; rep < 2; ++rep) {
    RngStream scratch = RngStream::for_level(sp.seed ^ 0x5741524Dull, 0);
    std::vector<int32_t> ctx = prompt;
    (void)drafter_->propose(ctx, opt_.gamma[0], sp, scratch);
    drafter_->sync(prompt);
  }
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

ChainResult SpecChain::generate(const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                const SamplingParams& sp, const std::vector<int64_t>& stop_ids) {
  TF_CHECK(!prompt.empty(), "spec chain: the prompt has no tokens");
  // Worst-case tokens one top step can put in a cache beyond the context.
  int64_t spec = opt_.gamma[0];
  for (int l = 1; l < levels() - 1; ++l) spec = opt_.gamma[size_t(l)] - 1 + spec + 1;
  TF_CHECK(int64_t(prompt.size()) + max_new_tokens + spec + 1 <= opt_.max_context,
           "spec chain: prompt (" << prompt.size() << ") + max new tokens (" << max_new_tokens
                                  << ") + speculation (" << spec + 1 << ") exceed the KV capacity "
                                  << opt_.max_context);
  drafter_->begin(prompt);
  for (auto* r : levels_) r->begin(prompt);
  rng_.clear();
  for (int l = 0; l < levels(); ++l) rng_.push_back(RngStream::for_level(sp.seed, l));
  sim_rng_.clear();
  for (int l = 0; l < levels(); ++l) sim_rng_.push_back(RngStream::for_simulation(sp.seed, l));
  metrics_.assign(size_t(levels()), LevelMetrics{});
  device_ = use_device_sampling(sp);
  drafter_->set_device_sampling(device_);
  if (device_) {
    dev_rows_.resize(size_t(levels()));
    // Level l's rows: its proposal upward (a middle level), or one verification's p rows (the top).
    for (int l = 1; l < levels(); ++l)
      dev_rows_[size_t(l)].reserve(l + 1 < levels() ? max_proposal(l) : max_proposal(l - 1) + 1, levels_[0]->vocab());
  }

  ChainResult res;
  if (opt_.warm_step_graphs) {
    const int64_t w0 = clock_->now_ns();
    warm_step_graphs(prompt, sp);
    res.warmup_ns = clock_->now_ns() - w0;
  }
  if (on_first_step) on_first_step();
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  std::vector<int32_t> ctx = prompt;
  ctx.reserve(prompt.size() + size_t(max_new_tokens) + size_t(spec) + 1 + size_t(opt_.gamma.back()));
  const int top = levels() - 1;
  auto t0 = std::chrono::steady_clock::now();
  auto t1 = t0;
  VerifyResult vr;
  bool done = max_new_tokens <= 0;
  std::vector<LevelMetrics> before;
  while (!done) {
    before = metrics_;
    const size_t gen_before = res.gen.tokens.size();
    Proposal cand = propose(top - 1, ctx, sp);
    verify_into(top, ctx, cand, sp, vr, p_top_, 0);
    ++res.top_steps;
    for (int32_t t : vr.tokens) {
      res.gen.tokens.push_back(t);
      ctx.push_back(t);
      if (res.gen.tokens.size() == 1) {
        res.gen.prefill_ms = ms_since(t0);
        t1 = std::chrono::steady_clock::now();
      }
      if (is_stop(t)) {
        res.gen.stopped_at_eos = true;
        done = true;
        break;
      }
      if (int64_t(res.gen.tokens.size()) >= max_new_tokens) {
        done = true;
        break;
      }
    }
    // Roll every cache back to the committed prefix.
    drafter_->sync(ctx);
    for (auto* r : levels_) r->sync(ctx);
    StepRecord rec;
    rec.drafted.assign(size_t(levels()), 0);
    rec.accepted.assign(size_t(levels()), 0);
    for (int l = 1; l < levels(); ++l) {
      rec.drafted[size_t(l)] = metrics_[size_t(l)].drafted - before[size_t(l)].drafted;
      rec.accepted[size_t(l)] = metrics_[size_t(l)].accepted - before[size_t(l)].accepted;
    }
    rec.generated = int64_t(res.gen.tokens.size() - gen_before);
    rec.ns.assign(size_t(levels()), 0);
    for (int l = 0; l < levels(); ++l) rec.ns[size_t(l)] = metrics_[size_t(l)].ns - before[size_t(l)].ns;
    res.steps.push_back(std::move(rec));
    if (on_step) on_step(*this, ctx, vr);
  }
  res.gen.decode_ms = res.gen.tokens.size() > 1 ? ms_since(t1) : 0.0;
  res.levels = metrics_;
  res.device_sampling = device_;
  return res;
}

}  // namespace tf::speculative
