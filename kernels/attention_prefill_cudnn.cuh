// Prefill attention through cuDNN's fused flash attention (the SDPA forward
// of the header-only cudnn-frontend graph API), a backend beside our kernels
// of attention_prefill.cu with the same AttentionPrefillParams. cuDNN reads
// our layouts in place through strides: q and out [n, H, D] as (1, H, n, D)
// with strides (n·H·D, D, H·D, 1), K and V as (1, KH, kv_length, D) with the
// cache's head and slot strides; GQA is cuDNN's own (H a multiple of KH). The
// mask is causal aligned bottom-right, so with n <= kv_length query i sees
// slots j <= kv_length - n + i, as our kernels do (a chunk's queries after
// every earlier cached key).
//
// Plan / run (FlashInfer style): a graph is built once per exact shape
// (device, dtype, heads, kv heads, head_dim, n, kv_length, strides, scale)
// and kept (least recently used go past kMaxCudnnGraphs), with its verdict:
// a shape cuDNN refuses is remembered as refused and costs nothing again.
// Graph building is slow, so where cuDNN >= 9.4 allows it the graphs of one
// shape class (dtype, head_dim, heads, kv heads, scale) are built with
// dynamic shapes and share one kernel cache: a new (n, kv_length) reuses the
// compiled kernel (TRIFORCE_CUDNN_DYNAMIC_SHAPES=0 turns that off, for
// measurement). The workspace comes from a grow-only per-device buffer; the
// graph runs on the caller's stream. Never call it inside a CUDA graph
// capture (prefill-sized calls never are).
//
// Present only in builds with TRIFORCE_CUDNN (cudnn.h, libcudnn and the
// frontend headers found); elsewhere cudnn_attention_available() is false and
// the rest refuse.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attention_prefill.cuh"

namespace tf::cuda {

constexpr int kMaxCudnnGraphs = 256;

// Built with cuDNN, a cuDNN >= 9 library loaded, and a current device of
// compute capability >= 8.0.
bool cudnn_attention_available();
// "cuDNN 9.14.0, frontend 1.16.0", or why there is none.
std::string cudnn_attention_version();
// Plans p's shape (builds and caches its graph on first sight): true when
// cuDNN runs it. Never throws for a shape cuDNN refuses (false instead).
bool attention_prefill_cudnn_plan(const AttentionPrefillParams& p);
// Runs p on cuDNN (plans it first if needed); tf::Error when cuDNN cannot.
// p is validated by the caller (attention_prefill_config).
void attention_prefill_cudnn(const AttentionPrefillParams& p, cudaStream_t stream = nullptr);

struct CudnnAttentionStats {
  int64_t graphs_built = 0;    // graphs built (a shape seen for the first time, or again after eviction)
  int64_t graphs_dynamic = 0;  // of those, built with dynamic shapes and a shared kernel cache
  int64_t refused = 0;         // shapes cuDNN refused
  int64_t runs = 0;            // executions
  double plan_seconds = 0;     // host time spent building graphs
  std::string last_refusal;    // cuDNN's message for the last refused shape
};
CudnnAttentionStats cudnn_attention_stats();

}  // namespace tf::cuda
