// The retrieval cache's chunk selection on the device (kv/retrieval_cache.cpp
// runs it when the full cache is on CUDA), in two launches over every
// (layer, KV head) row at once, with no host round trip in between:
//
//   retrieval_scores  score[row, c] = q_sum[row] . (sum of the keys of chunk c),
//                     fp32, 16-byte loads; one warp per (row, chunk). The sum,
//                     not the mean: dividing every score of a row by the same
//                     chunk length does not change the order, it only rounds.
//   retrieval_select  one block per row: chunk 0 always, then the best keep - 1
//                     of chunks 1 .. num_chunks - 1 by score, ties to the lower
//                     chunk index (the CPU's stable_sort on >), written as chunk
//                     ids ascending; then the row's source slot list: the
//                     selected chunks' tokens, then the trailing remainder's.
//                     The k-th best score is found by a radix select over the
//                     order-preserving bits of the fp32 score (4 passes of 8
//                     bits), then a block-wide scan in index order takes every
//                     chunk above it and the first of those equal to it.
//
// -0 scores as +0 (they compare equal on the CPU too); NaN keys order above
// +inf (positive NaN) or below -inf (negative NaN), where the CPU sort has no
// defined order.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct RetrievalScoreParams {
  const void* k = nullptr;       // rows of [capacity][head_dim], f16/bf16, consecutive (layers * kv_heads)
  const float* q_sum = nullptr;  // [rows][head_dim]: the GQA group's query summed over its heads
  float* scores = nullptr;       // [rows][num_chunks]
  int64_t rows = 0, head_dim = 0, capacity = 0;  // head_dim a multiple of 8 (16-byte loads)
  int64_t chunk = 8, num_chunks = 0;
  DType dtype = DType::BF16;
};
void retrieval_scores(const RetrievalScoreParams& p, cudaStream_t stream = nullptr);

struct RetrievalSelectParams {
  const float* scores = nullptr;  // [rows][num_chunks]
  int32_t* chunks = nullptr;      // [rows][keep]: the selected chunk ids, ascending
  int32_t* slots = nullptr;       // [rows][keep * chunk + remainder]: source slots for kv_gather
  int64_t rows = 0, num_chunks = 0;
  int64_t keep = 0;               // min(num_chunks, budget / chunk)
  int64_t chunk = 8, remainder = 0;  // remainder: tokens after the last full chunk, always kept
};
void retrieval_select(const RetrievalSelectParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
