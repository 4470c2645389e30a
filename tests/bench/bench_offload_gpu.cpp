// KV offloading (--offload-kv) on one GPU, synthetic 7B shape (llama2-7b-128k,
// bf16): a decode step (n = 1) and a verify step (n = 7) with every layer's
// KV in pinned host memory, at 32K and 128K, against
//   transfer floor   the offloaded KV bytes / 55 GB/s (the H200's host link)
//   xfer_ms          the measured time to stream those layers alone (the copy pipeline, no compute)
//   compute_ms       the same step on an on-device cache
//   overlap_eff      max(compute, transfer floor) / measured (target >= 0.9)
//   overlap_eff_meas max(compute, measured transfer) / measured
// and offloaded prefill at 32K (chunks of 8192, so each chunk streams the
// prefix once) against the on-device prefill. Times are host wall-clock
// around LlamaModel::forward (which ends with the logits' copy), after
// warm-up; the medians of the repetitions are reported with
// --benchmark_repetitions.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/device.h"
#include "kv/kv_offload.h"
#include "model/llama.h"
#include "model/weights_device.h"

using namespace tf;

namespace {

constexpr double kHostLinkBytesPerS = 55e9;
constexpr int64_t kPrefillChunk = 8192;
const std::string kModel = "synthetic:llama2-7b-128k";

LlamaModel& model() {
  static std::unique_ptr<LlamaModel> m;
  if (!m) {
    const ModelConfig cfg = synthetic_config(kModel);
    m = std::make_unique<LlamaModel>(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16), kPrefillChunk);
  }
  return *m;
}

double offloaded_kv_bytes(const FullKVCache& c, int64_t len) {
  return 2.0 * double((c.num_layers() - c.on_chip_layers()) * c.num_kv_heads() * c.head_dim()) * 2.0 * double(len);
}

void set_length(FullKVCache& cache, int64_t len) {
  cache.truncate(0);
  std::vector<int32_t> pos(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) pos[size_t(i)] = int32_t(i);
  cache.append_slots(pos.data(), len);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median wall time of `reps` forwards of n tokens after `len` cached ones.
double time_step(LlamaModel& m, FullKVCache& c, int64_t len, int64_t n, int reps) {
  std::vector<int32_t> toks(static_cast<size_t>(n), 17);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = len + i;
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    set_length(c, len);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(toks, pos, c, n);
    if (r >= 2) t.push_back(seconds_since(t0));  // two warm-up forwards
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The copy pipeline alone: every offloaded layer's `len` slots staged in turn.
double time_transfer(const FullKVCache& c, int64_t reps) {
  std::vector<double> t;
  for (int64_t r = 0; r < reps + 1; ++r) {
    device_synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = c.on_chip_layers(); l < c.num_layers(); ++l) {
      c.stage_layer(l);
      kv_offload::release_staged();
    }
    device_synchronize();
    if (r >= 1) t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void step(benchmark::State& state, int64_t n) {
  LlamaModel& m = model();
  const int64_t ctx = state.range(0), len = ctx - n;
  m.set_kv_offload({true, 0});
  FullKVCache off = m.make_cache(ctx + 64);
  m.set_kv_offload({});
  double compute_s = 0;
  {
    FullKVCache dev = m.make_cache(ctx + 64);
    compute_s = time_step(m, dev, len, n, 5);
  }
  set_length(off, len);
  const double xfer_s = time_transfer(off, 3);
  const double floor_s = offloaded_kv_bytes(off, len) / kHostLinkBytesPerS;
  std::vector<int32_t> toks(static_cast<size_t>(n), 17);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = len + i;
  for (int i = 0; i < 2; ++i) {  // warm-up
    off.truncate(len);
    m.forward(toks, pos, off, n);
  }
  double total = 0;
  for (auto _ : state) {
    off.truncate(len);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(toks, pos, off, n);
    const double dt = seconds_since(t0);
    state.SetIterationTime(dt);
    total += dt;
  }
  const double mean_s = total / double(state.iterations());
  state.counters["step_ms"] = mean_s * 1e3;
  state.counters["floor_ms"] = floor_s * 1e3;
  state.counters["xfer_ms"] = xfer_s * 1e3;
  state.counters["compute_ms"] = compute_s * 1e3;
  state.counters["xfer_GBps"] = offloaded_kv_bytes(off, len) / xfer_s / 1e9;
  state.counters["overlap_eff"] = std::max(compute_s, floor_s) / mean_s;
  state.counters["overlap_eff_meas"] = std::max(compute_s, xfer_s) / mean_s;
  state.SetLabel(kModel + " offloaded n=" + std::to_string(n));
}

void prefill(benchmark::State& state, bool offload) {
  LlamaModel& m = model();
  const int64_t n = state.range(0);
  m.set_kv_offload({offload, 0});
  FullKVCache c = m.make_cache(n + 64);
  m.set_kv_offload({});
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) toks[size_t(i)] = int32_t((i * 7919) % m.config().vocab_size);
  double total = 0;
  for (auto _ : state) {
    c.truncate(0);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(toks, c, 1);
    const double dt = seconds_since(t0);
    state.SetIterationTime(dt);
    total += dt;
  }
  const double mean_s = total / double(state.iterations());
  // Chunk i streams the i * 8192 slots before it (one layer's K and V each).
  double streamed = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kPrefillChunk) streamed += offloaded_kv_bytes(c, c0);
  state.counters["prefill_s"] = mean_s;
  state.counters["tokens_per_s"] = double(n) / mean_s;
  if (offload) state.counters["stream_floor_s"] = streamed / kHostLinkBytesPerS;
  state.SetLabel(kModel + (offload ? " offloaded" : " on device") + ", chunk " + std::to_string(kPrefillChunk));
}

void BM_OffloadDecode7B(benchmark::State& s) { step(s, 1); }
void BM_OffloadVerify7_7B(benchmark::State& s) { step(s, 7); }
void BM_OffloadPrefill7B(benchmark::State& s) { prefill(s, true); }
void BM_DevicePrefill7B(benchmark::State& s) { prefill(s, false); }

}  // namespace

BENCHMARK(BM_OffloadDecode7B)->Arg(32768)->Arg(131072)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OffloadVerify7_7B)->Arg(32768)->Arg(131072)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OffloadPrefill7B)->Arg(32768)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_DevicePrefill7B)->Arg(32768)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
