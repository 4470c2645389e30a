// Small elementwise kernels the model needs besides the fused ones: residual
// add, a KV write at a host-known or device-held slot, and seeded random fills for the
// synthetic benchmark models (weights made on the device, nothing on disk).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace tf::cuda {

struct AddParams {
  void* residual = nullptr;  // [count] in/out
  const void* x = nullptr;   // [count]
  int64_t count = 0;
  DType dtype = DType::BF16;
};
// residual += x in fp32, rounded once.
void add_inplace(const AddParams& p, cudaStream_t stream = nullptr);

// *p = value in stream order. The value travels as a kernel argument, so the
// host neither waits nor keeps a buffer alive (a KV cache's device length:
// a copy from the host would wait for the stream, one per step).
void set_i32(int32_t* p, int32_t value, cudaStream_t stream = nullptr);

struct KvWriteParams {
  void* k_cache = nullptr;      // one layer: [kv_heads, capacity, head_dim]
  void* v_cache = nullptr;
  const void* k_new = nullptr;  // [n, kv_heads, head_dim]
  const void* v_new = nullptr;
  int64_t slot = 0;             // first destination slot
  // Device [n]: row t goes to slot slots[t] instead (slot is ignored), so a
  // captured launch follows the slots uploaded for each replay.
  const int32_t* slots = nullptr;
  int64_t n = 0, kv_heads = 0, head_dim = 0, capacity = 0;
  DType dtype = DType::BF16;
};
void kv_write(const KvWriteParams& p, cudaStream_t stream = nullptr);

struct RandomFillParams {
  void* out = nullptr;
  int64_t count = 0;
  DType dtype = DType::BF16;    // f32, f16 or bf16
  uint64_t seed = 0;
  float mean = 0.0f;            // normal(mean, scale) when uniform == false
  float scale = 0.02f;          // uniform: [mean - scale, mean + scale)
  bool uniform = false;
  // A window of a larger row-major matrix [.., full_cols]: local element i is
  // element first + (i / cols) * full_cols + i % cols of the whole, so a
  // tensor-parallel rank makes exactly its slice of the unsharded weights.
  // cols == 0: the local elements are the whole's first + i.
  int64_t first = 0;
  int64_t cols = 0;
  int64_t full_cols = 0;
};
// Element i of the whole uses Philox draws (seed, 2i) and (seed, 2i + 1)
// (Box-Muller), so a fill is reproducible and independent of the launch shape.
void random_fill(const RandomFillParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
