#include "cli/session.h"

namespace tf::cli {

Session open_session(const std::string& path, int64_t kv_capacity, bool with_tokenizer) {
  Session s;
  s.path = path;
  Checkpoint ck = open_checkpoint(path);
  // Tokenizer first: a bad tokenizer fails before the weights are read.
  if (with_tokenizer) s.tokenizer = load_tokenizer(path);
  LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
  s.model = std::make_unique<LlamaModel>(ck.config, std::move(w));
  if (kv_capacity > 0)
    s.cache = std::make_unique<FullKVCache>(ck.config.num_layers, ck.config.num_kv_heads, ck.config.head_dim,
                                            kv_capacity);
  return s;
}

}  // namespace tf::cli
