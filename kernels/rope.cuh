// Rotary embedding, HF rotate_half convention (pairs (i, i + half)), from
// precomputed f32 cos/sin tables indexed by a per-token row. One kernel serves
// every use: in place on q and k (rope), and for one step's q/k/v (rope_qkv):
// q rotated into a contiguous q_out, k rotated and v copied to where attention
// reads them (contiguous rows, or the KV cache at per-token slots). Every
// path runs the same arithmetic, so the fused and unfused steps agree bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct RopeParams {
  void* q = nullptr;                  // [n, q_heads, head_dim], in place
  void* k = nullptr;                  // [n, k_heads, head_dim], in place; may be nullptr
  const float* cos = nullptr;         // [table_rows, head_dim / 2]
  const float* sin = nullptr;         // [table_rows, head_dim / 2]
  const int32_t* positions = nullptr; // device [n]: row of the tables for each token
  int64_t n = 0, q_heads = 0, k_heads = 0, head_dim = 0;
  int64_t table_rows = 0;             // positions outside [0, table_rows) leave the row NaN
  DType dtype = DType::BF16;
};

// x1' = x1*c - x2*s, x2' = x2*c + x1*s in fp32 (products and sum each rounded,
// no FMA, as the CPU reference computes it), rounded once to dtype.
void rope(const RopeParams& p, cudaStream_t stream = nullptr);

// One step's q, k, v rows (token t's heads start at q + t * q_ld elements, and
// likewise for k and v: separate [n, heads, head_dim] tensors, or the q, k and
// v columns of one stacked q/k/v GEMM output).
struct RopeQkvParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;  // nullptr: no v to move
  int64_t q_ld = 0, k_ld = 0, v_ld = 0;
  void* q_out = nullptr;    // [n, q_heads, head_dim]; may be q itself when q is contiguous
  // Rotated k and copied v of token t, kv head h go to
  // out + h * out_head_stride + slot(t) * out_slot_stride (may be k / v themselves, in place),
  // slot(t) = slots[t] (device i32 [n]) or t when slots is nullptr.
  void* k_out = nullptr;
  void* v_out = nullptr;
  int64_t out_head_stride = 0, out_slot_stride = 0;
  const int32_t* slots = nullptr;
  int64_t slot_limit = 0;   // k/v rows whose slot is outside [0, slot_limit) are not written
  const float* cos = nullptr;
  const float* sin = nullptr;
  const int32_t* rows = nullptr;  // device [n]: token t's row of the tables
  int64_t table_rows = 0;         // rows outside [0, table_rows) give NaN
  int64_t n = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::BF16;
  // Prefill chunks: 16-byte vectors (the same bits) where head_dim / 2, the
  // strides and the pointers allow, else the kernel every step runs. Decode
  // and verification steps leave it off, so their launches stay as they were.
  bool vec8 = false;
};
void rope_qkv(const RopeQkvParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
