// Split-KV flash-decoding for 1..32 query tokens (decode and speculative
// verify) over one layer's contiguous KV cache [kv_heads, capacity, head_dim]
// in f16/bf16, GQA-aware: one CTA per (kv head, KV split) loads each K/V tile
// once into shared memory for all n * (heads / kv_heads) query rows that share
// it. Each CTA writes an fp32 partial output and its log-sum-exp; a combine
// kernel merges the splits (LSE merge) and writes the output in the KV dtype
// (a grid of one split writes the output itself, with the combine's bits).
//
// The KV length and the query positions are read from device memory, so the
// launch can be captured in a CUDA graph and replayed as the cache grows.
// Key slot j holds position j; query i sees slots j < length with
// j <= q_positions[i] (causal by position). A query that sees no key gets a
// zero row (as ops::attention on the CPU does).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct AttentionDecodeParams {
  const void* q = nullptr;               // [n, num_heads, head_dim]
  const void* k_cache = nullptr;         // kv head h, slot j at h * head_stride + j * token_stride
  const void* v_cache = nullptr;         // same layout as k_cache
  void* out = nullptr;                   // [n, num_heads, head_dim]
  const int32_t* kv_length = nullptr;    // device scalar: valid slots [0, length)
  const int32_t* q_positions = nullptr;  // device [n]; nullptr: every query sees all valid slots
  int64_t n = 1;                         // query tokens, 1..32
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 128;  // head_dim 64 or 128
  int64_t capacity = 0;                  // slots per kv head
  int64_t head_stride = 0;               // elements; 0 -> capacity * head_dim (multiple of 8)
  int64_t token_stride = 0;              // elements; 0 -> head_dim (multiple of 8)
  // Host-known bound on *kv_length that sizes the grid; 0 -> capacity. Splits
  // past *kv_length exit at once and the combine skips them, so a captured
  // launch sized for a bound above the length gives the length's result.
  int64_t max_length = 0;
  float scale = 0.0f;                    // 0 -> 1 / sqrt(head_dim)
  int num_splits = 0;                    // 0 -> chosen from the SM count and max_length
  // > 0 (a multiple of 64): every split covers this many slots from slot 0 on,
  // so a query's output does not depend on the call's length or query count
  // (a verify row equals the decode of that token bit for bit). Overrides num_splits.
  int64_t split_slots = 0;
  float* workspace = nullptr;            // attention_decode_workspace_bytes(p) bytes of device memory
  DType dtype = DType::BF16;             // of q, KV, out
  // The combine by the last split block of each KV head to finish (an arrival
  // counter per head) instead of a kernel of its own: the same combine code on
  // the same partials, so the same bits (StepFusions::fused_combine). Falls
  // back to the combine kernel where the rows' merge does not fit the split's
  // shared memory, or on a first call inside stream capture (the counters are
  // allocated outside it).
  bool combine_in_split = false;
  // A grid of one split (a bound of at most split_slots, or one chosen split)
  // writes the output from the split kernel, no combine launch: the bits the
  // combine computes from one split (attention_decode_tile.cuh, SplitArgs::out).
  // false: the combine runs all the same (the tests' and the A/B's reference;
  // StepFusions::direct_single_split).
  bool direct_single_split = true;
  // Warps per split CTA: 0 -> attention_decode_split_warps(head_dim); else 4,
  // or 8 at head_dim 64. Each width has its own rounding, so every call that
  // must agree bit for bit (a verify row and its decode step, the persistent
  // step and the per-op one) takes the process's choice; the tests set it.
  int split_warps = 0;
};

// The split CTA's warps for a head dim, fixed for the process: 4 at head_dim
// 128; at 64, TRIFORCE_ATTN_SPLIT_WARPS (4 or 8) or, unset or auto, the
// default below. Each warp takes 16 slots of every KV tile, so 8 warps halve
// the tile iterations of a 512-slot split (a short split is bound by that
// chain of dependent instructions, not by memory). The default is 8: on an
// H100 the small models' steps, verifications and chained draft steps took
// 1-6% less time with 8 than with 4, and none more beyond noise
// (results/h100/session-2026-12-08). 4 rounds differently from 8.
inline constexpr int kDefaultSplitWarpsD64 = 8;
int attention_decode_split_warps(int64_t head_dim);

// Step launches (kernels/pdl.cuh): the split and combine kernels wait for the
// previous kernel before they read q, the cache, the length or the workspace.
// The split count attention_decode will use for p (p.num_splits if set).
int attention_decode_num_splits(const AttentionDecodeParams& p);
// Calls since the process started whose one split wrote the output itself
// (direct_single_split), counted at launch: graph replays are not counted.
int64_t attention_decode_direct_launches();
// Bytes of fp32 scratch the launch needs: splits * n * heads * (head_dim + 1) floats.
size_t attention_decode_workspace_bytes(const AttentionDecodeParams& p);
// Validates p (tf::Error on a bad shape), then launches the split and combine kernels (the split alone
// for a one-split grid with direct_single_split).
void attention_decode(const AttentionDecodeParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
