// Internal to the prefill attention kernels: the launch arguments the
// dispatcher (attention_prefill.cu) derives from AttentionPrefillParams, and the
// sm_90a wgmma launcher (attention_prefill_sm90a.cu, built only when sm_90 is
// among the CUDA architectures: TRIFORCE_PREFILL_WGMMA).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda::detail {

struct PrefillArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int n, H, G;  // queries, heads, heads per kv head
  int64_t kv_length, head_stride, token_stride;
  float scale_log2;  // softmax scale * log2(e)
};

// head_dim 128 only; stages: K/V pipeline depth (2 or 3). The caller has
// validated the shape and checked that the device is sm_90.
void attention_prefill_wgmma(const PrefillArgs& a, DType dtype, int stages, cudaStream_t stream);

}  // namespace tf::cuda::detail
