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
// measurement). Which engine configuration a graph runs: the heuristics'
// first choice, or the one TRIFORCE_CUDNN_ATTN_CONFIG names by cuDNN's tag
// (built static, and an error where cuDNN cannot build it for a shape);
// attention_prefill_cudnn_candidates lists what a benchmark can try. The workspace comes from a grow-only per-device buffer; the
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
#include <vector>

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

// The tag of the engine configuration attention_prefill_cudnn runs for p ("eng8_k..."; "" where
// cuDNN refuses the shape).
std::string attention_prefill_cudnn_config(const AttentionPrefillParams& p);
// Engine configurations worth timing for p's shape, by tag, not yet built: the heuristics' list
// (modes A, B, fallback, in cuDNN's order), then each single-knob variation of its first entry
// (every value of one knob of that engine, the others kept), without duplicates.
std::vector<std::string> attention_prefill_cudnn_candidates(const AttentionPrefillParams& p);
// Runs p with the engine configuration `tag` (built static and cached on first use); false, with
// nothing run, where cuDNN cannot build it for p.
bool attention_prefill_cudnn_with(const AttentionPrefillParams& p, const std::string& tag,
                                  cudaStream_t stream = nullptr);

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
