// Temperature softmax with HF TopPLogitsWarper filtering on the device, the
// CUDA body of ops::softmax_top_p (the CPU body is the reference):
//   s = logits / T; order the tokens ascending by (s, index); drop the longest
//   prefix whose inclusive cumulative probability is <= 1 - top_p, but never
//   the last max(1, min_tokens_to_keep) tokens; probs = softmax(s) over the
//   rest, 0 elsewhere. The index tie-break is the CPU's stable sort: among
//   equal s the lower index is dropped first.
// One 1024-thread block per row, no sort: the cut is found by a radix select
// over the order-preserving bits of s (11 + 11 + 10 bits), each pass a
// histogram of count and probability mass restricted to the prefix chosen so
// far, then (only when the cut splits a group of equal s) a count select over
// the group's indices. Mass is fixed point (exp(s - max) * 2^43 in u64), so
// every sum is exact and order-independent: the kept set is deterministic,
// and it differs from the CPU's (fp32 running sum in sorted order) only where
// the cumulative mass lies within rounding of 1 - top_p.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct SoftmaxTopPParams {
  const float* logits = nullptr;  // [n, vocab]
  float* probs = nullptr;         // [n, vocab]; may alias logits
  int64_t n = 0, vocab = 0;       // vocab <= 2^21
  float temperature = 1.0f;       // > 0
  float top_p = 1.0f;             // > 0; >= 1 keeps every token
  int64_t min_tokens_to_keep = 1;
};
void softmax_top_p(const SoftmaxTopPParams& p, cudaStream_t stream = nullptr);

constexpr int64_t kSoftmaxTopPMaxVocab = int64_t(1) << 21;

}  // namespace tf::cuda
