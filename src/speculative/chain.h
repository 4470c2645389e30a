// An N-level speculative chain (TriForce generalised). Level 0 is a Drafter;
// levels 1..N-1 are LlamaModels with their own caches, level N-1 the target.
// Level l (1 <= l < N-1, a "middle" level) builds its proposal for level l+1 by
// repeatedly asking level l-1 for proposals and verifying them with verify():
// it keeps going until it holds at least gamma[l] tokens; each emitted token
// carries level l's distribution p as its proposal q upward. The top level
// verifies one such block per step. gamma[0] is the drafter's tokens per call
// (γ1), gamma[1] the middle level's block (γ2), ...; gamma[N-1] is unused.
// generate() starts every level with begin(prompt) (a level prepared for this
// prompt, e.g. from a PrefillSnapshot, keeps what it holds).
// Every cache is rolled back (truncated to the committed prefix) after each
// verification. Lossless at any temperature/top-p with ResampleMode::residual;
// exactly generate_autoregressive's output at T = 0.
// At T > 0, where the drafter and every level can (CUDA models with the whole
// vocabulary's head; unless TRIFORCE_DEVICE_SAMPLING=0), the q and p rows
// stay on the device and only the decisions come back (device_sampler.h);
// otherwise they come to the host as logits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gen/autoregressive.h"
#include "gen/sampling.h"
#include "speculative/drafter.h"
#include "speculative/phase_timer.h"
#include "speculative/verify.h"

namespace tf::speculative {

// How level l verified the proposals of level l-1 (l >= 1).
struct LevelMetrics {
  int64_t steps = 0;     // verify() calls
  int64_t drafted = 0;   // proposals received
  int64_t accepted = 0;  // proposals accepted
  int64_t rejected = 0;  // steps that ended in a rejection: accepted / (accepted + rejected) is the per-token α
  std::vector<int64_t> accepted_hist;  // [n] = steps that accepted exactly n
  int64_t ns = 0;  // wall time of this level's own work (level 0: proposing; l >= 1: its forwards + verify)
  double alpha() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tau() const { return steps ? 1.0 + double(accepted) / double(steps) : 0.0; }
};

struct ChainOptions {
  std::vector<int64_t> gamma;  // per level, see above; size >= levels - 1
  ResampleMode middle_mode = ResampleMode::residual;  // levels below the top
  ResampleMode top_mode = ResampleMode::residual;
  int64_t max_context = 4096;  // capacity of every cache (prompt + generated + speculation)
  const PhaseClock* clock = nullptr;  // nullptr: a plain steady_clock (CPU)
  // Systems studies: [l - 1] = the acceptance probability simulated at
  // verifier level l (verify_simulated); empty = real verification. One per
  // verifying level when set.
  std::vector<double> simulate_acceptance;
  // Before the first step, record the step graphs the levels will replay
  // (warm_step_graphs): each verifying level forwards filler tokens at every
  // proposal size it can be sent, twice (a key's first use runs eagerly, the
  // second is recorded), the drafter proposes twice, and every cache is rolled
  // back to the prompt. The decisions, the tokens and every level's counts are
  // those of a run without it; its time is ChainResult::warmup_ns, outside the
  // steps. Off by default (TRIFORCE_WARM_STEP_GRAPHS=1) until measured.
  bool warm_step_graphs = false;
};

// TRIFORCE_WARM_STEP_GRAPHS: 0 (default) or 1; read once, anything else fails naming the variable.
bool warm_step_graphs_default();

// One top-level step: what each level drafted and accepted during it.
struct StepRecord {
  std::vector<int64_t> drafted, accepted;  // [l] for verifier level l >= 1 ([0] unused, 0)
  int64_t generated = 0;                   // tokens committed by this step
  // [l] wall time level l spent in this step (0 = the drafter proposing; l >= 1
  // its forwards + verification), from the same clock as LevelMetrics::ns, so
  // the steps' sums equal the levels' totals.
  std::vector<int64_t> ns;
};

struct ChainResult {
  GenerateResult gen;
  std::vector<LevelMetrics> levels;  // [0] unused (the drafter), [l] = level l as verifier
  int64_t top_steps = 0;
  std::vector<StepRecord> steps;
  bool device_sampling = false;  // T > 0 rows and decisions stayed on the device (see above)
  int64_t warmup_ns = 0;         // ChainOptions::warm_step_graphs, inside generate() but before the first step
};

class SpecChain {
 public:
  // verifiers: levels 1..N-1 bottom-up (the last one is the target). Not owned.
  SpecChain(Drafter& drafter, std::vector<LlamaModel*> verifiers, ChainOptions opt);
  // Levels given as Verifiers (e.g. a RetrievalRunner for the middle level). Not owned.
  SpecChain(std::vector<Verifier*> verifiers, Drafter& drafter, ChainOptions opt);

  ChainResult generate(const std::vector<int32_t>& prompt, int64_t max_new_tokens, const SamplingParams& sp,
                       const std::vector<int64_t>& stop_ids = {});

  int levels() const { return int(levels_.size()) + 1; }
  // Cache state (for tests): the runner of level l >= 1, and the drafter.
  // runner(): only for levels built from a LlamaModel (throws otherwise).
  const ModelRunner& runner(int level) const;
  const Verifier& verifier(int level) const { return *levels_.at(size_t(level - 1)); }
  const Drafter& drafter() const { return *drafter_; }
  const std::vector<LevelMetrics>& metrics() const { return metrics_; }  // running, [l] as in ChainResult
  // Called once before the first step, after any warm-up.
  std::function<void()> on_first_step;
  // Called after every top-level step with the committed context (for tests).
  std::function<void(const SpecChain&, const std::vector<int32_t>& context, const VerifyResult& top)> on_step;

 private:
  // context: the committed context, extended in place while a call works and
  // restored before it returns, so no call copies the prompt.
  Proposal propose(int level, std::vector<int32_t>& context, const SamplingParams& sp);
  // T > 0: level's p rows [g+1, V] go to rows p_row.. of p (p grows to fit),
  // or of the level's device rows (device_); rows 0..vr.accepted are the
  // emitted tokens' (the rest may be unwritten).
  void verify_into(int level, std::vector<int32_t>& context, const Proposal& sub, const SamplingParams& sp,
                   VerifyResult& vr, std::vector<float>& p, int64_t p_row);
  // Whether this generate() keeps T > 0 rows on the device, and the rows each
  // level reserves for it (the most p rows one of its proposals can hold).
  bool use_device_sampling(const SamplingParams& sp) const;
  int64_t max_proposal(int level) const;
  // ChainOptions::warm_step_graphs, after begin(prompt) (the caches hold the prompt).
  void warm_step_graphs(const std::vector<int32_t>& prompt, const SamplingParams& sp);

  Drafter* drafter_;
  void init_checks();
  std::vector<std::unique_ptr<ModelRunner>> owned_;
  std::vector<Verifier*> levels_;
  ChainOptions opt_;
  std::vector<RngStream> rng_;
  std::vector<RngStream> sim_rng_;  // simulated decisions, per level (simulate_acceptance)
  std::vector<LevelMetrics> metrics_;
  std::vector<int32_t> best_;  // T = 0: the verifier's argmax per row
  VerifyScratch scratch_;      // T > 0: buffers reused by every level's verification
  std::vector<float> p_top_;   // T > 0: the top level's p rows, reused step to step
  bool device_ = false;        // T > 0 on the device (use_device_sampling)
  std::vector<DeviceSampler> dev_rows_;  // [l]: level l's p rows on the device (l >= 1)
  PhaseClock default_clock_;
  const PhaseClock* clock_ = &default_clock_;
};

}  // namespace tf::speculative
