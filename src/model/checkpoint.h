// A checkpoint opened for the Llama forward: its config and its weights.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/weight_source.h"
#include "model/config.h"

namespace tf {

struct Checkpoint {
  std::string path;
  bool is_gguf = false;
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::shared_ptr<GgufFile> gguf;  // null for HF
};

// A folder with config.json => HF safetensors; a *.gguf file => GGUF; anything
// else => one-line tf::Error. The result has passed check_llama_weights.
Checkpoint open_checkpoint(const std::string& path);

// Name and HF-order shape of every tensor the Llama forward reads
// (lm_head.weight only when the embeddings are not tied).
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_expected_tensors(const ModelConfig& c);

// Throws a one-line tf::Error naming the first missing tensor, or a tensor whose
// shape differs (with both shapes); `source` names the checkpoint.
void check_llama_weights(const WeightSource& w, const ModelConfig& c, const std::string& source);

}  // namespace tf
