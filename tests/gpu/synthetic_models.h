// A synthetic model's config and CUDA weights (model/weights_device.h) for the
// GPU tests that build several LlamaModels over the same weights.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "model/config.h"
#include "model/weights.h"
#include "model/weights_device.h"

namespace tf::testing {

struct SyntheticModel {
  ModelConfig cfg;
  LlamaWeights w;
};

inline SyntheticModel synthetic_model(const std::string& name, DType dt, uint64_t seed) {
  SyntheticModel m;
  m.cfg = synthetic_config(name);
  m.w = synthetic_weights(m.cfg, Device::CUDA, dt, seed);
  return m;
}

}  // namespace tf::testing
