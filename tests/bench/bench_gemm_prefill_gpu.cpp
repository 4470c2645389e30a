// The prefill linears on the GPU (Google Benchmark, CUDA-event time after
// warm-up; TFLOPS = 2·M·N·K over the median iteration, ms_median): every
// prefill GEMM shape of Llama-2-7B and Llama-3.1-8B (M = the chunk's rows,
// N×K = the weight) in bf16 under each algorithm choice of kernels/gemm.cuh:
// cublasGemmEx (choice -2, today's default), the tuned cuBLASLt candidate
// (-1; the label names the candidate the timing picked), auto's pick (-3:
// cublasGemmEx or a candidate, named in the label) and each cuBLASLt
// heuristic candidate 0..7 (0 is what TRIFORCE_GEMM_ALGO=lt runs). The
// choice that wins on every shape and chunk becomes the default
// (kDefaultGemmAlgo in gemm.cu). Target (issue 18): >= 650 TFLOPS.
// Args: shape index (kShapes), M, choice.
// Quick set: --benchmark_filter='BM_PrefillLinears/[0-9]+/(2048|8192)/(-2|-1|0)/'
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.cuh"
#include "gemm.cuh"

namespace {

constexpr double kPeakFlops = 989e12;  // H200 dense fp16/bf16 tensor peak (datasheet)

struct Shape {
  const char* name;
  int64_t out, in;
};
const Shape kShapes[] = {
    {"7B qkv", 12288, 4096},     {"7B o", 4096, 4096},          {"7B gate_up", 22016, 4096},
    {"7B down", 4096, 11008},    {"8B qkv", 6144, 4096},        {"8B gate_up", 28672, 4096},
    {"8B down", 4096, 14336},
};

constexpr int64_t kMaxRows = 8192;

// Operands shared by every run (filled once): x and w as the largest shape needs, values in
// [-0.05, 0.05) from one 8 MB random block repeated over each buffer.
struct Operands {
  tf::cuda::DeviceBuffer x, w, y;
};
Operands& operands() {
  static Operands* o = [] {
    int64_t w_max = 0, in_max = 0, out_max = 0;
    for (const auto& s : kShapes)
      w_max = std::max(w_max, s.out * s.in), in_max = std::max(in_max, s.in), out_max = std::max(out_max, s.out);
    auto* r = new Operands{tf::cuda::DeviceBuffer(size_t(kMaxRows * in_max * 2)),
                           tf::cuda::DeviceBuffer(size_t(w_max * 2)), tf::cuda::DeviceBuffer(size_t(kMaxRows * out_max * 2))};
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    std::vector<uint16_t> h(size_t(4) << 20);
    for (auto& v : h) v = tf::cuda::to_half_bits(u(rng), tf::DType::BF16);
    for (auto* b : {&r->x, &r->w}) {
      auto* dst = static_cast<char*>(b->get());
      for (size_t at = 0; at < b->bytes(); at += h.size() * 2)
        cudaMemcpy(dst + at, h.data(), std::min(h.size() * 2, b->bytes() - at), cudaMemcpyHostToDevice);
    }
    return r;
  }();
  return *o;
}

void BM_PrefillLinears(benchmark::State& state) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return;
  }
  const Shape& s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const int choice = int(state.range(2));
  Operands& o = operands();
  tf::cuda::GemmParams p;
  p.x = o.x.get(), p.w = o.w.get(), p.y = o.y.get(), p.n = m, p.in = s.in, p.out = s.out;
  p.dtype = p.y_dtype = tf::DType::BF16;
  const int candidates = tf::cuda::gemm_lt_candidates(p);
  if (choice >= candidates) {
    state.SkipWithError(("cuBLASLt offers " + std::to_string(candidates) + " candidates").c_str());
    return;
  }
  std::string label = std::string(s.name) + " M=" + std::to_string(m) + " ";
  if (choice == tf::cuda::kGemmChoiceCublas) label += "cublasGemmEx";
  else if (choice == tf::cuda::kGemmChoiceTuned) label += "tuned -> lt " + std::to_string(tf::cuda::gemm_tuned_candidate(p));
  else if (choice == tf::cuda::kGemmChoiceAuto) {
    const int pick = tf::cuda::gemm_auto_choice(p);
    label += pick == tf::cuda::kGemmChoiceCublas ? "auto -> cublasGemmEx" : "auto -> lt " + std::to_string(pick);
  }
  else label += "lt " + std::to_string(choice);
  state.SetLabel(label);
  for (int i = 0; i < 3; ++i) tf::cuda::gemm_choice(p, choice);  // warm-up (tuned times its candidates here)
  cudaDeviceSynchronize();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> ms;
  for (auto _ : state) {
    cudaEventRecord(e0);
    tf::cuda::gemm_choice(p, choice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    state.SetIterationTime(double(t) / 1e3);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  const double med = ms.empty() ? 0.0 : ms[ms.size() / 2];
  const double flops = 2.0 * double(m) * double(s.out) * double(s.in);
  state.counters["ms_median"] = med;
  state.counters["TFLOPS"] = med > 0 ? flops / (med / 1e3) / 1e12 : 0.0;
  state.counters["frac_of_peak"] = med > 0 ? flops / (med / 1e3) / kPeakFlops : 0.0;
  state.counters["candidates"] = candidates;
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t shape = 0; shape < int64_t(std::size(kShapes)); ++shape)
    for (int64_t m : {int64_t(2048), int64_t(4096), kMaxRows})
      for (int64_t choice = tf::cuda::kGemmChoiceAuto; choice < tf::cuda::kGemmLtCandidates; ++choice)
        b->Args({shape, m, choice});
}
BENCHMARK(BM_PrefillLinears)->Apply(Shapes)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

}  // namespace
#endif

BENCHMARK_MAIN();
