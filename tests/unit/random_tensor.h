// Random CPU tensors for the op tests (one definition for every test file).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace tf::testing {

// f32 entries drawn from N(0, s^2).
inline Tensor randn(std::vector<int64_t> shape, std::mt19937& rng, float s = 1.0f) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  std::normal_distribution<float> nd(0.0f, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = nd(rng);
  return t;
}

}  // namespace tf::testing
