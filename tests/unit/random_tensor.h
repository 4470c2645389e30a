// Random CPU tensors and KV views for the op tests (one definition for every test file).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tf::testing {

// f32 entries drawn from N(0, s^2).
inline Tensor randn(std::vector<int64_t> shape, std::mt19937& rng, float s = 1.0f) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  std::normal_distribution<float> nd(0.0f, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = nd(rng);
  return t;
}

// A head-major KV cache [KH, cap, D] holding L tokens; positions null: slot j is position j.
inline ops::KVView head_major_kv(const float* K, const float* V, int64_t L, int64_t cap, int64_t KH, int64_t D,
                                 const int32_t* positions) {
  ops::KVView kv;
  kv.k = K;
  kv.v = V;
  kv.length = L;
  kv.head_stride = cap * D;
  kv.token_stride = D;
  kv.positions = positions;
  kv.num_kv_heads = KH;
  kv.head_dim = D;
  return kv;
}

}  // namespace tf::testing
