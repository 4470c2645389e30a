#include "cli/session.h"

#include "dist/tensor_parallel.h"

namespace tf::cli {

Session open_session(const std::string& path, int64_t kv_capacity, bool with_tokenizer) {
  Session s;
  s.path = path;
  Checkpoint ck = open_checkpoint(path);
  // Tokenizer first: a bad tokenizer fails before the weights are read.
  if (with_tokenizer) s.tokenizer = load_tokenizer(path);
  s.model = dist::load_model_shard(ck);  // this rank's tensor-parallel shard (the whole model in one process)
  if (kv_capacity > 0) s.cache = std::make_unique<FullKVCache>(s.model->make_cache(kv_capacity));
  return s;
}

}  // namespace tf::cli
