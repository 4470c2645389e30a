// Causal prefill attention (flash-attention style) on tensor cores for f16
// and bf16 with fp32 accumulation, head_dim 64 or 128, MHA and GQA. Two
// kernels: mma.sync (FA2 style, sm_80+, attention_prefill.cu) and, for
// head_dim 128 on an sm_90 device, warpgroup MMA (sm_90a wgmma,
// attention_prefill_sm90a.cu), the default there unless the environment sets
// TRIFORCE_PREFILL_KERNEL=mma.
//
// The n queries are the LAST n slots of the KV: query i sits at slot
// kv_length - n + i and sees slots j <= kv_length - n + i (the cache already
// holds the new tokens' K and V, as after kv_append). One CTA computes 128
// query rows of one head, streaming 64-slot K/V tiles through a cp.async
// multi-stage pipeline with an online softmax, so nothing of size n^2 (nor any
// workspace) exists. Kv head of head h: h / (num_heads / num_kv_heads).
//
// Our kernels have no plan step: the launch needs no workspace and its grid
// follows from n and num_heads. The cuDNN backend (attention_prefill_cudnn.cuh)
// plans per shape and is chosen by prefill_attention_backend().
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct AttentionPrefillParams {
  const void* q = nullptr;        // [n, num_heads, head_dim]
  const void* k_cache = nullptr;  // kv head h, slot j at h * head_stride + j * token_stride
  const void* v_cache = nullptr;  // same layout as k_cache
  void* out = nullptr;            // [n, num_heads, head_dim]
  int64_t n = 0;                  // query tokens (the last n of the kv_length slots)
  int64_t kv_length = 0;          // valid slots, >= n (host value: prefill is not graph-captured)
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 128;  // head_dim 64 or 128
  int64_t capacity = 0;           // slots per kv head (>= kv_length)
  int64_t head_stride = 0;        // elements; 0 -> capacity * head_dim (multiple of 8)
  int64_t token_stride = 0;       // elements; 0 -> head_dim (multiple of 8)
  float scale = 0.0f;             // 0 -> 1 / sqrt(head_dim)
  DType dtype = DType::BF16;      // of q, KV, out
};

// Matrix FLOPs of one launch (QK^T and PV over the causal pairs), for reports.
double attention_prefill_flops(const AttentionPrefillParams& p);
// Validates p (tf::Error on a bad shape), then launches the kernel on stream.
void attention_prefill(const AttentionPrefillParams& p, cudaStream_t stream = nullptr);

// Kernel choices of attention_prefill_config beyond 0 (the default: the backend of
// prefill_attention_backend(); ours is wgmma where available and not overridden by
// TRIFORCE_PREFILL_KERNEL=mma, else mma.sync).
constexpr int kPrefillMma = 6;     // the default mma.sync tiles, always
constexpr int kPrefillWgmma = 7;   // the wgmma kernel, 2 K/V stages (tf::Error where unavailable)
constexpr int kPrefillWgmma3 = 8;  // the wgmma kernel, 3 K/V stages
constexpr int kPrefillCudnn = 9;   // cuDNN's fused attention (attention_prefill_cudnn.cuh; tf::Error where it cannot)
constexpr int kPrefillOurs = 10;   // our default kernel, whatever the backend setting
// The same with kernel/tile configuration `config`: 0 the default; 1..5 head_dim-128 mma.sync
// variants that the benchmark compares; kPrefillMma, kPrefillWgmma, kPrefillWgmma3, kPrefillCudnn,
// kPrefillOurs; another number runs the default mma.sync tiles.
void attention_prefill_config(const AttentionPrefillParams& p, int config, cudaStream_t stream = nullptr);
// Which backend config 0 runs: TRIFORCE_PREFILL_ATTENTION=auto|cudnn|ours, read once (a bad value is
// a tf::Error naming the variable). auto (the default): cuDNN where it is available and plans the
// shape, else ours, with no error; cudnn: cuDNN or a tf::Error; ours: our kernels.
enum class PrefillBackend { Auto, Cudnn, Ours };
PrefillBackend prefill_attention_backend();
// Overrides the environment for the process (tests, benchmarks).
void set_prefill_attention_backend(PrefillBackend b);
// A value of TRIFORCE_PREFILL_ATTENTION (null or empty: auto); a tf::Error naming the variable otherwise.
PrefillBackend parse_prefill_backend(const char* value);
const char* prefill_backend_name(PrefillBackend b);
// Whether a prefill call of p's shape runs on cuDNN under config 0 (plans it).
bool attention_prefill_uses_cudnn(const AttentionPrefillParams& p);

// Whether the wgmma kernel can run here for head_dim: compiled in (sm_90 among the build's CUDA
// architectures), head_dim 128, and the current device of compute capability 9.0.
bool attention_prefill_wgmma_available(int64_t head_dim);

}  // namespace tf::cuda
