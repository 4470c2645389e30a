// Retrieval KV cache (TriForce level 2): a fixed budget of prompt tokens per
// (layer, KV head), chosen once per prompt by chunk retrieval, plus a tail for
// the last prompt token, the generated tokens and the speculative ones.
//
// Scoring: the prompt except its last token is cut into chunks of `chunk`
// tokens; a chunk's key is the mean of its post-RoPE keys; its score for
// (layer, kv head g) is the dot product with the last prompt token's
// post-RoPE query, summed over the query heads of g's GQA group. Chunk 0 is
// always kept (attention sinks); the best-scoring others fill budget/chunk
// chunks; a trailing partial chunk is always kept (the most recent tokens).
// Selected chunks are stored in positional order. On CUDA the whole build
// runs on the device (kv/retrieval_device.h); on the CPU it is the reference
// below (select_chunks, then gather_slots). All retrieved slots carry
// position = their slot index (< every query position, so always visible; the
// keys carry their own RoPE phases); tail slots carry true text positions.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/full_cache.h"
#include "kv/retrieval_device.h"
#include "model/llama.h"

namespace tf {

struct RetrievalOptions {
  int64_t budget = 4096;  // retrieved prompt tokens per (layer, kv head), a multiple of chunk
  int64_t chunk = 8;
};

struct RetrievalSelection {
  int64_t num_chunks = 0;                     // full chunks scored
  int64_t remainder = 0;                      // trailing tokens always kept
  std::vector<std::vector<int64_t>> chunks;   // [layer * kv_heads + g] -> selected chunk ids, ascending
  std::vector<std::vector<double>> scores;    // [layer * kv_heads + g] -> score per chunk (empty after a device build)
};

// Score and select over slots [0, n_tokens) of `cache` using the queries q (from LlamaModel::forward_capturing_last_query).
RetrievalSelection select_chunks(const FullKVCache& cache, int64_t n_tokens,
                                 const std::vector<std::vector<float>>& q, int64_t num_heads,
                                 const RetrievalOptions& opt);

class RetrievalKVCache {
 public:
  // tail_capacity: slots after the retrieved region. kv_heads: the KV heads
  // this rank holds (model.weights().local_kv_heads); 0 = cfg.num_kv_heads.
  // dev/dtype: where the cache lives (the model's device and dtype).
  RetrievalKVCache(const ModelConfig& cfg, const RetrievalOptions& opt, int64_t tail_capacity, int64_t kv_heads = 0,
                   Device dev = Device::CPU, DType dtype = DType::F32);
  // Build from a prompt: full prefill of `model` over the prompt (own temporary
  // cache), then build_from. The cache then holds region() slots; the last
  // prompt token is to be forwarded next at position P-1.
  void build(LlamaModel& model, const std::vector<int32_t>& prompt);
  // Build from a prefill someone already ran (the top level's): `full` holds at
  // least the first n_prompt - 1 tokens of the prompt, `q` the post-RoPE query
  // of prompt token n_prompt - 1 per layer; num_heads = query heads per rank.
  void build_from(const FullKVCache& full, int64_t n_prompt, const std::vector<std::vector<float>>& q,
                  int64_t num_heads);
  FullKVCache& cache() { return cache_; }
  const FullKVCache& cache() const { return cache_; }
  int64_t region() const { return region_; }
  // The last build's selection. After a device build the chunk ids come to the
  // host here, on the first call (one copy), and scores stay empty.
  const RetrievalSelection& selection() const;

 private:
  RetrievalOptions opt_;
  FullKVCache cache_;
  int64_t region_ = 0;
  mutable RetrievalSelection sel_;
  mutable bool chunks_on_device_ = false;  // sel_.chunks not yet downloaded from scratch_
  RetrievalDeviceScratch scratch_;
};

}  // namespace tf
