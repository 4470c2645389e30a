// RoPE frequencies exactly as transformers' modeling_rope_utils computes them
// (default, linear, dynamic, yarn, llama3), including its fp32 rounding:
// torch builds inv_freq in float32 (base ** (arange(0, dim, 2).float() / dim),
// then 1/x, then the per-type fp32 tensor arithmetic); we evaluate each step
// in double and round to float where torch holds a float32 tensor. Scalars
// that stay Python floats in transformers (base, factor, correction range,
// attention factor) are kept in double.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tf {

struct RopeTable {
  std::vector<float> inv_freq;    // [head_dim / 2]
  float attention_scaling = 1.0f; // multiplies cos and sin
};

// The table for `cfg`. seq_len matters only for "dynamic" (NTK): transformers
// uses seq_len = max(seq_len, max_position_embeddings); 0 means "at init".
RopeTable compute_rope(const ModelConfig& cfg, int64_t seq_len = 0);

// Convenience for tests and reference checks: rotate q [n, heads, hd] and
// k [n, kv_heads, hd] in place for positions (i32 [n]) with this table, via
// ops::rope_cos_sin + ops::rope_apply (the model calls those directly, once
// per forward, on preallocated cos/sin).
void apply_rope(const RopeTable& table, const Tensor& positions, Tensor& q, Tensor& k);

// Stateful holder reproducing LlamaRotaryEmbedding's dynamic update: before
// each forward call, with seq_len = max position of the call + 1,
//  - if seq_len > cached (cached starts at max_position_embeddings): the
//    frequencies are recomputed for seq_len and cached = seq_len (growth);
//  - if seq_len < max_position_embeddings and cached > max_position_embeddings:
//    the original frequencies are restored (reset), as transformers does.
// For every other type update() is a no-op. Keys already in a cache keep the
// rotation they were written with (transformers does not re-rotate them either).
class Rope {
 public:
  explicit Rope(const ModelConfig& cfg);
  const RopeTable& update(int64_t seq_len);
  const RopeTable& table() const { return table_; }
  bool dynamic() const { return dynamic_; }

 private:
  ModelConfig cfg_;
  bool dynamic_ = false;
  int64_t original_max_ = 0, cached_max_ = 0;
  RopeTable original_, table_;
};

}  // namespace tf
