// Moving weights to the GPU, and the seeded synthetic models the benchmarks
// run (`--target synthetic:NAME`): published shapes and rope scaling, random
// weights made directly on the device so nothing touches disk.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace tf {

// A copy of host f32 weights on `dev` stored as `dt` (tied embeddings stay tied).
LlamaWeights upload_weights(const LlamaWeights& host, Device dev, DType dt);

// "synthetic:NAME" paths.
bool is_synthetic_path(const std::string& path);
std::vector<std::string> synthetic_model_names();
// The config of a synthetic model (one-line error listing the names otherwise).
ModelConfig synthetic_config(const std::string& path);
// normal(0, 0.02) matrices and norms in [0.8, 1.2], seeded; on CUDA filled by
// a Philox kernel, on the CPU by LlamaWeights::random (f32). On CUDA a shard
// holds exactly its tensor-parallel slices of the unsharded model's numbers
// (the slicing of LlamaWeights::load, vocab-parallel lm_head included).
LlamaWeights synthetic_weights(const ModelConfig& cfg, Device dev, DType dt, uint64_t seed = 1234,
                               ShardSpec shard = {});
// The seed of a synthetic:NAME draft (--draft, model:NAME levels): not the
// target's 1234, so a draft of the target's shape is another model.
constexpr uint64_t kSyntheticDraftSeed = 6151;

}  // namespace tf
