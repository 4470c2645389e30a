// Host-side cost of the sampled (T > 0) speculative path at the default model's
// vocabulary (V = 49,152): the work the host does per proposal and per
// verification row whatever the backend, with the forward taken out (the
// levels below return precomputed logits rows, no copy).
//
// Logits: TRIFORCE_BENCH_LOGITS=DIR with DIR/target.npy and DIR/draft.npy
// (`triforce logits --out` of the target and of its draft over the same tokens,
// [rows, V] each; results/cpu/sampled-host-cost/README.md has the commands), or
// without it synthetic rows of about the same shape (logit range ~40, a few
// tokens standing out, the draft a noisy copy of the target).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>

#include "core/check.h"
#include "gen/sampling.h"
#include "io/npy.h"
#include "speculative/chain.h"
#include "speculative/drafter.h"
#include "speculative/verify.h"

namespace {

using namespace tf;
using namespace tf::speculative;

struct Bank {
  int64_t rows = 0, V = 0;
  std::vector<float> target, draft;
  const float* t(int64_t r) const { return target.data() + (r % rows) * V; }
  const float* d(int64_t r) const { return draft.data() + (r % rows) * V; }
};

const Bank& bank() {
  static Bank b = [] {
    Bank b;
    if (const char* dir = std::getenv("TRIFORCE_BENCH_LOGITS")) {
      NpyArray t = read_npy_array(std::string(dir) + "/target.npy");
      NpyArray d = read_npy_array(std::string(dir) + "/draft.npy");
      TF_CHECK(t.shape.size() == 2 && t.shape == d.shape && t.dtype == "f32" && d.dtype == "f32",
               "TRIFORCE_BENCH_LOGITS: target.npy and draft.npy must be f32 of one [rows, V] shape");
      b.rows = t.shape[0], b.V = t.shape[1];
      b.target = std::move(t.f32), b.draft = std::move(d.f32);
      return b;
    }
    b.rows = 64, b.V = 49152;
    std::mt19937 gen(5);
    std::normal_distribution<float> n(0.0f, 4.0f), noise(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> id(0, b.V - 1);
    b.target.resize(size_t(b.rows * b.V));
    b.draft.resize(b.target.size());
    for (int64_t r = 0; r < b.rows; ++r) {
      float* t = b.target.data() + r * b.V;
      for (int64_t v = 0; v < b.V; ++v) t[v] = n(gen);
      for (int k = 0; k < 4; ++k) t[id(gen)] += 12.0f - 2.0f * float(k);
      for (int64_t v = 0; v < b.V; ++v) b.draft[size_t(r * b.V + v)] = t[v] + noise(gen);
    }
    return b;
  }();
  return b;
}

SamplingParams params(int64_t top_p_percent) {
  SamplingParams sp;
  sp.temperature = 0.6f;
  sp.top_p = float(top_p_percent) / 100.0f;
  sp.seed = 1;
  return sp;
}

// One row: temperature, softmax and top-p over the vocabulary. Arg: top-p in percent.
void BM_SamplingDistribution(benchmark::State& state) {
  const Bank& b = bank();
  const SamplingParams sp = params(state.range(0));
  std::vector<float> probs(size_t(b.V));
  int64_t r = 0;
  for (auto _ : state) {
    sampling_distribution(b.t(r++), b.V, sp, probs.data());
    benchmark::DoNotOptimize(probs.data());
  }
  state.counters["V"] = double(b.V);
}
BENCHMARK(BM_SamplingDistribution)->Arg(100)->Arg(90)->Unit(benchmark::kMicrosecond);

// The drafter's pick of one token at T > 0: its q row and a draw from it.
void BM_DraftPick(benchmark::State& state) {
  const Bank& b = bank();
  const SamplingParams sp = params(state.range(0));
  std::vector<float> q(size_t(b.V));
  RngStream rng{7, 0};
  int64_t r = 0;
  for (auto _ : state) {
    sampling_distribution(b.d(r++), b.V, sp, q.data());
    benchmark::DoNotOptimize(draw_from(q.data(), b.V, rng.seed, rng.next()));
  }
}
BENCHMARK(BM_DraftPick)->Arg(100)->Arg(90)->Unit(benchmark::kMicrosecond);

// One verification of g proposals at T = 0.6 as a level does it
// (verify_logits: p rows of its g + 1 logits rows made as reached, exact
// rejection sampling against the drafter's q rows). The proposals and q rows are made outside the timed region, from the
// draft rows of the same positions. Args: g, top-p in percent.
void BM_Verify(benchmark::State& state) {
  const Bank& b = bank();
  const int64_t g = state.range(0), V = b.V;
  const SamplingParams sp = params(state.range(1));
  constexpr int kSets = 16;  // different positions, cycled
  std::vector<std::vector<float>> qs(kSets), logits(kSets);
  std::vector<std::vector<int32_t>> xs(kSets);
  RngStream draw{3, 0};
  for (int s = 0; s < kSets; ++s) {
    qs[s].resize(size_t(g * V));
    logits[s].resize(size_t((g + 1) * V));
    for (int64_t i = 0; i <= g; ++i) std::copy_n(b.t(s * 8 + i), V, logits[s].data() + i * V);
    for (int64_t i = 0; i < g; ++i) {
      sampling_distribution(b.d(s * 8 + i), V, sp, qs[s].data() + i * V);
      xs[s].push_back(draw_from(qs[s].data() + i * V, V, draw.seed, draw.next()));
    }
  }
  std::vector<float> p(size_t((g + 1) * V));
  VerifyScratch scratch;
  RngStream rng{9, 0};
  int64_t it = 0, accepted = 0;
  for (auto _ : state) {
    const int s = int(it++ % kSets);
    VerifyResult vr = verify_logits(xs[s], qs[s].data(), logits[s].data(), V, sp, rng, p.data(), scratch);
    accepted += vr.accepted;
    benchmark::DoNotOptimize(vr.tokens.data());
  }
  state.counters["accepted"] = benchmark::Counter(double(accepted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_Verify)
    ->ArgsProduct({{2, 3, 4, 5, 6}, {100, 90}})
    ->Unit(benchmark::kMicrosecond);

// A verifying level whose forward is free: logits rows [n_out, V] of the bank
// at the sequence's position, handed out as a view (no copy), so a chain built
// from these measures the host work of its steps alone.
class BankLevel : public Verifier {
 public:
  BankLevel(const Bank& b, bool draft) : b_(b), draft_(draft) {}
  int64_t vocab() const override { return b_.V; }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override {
    const int64_t first = (int64_t(seq.size()) - n_out) % (b_.rows - 8);
    Tensor t;
    t.data = const_cast<float*>(draft_ ? b_.d(first) : b_.t(first));
    t.shape = {n_out, b_.V};
    return t;
  }
  void sync(const std::vector<int32_t>&) override {}
  void reset() override {}

 private:
  const Bank& b_;
  bool draft_;
};

// One top-level step of `spec` (draft > target) with free forwards: the
// drafter's g picks, the target's verification and the chain's bookkeeping
// (proposal rows, rollbacks, metrics, step records). Args: g, top-p in
// percent (0: T = 0, the greedy path, for comparison).
void BM_ChainStep(benchmark::State& state) {
  const Bank& b = bank();
  const int64_t g = state.range(0);
  SamplingParams sp = params(state.range(1) ? state.range(1) : 100);
  if (state.range(1) == 0) sp.temperature = 0.0f;
  BankLevel target(b, false);
  VerifierDrafter drafter(std::make_unique<BankLevel>(b, true));
  ChainOptions opt;
  opt.gamma = {g};
  opt.max_context = 1024;
  SpecChain chain({&target}, drafter, opt);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t steps = 0, tokens = 0;
  for (auto _ : state) {
    ChainResult r = chain.generate(prompt, 64, sp);
    steps += r.top_steps;
    tokens += int64_t(r.gen.tokens.size());
  }
  // Microseconds per top-level step and per generated token.
  state.counters["us_per_step"] =
      benchmark::Counter(double(steps) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["us_per_token"] =
      benchmark::Counter(double(tokens) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["tokens_per_step"] = double(tokens) / double(steps);
}
BENCHMARK(BM_ChainStep)
    ->ArgsProduct({{2, 3, 4, 5, 6}, {100, 90, 0}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
