// Decode/verify attention on the GPU (Google Benchmark, manual CUDA-event time
// after warm-up): one layer's KV read per call, reported in GB/s and as a
// fraction of the measured 4.22 TB/s H200 HBM read peak. Shapes: Llama-2-7B
// (32 heads, MHA) and Llama-3.1-8B (32/8 GQA), head_dim 128, bf16; n = 1
// (decode), 7 (verify) and 32 query tokens; BM_AttentionDecodeSmall: the
// small models' head_dim 64 at both split widths. Short contexts rotate
// through several K/V copies so that the reads come from HBM rather than L2.
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "attention_decode.cuh"
#include "device_buffer.cuh"

namespace {

constexpr double kPeakBytesPerS = 4.22e12;  // measured H200 HBM read (results/h200)

struct Shape {
  int64_t len, heads, kv_heads, hd, n;
  int splits = 0;           // 0: automatic (ignored with split_slots)
  int64_t split_slots = 0;  // > 0: the model's fixed splits
  int warps = 0;            // split CTA warps (0: the process default)
};

void run(benchmark::State& state, const Shape& sh) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t len = sh.len, kv_heads = sh.kv_heads, n = sh.n, heads = sh.heads, hd = sh.hd;
  const size_t kv_bytes = size_t(kv_heads * len * hd * 2);
  // Enough K/V copies to cycle through 256 MB, so short contexts are timed from HBM, not from the 50 MB L2.
  const size_t copies = std::max<size_t>(1, (size_t(256) << 20) / (2 * kv_bytes));
  std::vector<tf::cuda::DeviceBuffer> ks, vs;
  for (size_t c = 0; c < copies; ++c) {
    ks.emplace_back(kv_bytes), vs.emplace_back(kv_bytes);
    cudaMemset(ks.back().get(), 0x3c, kv_bytes);  // finite bf16 values; timing does not depend on them
    cudaMemset(vs.back().get(), 0x3c, kv_bytes);
  }
  tf::cuda::DeviceBuffer q(size_t(n * heads * hd * 2)), out(size_t(n * heads * hd * 2));
  cudaMemset(q.get(), 0x3c, q.bytes());
  std::vector<int32_t> host_pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host_pos[size_t(i)] = int32_t(len - n + i);
  const int32_t host_len = int32_t(len);
  tf::cuda::DeviceBuffer d_len(4), d_pos(size_t(4 * n));
  d_len.upload(&host_len, 4);
  d_pos.upload(host_pos.data(), size_t(4 * n));

  tf::cuda::AttentionDecodeParams p;
  p.q = q.get();
  p.k_cache = ks[0].get();
  p.v_cache = vs[0].get();
  p.out = out.get();
  p.kv_length = d_len.as<int32_t>();
  p.q_positions = d_pos.as<int32_t>();
  p.n = n;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.capacity = len;
  p.dtype = tf::DType::BF16;
  p.num_splits = sh.splits;  // 0: the kernel's own choice
  p.split_slots = sh.split_slots, p.split_warps = sh.warps;
  tf::cuda::DeviceBuffer ws(tf::cuda::attention_decode_workspace_bytes(p));
  p.workspace = ws.as<float>();

  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; ++i) tf::cuda::attention_decode(p);  // warm-up
  cudaDeviceSynchronize();
  // Each timed iteration is kBatch calls back to back (as in a decode step or a graph replay, where the
  // next launch is queued before this one ends), reported per call.
  constexpr int kBatch = 10;
  size_t it = 0;
  for (auto _ : state) {
    cudaEventRecord(e0);
    for (int b = 0; b < kBatch; ++b, ++it) {
      p.k_cache = ks[it % copies].get();
      p.v_cache = vs[it % copies].get();
      tf::cuda::attention_decode(p);
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(double(ms) / 1e3 / kBatch);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double bytes = 2.0 * double(kv_bytes);
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
  state.counters["frac_of_peak"] = benchmark::Counter(bytes / kPeakBytesPerS * double(state.iterations()),
                                                      benchmark::Counter::kIsRate);
  state.counters["TBps"] = benchmark::Counter(bytes / 1e12 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["splits"] = tf::cuda::attention_decode_num_splits(p);
  state.counters["warps"] = p.split_warps > 0 ? p.split_warps : tf::cuda::attention_decode_split_warps(hd);
}

// Args: length, kv heads, query tokens, splits (0 = automatic); 32 heads of 128.
void BM_AttentionDecode(benchmark::State& state) {
  run(state, {state.range(0), 32, state.range(1), 128, state.range(2), int(state.range(3))});
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t kvh : {32, 8})
    for (int64_t len : {4096, 8192, 32768, 65536, 131072, 262144})
      for (int64_t n : {1, 7, 32}) b->Args({len, kvh, n, 0});
  // Forced split counts against the automatic choice (one wave of two CTAs per SM, or more).
  for (int64_t splits : {8, 33, 66}) b->Args({32768, 32, 1, splits});
  for (int64_t splits : {33, 132, 264}) b->Args({32768, 8, 1, splits});
  for (int64_t splits : {33, 132, 264}) b->Args({131072, 8, 1, splits});
  for (int64_t splits : {33, 132}) b->Args({131072, 8, 7, splits});
}
BENCHMARK(BM_AttentionDecode)->Apply(Shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The small models' decode attention as their steps run it (512-slot splits),
// with each split width: args length, heads, kv heads, query tokens, warps.
// SmolLM2-135M is 9/3 heads of 64, the 68M draft 12/12 of 64.
void BM_AttentionDecodeSmall(benchmark::State& state) {
  run(state, {state.range(0), state.range(1), state.range(2), 64, state.range(3), 0, 512, int(state.range(4))});
}
BENCHMARK(BM_AttentionDecodeSmall)
    ->ArgsProduct({{256, 1024, 6478}, {9}, {3}, {1, 4}, {4, 8}})
    ->ArgsProduct({{250}, {12}, {12}, {1, 4}, {4, 8}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
#endif

BENCHMARK_MAIN();
