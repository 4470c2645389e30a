// The shape of the tiny random Llama models the engine tests build in memory
// (LlamaWeights::random): small enough for thousands of forwards per test.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace tf::testing {

inline ModelConfig tiny_llama_config(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                                     int64_t intermediate, int64_t max_positions = 512) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_positions;
  c.rms_norm_eps = 1e-5;
  return c;
}

}  // namespace tf::testing
