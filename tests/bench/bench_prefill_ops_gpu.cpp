// BM_PrefillOps: the elementwise tail of a prefill chunk, each op alone at
// M rows of the 7B shapes (hidden 4096, 32/32 heads of 128, intermediate
// 11008, bf16), as LlamaModel's prefill runs it. CUDA-event time of 20
// back-to-back launches after warm-up, per launch: us, GBps (bytes the op
// must move), x_floor = time / (bytes / 4.22 TB/s, the H200's measured HBM
// peak), and s_per_128k = this op's seconds in a 131,072-token 7B prefill
// (32 layers × 131072 / M chunks × its launches per layer). Ops (arg 1):
//   0 rmsnorm (layer 0 only)          1 add_rmsnorm (x += proj; xn = norm(x), 2 a layer)
//   2 add_inplace                     3 rope_qkv_to_cache, q/k/v from three GEMMs
//   4 rope_qkv_to_cache, q/k/v rows of one stacked GEMM (TRIFORCE_PREFILL_STACKED)
//   5 silu_mul, scalar kernel         6 silu_mul, 16-byte vectors (the prefill form)
//   7 silu_mul_halves, scalar         8 silu_mul_halves, 16-byte vectors (stacked gate/up)
//   9 embedding (once a chunk)       10 op 3 on the step kernel (scalar; the prefill before vec8)
// Ops 3, 4 run the prefill form (RopeQkvParams::vec8), as the model does.
// The sum of s_per_128k over the ops a configuration runs is its elementwise
// share of BM_Prefill7B/131072 (unstacked: 0 + 1 + 3 + 6 + 9; stacked: 0 + 1 +
// 4 + 8 + 9; before this change: 0 + 1 + 10 + 5 + 9, with 5's and 10's
// s_per_128k read as if each ran once a layer).
// Args: M, op.  --benchmark_filter='BM_PrefillOps/8192/'
#include <benchmark/benchmark.h>

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "activation.cuh"
#include "rope.cuh"
#include "core/device.h"
#include "ops/ops.h"
#include "stream.cuh"

namespace {

using tf::DType;
using tf::Tensor;

constexpr double kPeakBytesPerS = 4.22e12;
constexpr int64_t kHidden = 4096, kHeads = 32, kHeadDim = 128, kInter = 11008, kLayers = 32, kPrompt = 131072;

Tensor dev(std::vector<int64_t> shape, DType dt = DType::BF16) {
  Tensor t = tf::empty_tensor(tf::Device::CUDA, dt, std::move(shape));
  cudaMemset(t.data, 0x3c, t.bytes());  // finite values (0x3c3c: ~0.0115 in bf16, ~1.06 in f16)
  return t;
}

Tensor host_i32_iota(int64_t n) {
  Tensor t = Tensor::cpu(DType::I32, {n});
  for (int64_t i = 0; i < n; ++i) t.ptr<int32_t>()[i] = int32_t(i);
  return t;
}

void BM_PrefillOps(benchmark::State& state) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t M = state.range(0), op = state.range(1);
  const int64_t h = kHidden, H = kHeads, D = kHeadDim, I = kInter, half = D / 2;
  const double e = 2.0;  // bf16 bytes
  std::string name;
  double bytes = 0, per_layer = 1;
  std::function<void()> run;
  // Operands of every op (made once per benchmark row; the largest is ~0.4 GB at M = 8192).
  Tensor x = dev({M, h}), y = dev({M, h}), xn = dev({M, h}), w = dev({h});
  const tf::ops::RmsNormParams np{1e-5f};
  Tensor cos = dev({M, half}, DType::F32), sin = dev({M, half}, DType::F32);
  Tensor rows = tf::empty_tensor(tf::Device::CUDA, DType::I32, {M});
  {
    Tensor iota = host_i32_iota(M);
    tf::copy_tensor(rows, iota);
  }
  Tensor q3, k3, v3, qkv, kc, vc, gate, up, gu, out, table;
  switch (op) {
    case 0:
      name = "rmsnorm", bytes = 2 * e * M * h, per_layer = 1.0 / kLayers;
      run = [&] { tf::ops::rmsnorm(x, w, xn, np); };
      break;
    case 1:
      name = "add_rmsnorm", bytes = 4 * e * M * h, per_layer = 2;
      run = [&] { tf::ops::add_rmsnorm(x, y, w, xn, np); };
      break;
    case 2:
      name = "add_inplace", bytes = 3 * e * M * h, per_layer = 0;  // not in the fused prefill
      run = [&] { tf::ops::add_inplace(x, y); };
      break;
    case 3:
    case 4: {
      name = op == 3 ? "rope_qkv_to_cache (3 GEMM outputs)" : "rope_qkv_to_cache (stacked rows)";
      bytes = 6 * e * M * h + 2.0 * 4 * M * half;
      kc = dev({H, M, D}), vc = dev({H, M, D}), q3 = dev({M, H, D});
      tf::ops::QKVRows in;
      if (op == 3) {
        k3 = dev({M, H, D}), v3 = dev({M, H, D});
        in = tf::ops::qkv_rows(q3, k3, v3);
      } else {
        qkv = dev({M, 3 * h});
        in = tf::ops::qkv_rows(qkv, H, H, D);
      }
      run = [&, in] { tf::ops::rope_qkv_to_cache(in, cos, sin, rows, rows, q3, kc, vc); };
      break;
    }
    case 5:
    case 6:
    case 7:
    case 8: {
      const bool halves = op >= 7, vec8 = op == 6 || op == 8;
      name = std::string(halves ? "silu_mul_halves" : "silu_mul") + (vec8 ? " vec8" : " scalar");
      bytes = 3 * e * M * I;
      out = dev({M, I});
      tf::cuda::SiluMulParams p;
      if (halves) {
        gu = dev({M, 2 * I});
        p.gate = gu.data, p.up = static_cast<const uint16_t*>(gu.data) + I, p.ld = 2 * I;
      } else {
        gate = dev({M, I}), up = dev({M, I});
        p.gate = gate.data, p.up = up.data, p.ld = I;
      }
      p.out = out.data, p.count = M * I, p.cols = I, p.dtype = DType::BF16, p.vec8 = vec8;
      if (!halves && !vec8) p.cols = p.ld = 0;  // flat, as the prefill launched it before vec8
      per_layer = (op == 6 || op == 8) ? 1 : 0;  // the prefill runs the vec8 forms
      run = [p] { tf::cuda::silu_mul(p, tf::cuda::compute_stream()); };
      break;
    }
    case 10: {
      name = "rope_qkv_to_cache (3 GEMM outputs) step kernel";
      bytes = 6 * e * M * h + 2.0 * 4 * M * half;
      kc = dev({H, M, D}), vc = dev({H, M, D}), q3 = dev({M, H, D}), k3 = dev({M, H, D}), v3 = dev({M, H, D});
      tf::cuda::RopeQkvParams p;
      p.q = q3.data, p.k = k3.data, p.v = v3.data, p.q_ld = p.k_ld = p.v_ld = H * D;
      p.q_out = q3.data, p.k_out = kc.data, p.v_out = vc.data;
      p.out_head_stride = M * D, p.out_slot_stride = D, p.slots = rows.ptr<int32_t>(), p.slot_limit = M;
      p.cos = cos.ptr<float>(), p.sin = sin.ptr<float>(), p.rows = rows.ptr<int32_t>(), p.table_rows = M;
      p.n = M, p.q_heads = H, p.kv_heads = H, p.head_dim = D, p.dtype = DType::BF16, p.vec8 = false;
      per_layer = 0;
      run = [p] { tf::cuda::rope_qkv(p, tf::cuda::compute_stream()); };
      break;
    }
    case 9: {
      name = "embedding", bytes = 2 * e * M * h + 4.0 * M, per_layer = 1.0 / kLayers;
      table = dev({M, h});  // a table of M rows (the gathered rows are what moves)
      run = [&] { tf::ops::embedding(table, rows, x); };
      break;
    }
    default:
      state.SkipWithError("no such op");
      return;
  }
  state.SetLabel(name + " M=" + std::to_string(M));
  cudaStream_t s = tf::cuda::compute_stream();
  for (int i = 0; i < 3; ++i) run();
  cudaStreamSynchronize(s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  constexpr int kReps = 20;
  double total_ms = 0;
  for (auto _ : state) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < kReps; ++i) run();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms / 1e3 / kReps);
    total_ms += ms / kReps;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double t = total_ms / 1e3 / double(state.iterations());
  state.counters["us"] = t * 1e6;
  state.counters["GBps"] = bytes / t / 1e9;
  state.counters["x_floor"] = t / (bytes / kPeakBytesPerS);
  state.counters["s_per_128k"] = t * per_layer * kLayers * double(kPrompt) / double(M);
}
BENCHMARK(BM_PrefillOps)
    ->ArgsProduct({{8192, 16384}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(10);

}  // namespace
#endif

BENCHMARK_MAIN();
