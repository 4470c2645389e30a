// What a subcommand needs to run a model: the opened checkpoint, the model
// built from it, a KV cache sized for the request, and the tokenizer.
#pragma once
#include <memory>
#include <string>

#include "kv/full_cache.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

struct Session {
  std::string path;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<FullKVCache> cache;
  std::unique_ptr<Tokenizer> tokenizer;
  const ModelConfig& config() const { return model->config(); }
};

Session open_session(const std::string& path, int64_t kv_capacity, bool with_tokenizer);

}  // namespace tf::cli
