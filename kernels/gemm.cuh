// Linear layers on cuBLAS: y[n, out] = x[n, in] . W[out, in]^T with the
// weights as they are stored (HF layout, row-major), fp32 accumulation.
// Column-major cuBLAS sees W as [in, out], so y^T = op_T(W) . x^T.
//
// These are the prefill-sized linears (more rows than gemm_skinny takes), so
// nothing here needs batch invariance. How they pick cuBLAS's algorithm is a
// process-wide policy (gemm_algo(), TRIFORCE_GEMM_ALGO):
//   cublas  cublasGemmEx with CUBLAS_GEMM_DEFAULT (the library's own choice);
//   lt      cuBLASLt, the heuristic's first algorithm for the shape, with a
//           32 MiB workspace (deterministic for a given library and GPU);
//   tuned   cuBLASLt, the heuristic's first kGemmLtCandidates algorithms timed
//           once per shape (device, dtypes, n, in, out, operand alignment) on
//           its first call, the fastest kept for the process (the lowest
//           candidate within 2% of the best, so near-ties resolve the same way
//           run after run; still, two processes can time differently and then
//           round a prefill differently).
//   auto    cublasGemmEx and the tuned candidates all timed once per shape on
//           its first eager call, the fastest kept for the process
//           (cublasGemmEx unless a candidate is more than 2% faster; the
//           prefill shapes differ: at M = 8192 the 7B o projection is 766
//           TFLOPS on cuBLASLt and 663 on cublasGemmEx, qkv the reverse).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct GemmParams {
  const void* x = nullptr;  // [n, in], dtype
  const void* w = nullptr;  // [out, in], dtype
  void* y = nullptr;        // [n, out], y_dtype (dtype or f32)
  int64_t n = 0, in = 0, out = 0;
  DType dtype = DType::BF16;
  DType y_dtype = DType::BF16;
};

// Runs p under the process policy.
void gemm(const GemmParams& p, cudaStream_t stream = nullptr);

enum class GemmAlgo { Cublas, Lt, Tuned, Auto };
// TRIFORCE_GEMM_ALGO=cublas|lt|tuned|auto, read once (a bad value is a tf::Error naming the variable).
GemmAlgo gemm_algo();
void set_gemm_algo(GemmAlgo a);  // overrides the environment (tests, benchmarks)
// A value of TRIFORCE_GEMM_ALGO (null or empty: the default); a tf::Error naming the variable otherwise.
GemmAlgo parse_gemm_algo(const char* value);
const char* gemm_algo_name(GemmAlgo a);

constexpr int kGemmLtCandidates = 8;
// The choices below the policy, for tests and the benchmark:
constexpr int kGemmChoiceCublas = -2;  // cublasGemmEx
constexpr int kGemmChoiceTuned = -1;   // the tuned candidate (timed on first sight)
constexpr int kGemmChoiceAuto = -3;    // auto's pick (timed on first sight)
// Runs p with `choice`: kGemmChoiceCublas, kGemmChoiceTuned, kGemmChoiceAuto, or cuBLASLt heuristic candidate
// 0 .. gemm_lt_candidates(p) - 1. tf::Error for a candidate that does not exist.
void gemm_choice(const GemmParams& p, int choice, cudaStream_t stream = nullptr);
// How many cuBLASLt candidates the heuristic offers for p's shape (at most kGemmLtCandidates).
int gemm_lt_candidates(const GemmParams& p);
// The candidate `tuned` runs for p's shape (timing them now if not done yet, on stream, with
// p's buffers: y is overwritten); -1 when cuBLASLt offers none (tuned then runs cublasGemmEx).
int gemm_tuned_candidate(const GemmParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda

namespace tf::cuda {
// The choice `auto` runs for p's shape (timing cublasGemmEx and the candidates now if not done yet,
// on stream, with p's buffers: y is overwritten): kGemmChoiceCublas or a cuBLASLt candidate index.
int gemm_auto_choice(const GemmParams& p, cudaStream_t stream = nullptr);
}  // namespace tf::cuda
