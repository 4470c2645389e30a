// The T > 0 decisions of one level, as the level loop pays them (Google
// Benchmark, wall time per call including the wait for the decision, after
// warm-up, 5 repetitions: read the median), for SmolLM2's vocabulary (49,152):
//   BM_DraftDecision  one draft step's pick from its logits row;
//   BM_VerifyDecision one verification of g proposals from g + 1 logits rows.
// Arg 0 (path): 1 = on the device (ops::softmax_top_p into the rows, then
// ops::draw_rows / ops::verify_rows through speculative::DeviceSampler; 4 or
// 12 bytes come back), 0 = the host path it replaces (the logits rows copied
// back, RowSampler's rows and the host draw / verify_logits). top_p x 100 and
// g are the other args. The logits are normal(0, 3) at T = 0.6, so top-p keeps
// a few hundred tokens as a real row does.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "gen/sampling.h"
#include "ops/ops.h"
#include "speculative/device_sampler.h"
#include "speculative/drafter.h"
#include "speculative/verify.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using namespace tf;
constexpr int64_t kVocab = 49152;

bool have_device(benchmark::State& state) {
#ifdef TRIFORCE_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return true;
  cudaGetLastError();
#endif
  state.SkipWithError("no CUDA device");
  return false;
}

Tensor logits_rows(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(size_t(n * kVocab));
  for (auto& v : x) v = d(g);
  Tensor t = empty_tensor(Device::CUDA, DType::F32, {n, kVocab});
  copy_bytes(t.data, Device::CUDA, x.data(), Device::CPU, x.size() * 4);
  return t;
}

SamplingParams params(const benchmark::State& state) {
  SamplingParams sp;
  sp.temperature = 0.6f;
  sp.top_p = float(state.range(1)) / 100.0f;
  return sp;
}

template <class F>
void timed(benchmark::State& state, F&& call) {
  call();  // warm-up
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

void BM_DraftDecision(benchmark::State& state) {
  if (!have_device(state)) return;
  const bool device = state.range(0) == 1;
  const SamplingParams sp = params(state);
  const Tensor lg = logits_rows(1, 1);
  speculative::DeviceSampler rows;
  rows.reserve(1, kVocab);
  Tensor row = rows.view(0, 1);
  Tensor host = Tensor::cpu(DType::F32, {1, kVocab});
  std::vector<float> q(static_cast<size_t>(kVocab));
  speculative::RngStream rng{7, 0};
  timed(state, [&] {
    if (device) {
      ops::softmax_top_p(lg, row, speculative::softmax_params(sp));
      benchmark::DoNotOptimize(rows.draw(row, rng));
    } else {
      copy_bytes(host.data, Device::CPU, lg.data, Device::CUDA, size_t(kVocab) * 4);
      benchmark::DoNotOptimize(speculative::draft_token(host.ptr<float>(), kVocab, sp, rng, q.data()));
    }
  });
  state.SetLabel(device ? "device" : "host");
}

void BM_VerifyDecision(benchmark::State& state) {
  if (!have_device(state)) return;
  const bool device = state.range(0) == 1;
  const SamplingParams sp = params(state);
  const int64_t g = state.range(2);
  const Tensor lg = logits_rows(g + 1, 2), qlg = logits_rows(g, 3);
  // The proposals' q rows, made once as a drafter would, and tokens likely under them.
  speculative::DeviceSampler qd, pd;
  qd.reserve(g, kVocab);
  pd.reserve(g + 1, kVocab);
  Tensor qrows = qd.view(0, g), prows = pd.view(0, g + 1);
  ops::softmax_top_p(qlg, qrows, speculative::softmax_params(sp));
  std::vector<float> qh(size_t(g * kVocab)), ph(size_t((g + 1) * kVocab));
  copy_bytes(qh.data(), Device::CPU, qrows.data, Device::CUDA, qh.size() * 4);
  std::vector<int32_t> x(static_cast<size_t>(g));
  for (int64_t i = 0; i < g; ++i) x[size_t(i)] = int32_t(argmax_lowest(qh.data() + i * kVocab, kVocab));
  Tensor host = Tensor::cpu(DType::F32, {g + 1, kVocab});
  speculative::VerifyScratch scratch;
  speculative::RngStream rng{9, 0};
  timed(state, [&] {
    if (device) {
      ops::softmax_top_p(lg, prows, speculative::softmax_params(sp));
      benchmark::DoNotOptimize(pd.verify(x, qrows, prows, rng, speculative::ResampleMode::residual));
    } else {
      copy_bytes(host.data, Device::CPU, lg.data, Device::CUDA, host.bytes());
      benchmark::DoNotOptimize(speculative::verify_logits(x, qh.data(), host.ptr<float>(), kVocab, sp, rng, ph.data(),
                                                          scratch));
    }
  });
  state.SetLabel(device ? "device" : "host");
}

BENCHMARK(BM_DraftDecision)
    ->ArgNames({"device", "top_p_x100"})
    ->ArgsProduct({{1, 0}, {90, 100}})
    ->UseManualTime()
    ->MinTime(0.05)
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_VerifyDecision)
    ->ArgNames({"device", "top_p_x100", "g"})
    ->ArgsProduct({{1, 0}, {90, 100}, {4, 6}})
    ->UseManualTime()
    ->MinTime(0.05)
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
