// LlamaWeights: f32 host tensors of a Llama-family model, loaded by HF tensor
// name from a WeightSource. With a ShardSpec{rank, size} only this rank's
// tensor-parallel slice is read: q/k/v/gate/up are column-parallel (their
// output rows are sliced; q/k/v by KV-head groups, so rank r owns kv heads
// [r*kvh/size, (r+1)*kvh/size) and the query heads that read them), o/down are
// row-parallel (their input columns are sliced the same way). Norms and the
// embedding are replicated; the lm_head is vocab-parallel (rank r holds vocab
// rows vocab_slice(vocab, r, size); the forward all-gathers the logit slices)
// unless ShardSpec says replicated.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/weight_source.h"
#include "model/config.h"

namespace tf {

struct ShardSpec {
  int64_t rank = 0;
  int64_t size = 1;
  bool vocab_parallel_head = true;  // false: every rank holds the whole lm_head
};

// Rows [begin, end) of a vocabulary of `vocab` that rank `rank` of `size` owns
// (balanced: sizes differ by at most one).
struct VocabSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
VocabSlice vocab_slice(int64_t vocab, int64_t rank, int64_t size);
std::vector<int64_t> vocab_slice_sizes(int64_t vocab, int64_t size);  // [r] = vocab_slice(vocab, r, size).size()
// The KV heads [begin, end) of rank `rank` (balanced the same way, so 3 KV
// heads over 2 ranks are 2 + 1); each KV head brings its whole query group.
inline VocabSlice kv_head_slice(int64_t kv_heads, int64_t rank, int64_t size) {
  return vocab_slice(kv_heads, rank, size);
}

struct LayerWeights {
  Tensor attn_norm;            // [hidden]
  Tensor wq, wk, wv;           // [heads_local*hd, hidden], [kv_local*hd, hidden] x2
  Tensor wo;                   // [hidden, heads_local*hd]
  Tensor mlp_norm;             // [hidden]
  Tensor w_gate, w_up;         // [inter_local, hidden]
  Tensor w_down;               // [hidden, inter_local]
  // Optional: q/k/v and gate/up stored back to back ([q; k; v] and [gate; up]
  // rows), with wq/wk/wv and w_gate/w_up views into them, so a one-token step
  // runs one GEMM for each pair (the CUDA upload builds these).
  Tensor wqkv, w_gate_up;
};

struct LlamaWeights {
  ShardSpec shard;
  int64_t local_heads = 0, local_kv_heads = 0, local_intermediate = 0;
  Tensor embed;       // [vocab, hidden]
  Tensor final_norm;  // [hidden]
  VocabSlice head_rows;  // the vocab rows lm_head holds (all of them unless vocab-parallel)
  Tensor lm_head;     // [head_rows.size(), hidden]; shares storage with embed when tied
  // A draft's reduced vocabulary (model/draft_vocab.h): empty, or the token ids
  // whose rows lm_head holds (then lm_head is [K, hidden] and the forward
  // spreads its K logits over a vocabulary row, -inf elsewhere).
  std::vector<int32_t> head_ids;
  std::vector<LayerWeights> layers;

  // Reads and validates every tensor (one-line error naming the tensor).
  static LlamaWeights load(const WeightSource& src, const ModelConfig& cfg, ShardSpec shard = {});
  // Deterministic random weights for tests (normal(0, scale), norms around 1).
  static LlamaWeights random(const ModelConfig& cfg, uint64_t seed, float scale = 0.02f);
};

}  // namespace tf
