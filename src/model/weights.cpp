#include "model/weights.h"

#include "model/draft_vocab.h"

#include <algorithm>
#include <random>

namespace tf {

namespace {

std::string layer_name(int64_t l, const char* leaf) {
  return "model.layers." + std::to_string(l) + "." + leaf;
}

void check_shape(const WeightSource& src, const std::string& name, const std::vector<int64_t>& want) {
  TF_CHECK(src.has(name), "checkpoint is missing tensor " << name);
  const TensorInfo ti = src.info(name);
  TF_CHECK(ti.shape == want, "tensor " << name << " has shape " << shape_str(ti.shape) << ", config expects "
                                       << shape_str(want) << (ti.file.empty() ? "" : " (in " + ti.file + ")"));
}

// Rows [b, e) of a 2-D (or 1-D) tensor, read through the virtual row reader.
Tensor rows(const WeightSource& src, const std::string& name, const std::vector<int64_t>& full, int64_t b,
            int64_t e) {
  check_shape(src, name, full);
  std::vector<int64_t> shape = full;
  shape[0] = e - b;
  Tensor t = Tensor::cpu(DType::F32, shape);
  if (e > b) src.read_rows_f32(name, b, e, t.ptr<float>());
  return t;
}

// Columns [b, e) of a 2-D tensor [R, C], read a block of rows at a time.
Tensor cols(const WeightSource& src, const std::string& name, const std::vector<int64_t>& full, int64_t b,
            int64_t e) {
  if (b == 0 && e == full[1]) return rows(src, name, full, 0, full[0]);
  check_shape(src, name, full);
  const int64_t R = full[0], C = full[1], w = e - b;
  Tensor t = Tensor::cpu(DType::F32, {R, w});
  const int64_t blk = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, C));
  std::vector<float> buf(size_t(std::min(blk, R) * C));
  for (int64_t r0 = 0; r0 < R; r0 += blk) {
    const int64_t r1 = std::min(R, r0 + blk);
    src.read_rows_f32(name, r0, r1, buf.data());
    for (int64_t r = r0; r < r1; ++r)
      std::copy_n(buf.data() + (r - r0) * C + b, w, t.ptr<float>() + r * w);
  }
  return t;
}

struct Geometry {
  int64_t H, KH, D, hidden, inter, vocab;
  int64_t kvl, hl, il;     // local counts
  int64_t kv0, h0, i0;     // local offsets (in heads / rows)
};

Geometry geometry(const ModelConfig& cfg, ShardSpec s) {
  TF_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "shard rank " << s.rank << " of " << s.size << " is invalid");
  TF_CHECK(cfg.num_heads > 0 && cfg.num_kv_heads > 0 && cfg.head_dim > 0 && cfg.hidden_size > 0 &&
               cfg.intermediate_size > 0 && cfg.vocab_size > 0 && cfg.num_layers > 0,
           "model config has zero-sized dimensions");
  TF_CHECK(cfg.num_heads % cfg.num_kv_heads == 0,
           "num_heads " << cfg.num_heads << " is not a multiple of num_kv_heads " << cfg.num_kv_heads);
  TF_CHECK(cfg.num_kv_heads >= s.size,
           "tensor-parallel size " << s.size << " exceeds the model's " << cfg.num_kv_heads << " KV heads ("
                                   << cfg.num_heads << " query heads)");
  TF_CHECK(cfg.intermediate_size % s.size == 0,
           "intermediate_size " << cfg.intermediate_size << " does not split over " << s.size << " ranks");
  Geometry g;
  g.H = cfg.num_heads; g.KH = cfg.num_kv_heads; g.D = cfg.head_dim; g.hidden = cfg.hidden_size;
  g.inter = cfg.intermediate_size; g.vocab = cfg.vocab_size;
  const VocabSlice kv = kv_head_slice(g.KH, s.rank, s.size);
  g.kvl = kv.size(); g.hl = g.kvl * (g.H / g.KH); g.il = g.inter / s.size;
  g.kv0 = kv.begin; g.h0 = kv.begin * (g.H / g.KH); g.i0 = s.rank * g.il;
  return g;
}

}  // namespace

VocabSlice vocab_slice(int64_t vocab, int64_t rank, int64_t size) {
  return VocabSlice{vocab * rank / size, vocab * (rank + 1) / size};
}

std::vector<int64_t> vocab_slice_sizes(int64_t vocab, int64_t size) {
  std::vector<int64_t> s;
  for (int64_t r = 0; r < size; ++r) s.push_back(vocab_slice(vocab, r, size).size());
  return s;
}

LlamaWeights LlamaWeights::load(const WeightSource& src, const ModelConfig& cfg, ShardSpec shard) {
  const Geometry g = geometry(cfg, shard);
  LlamaWeights w;
  w.shard = shard;
  w.local_heads = g.hl; w.local_kv_heads = g.kvl; w.local_intermediate = g.il;
  w.final_norm = rows(src, "model.norm.weight", {g.hidden}, 0, g.hidden);
  w.head_rows = shard.vocab_parallel_head ? vocab_slice(g.vocab, shard.rank, shard.size) : VocabSlice{0, g.vocab};
  if (cfg.shared_embedding.enabled) {
    // A draft borrowing its target's embedding: model/shared_embedding attaches
    // it (and the tied head); both stay empty here.
    TF_CHECK(shard.size == 1, "a draft that borrows its target's embedding is never sharded");
  } else {
    w.embed = rows(src, "model.embed_tokens.weight", {g.vocab, g.hidden}, 0, g.vocab);
    if (src.has("lm_head.weight")) {
      w.lm_head = rows(src, "lm_head.weight", {g.vocab, g.hidden}, w.head_rows.begin, w.head_rows.end);
    } else {
      TF_CHECK(cfg.tie_word_embeddings, "checkpoint has no lm_head.weight and tie_word_embeddings is false");
      w.lm_head = w.embed;  // a view of the embedding's rows: no copy
      w.lm_head.data = w.embed.ptr<float>() + w.head_rows.begin * g.hidden;
      w.lm_head.shape = {w.head_rows.size(), g.hidden};
    }
  }
  if (src.has(kDraftVocabTensor)) {
    w.head_ids = read_draft_vocab(src, g.vocab);
    TF_CHECK(shard.size == 1, src.info(kDraftVocabTensor).file
                                  << ": a draft with a reduced vocabulary (" << kDraftVocabTensor
                                  << ") is never sharded (tensor-parallel size " << shard.size << ")");
    if (!cfg.shared_embedding.enabled) restrict_head(w);  // a borrowed head is restricted when it is attached
  }
  w.layers.resize(size_t(cfg.num_layers));
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = rows(src, layer_name(l, "input_layernorm.weight"), {g.hidden}, 0, g.hidden);
    L.mlp_norm = rows(src, layer_name(l, "post_attention_layernorm.weight"), {g.hidden}, 0, g.hidden);
    L.wq = rows(src, layer_name(l, "self_attn.q_proj.weight"), {g.H * g.D, g.hidden}, g.h0 * g.D, (g.h0 + g.hl) * g.D);
    L.wk = rows(src, layer_name(l, "self_attn.k_proj.weight"), {g.KH * g.D, g.hidden}, g.kv0 * g.D, (g.kv0 + g.kvl) * g.D);
    L.wv = rows(src, layer_name(l, "self_attn.v_proj.weight"), {g.KH * g.D, g.hidden}, g.kv0 * g.D, (g.kv0 + g.kvl) * g.D);
    L.wo = cols(src, layer_name(l, "self_attn.o_proj.weight"), {g.hidden, g.H * g.D}, g.h0 * g.D, (g.h0 + g.hl) * g.D);
    L.w_gate = rows(src, layer_name(l, "mlp.gate_proj.weight"), {g.inter, g.hidden}, g.i0, g.i0 + g.il);
    L.w_up = rows(src, layer_name(l, "mlp.up_proj.weight"), {g.inter, g.hidden}, g.i0, g.i0 + g.il);
    L.w_down = cols(src, layer_name(l, "mlp.down_proj.weight"), {g.hidden, g.inter}, g.i0, g.i0 + g.il);
  }
  return w;
}

LlamaWeights LlamaWeights::random(const ModelConfig& cfg, uint64_t seed, float scale) {
  const Geometry g = geometry(cfg, {});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::uniform_real_distribution<float> ud(0.8f, 1.2f);
  auto mat = [&](int64_t r, int64_t c) {
    Tensor t = Tensor::cpu(DType::F32, {r, c});
    for (int64_t i = 0; i < r * c; ++i) t.ptr<float>()[i] = nd(rng);
    return t;
  };
  auto norm = [&](int64_t d) {
    Tensor t = Tensor::cpu(DType::F32, {d});
    for (int64_t i = 0; i < d; ++i) t.ptr<float>()[i] = ud(rng);
    return t;
  };
  LlamaWeights w;
  w.local_heads = g.H; w.local_kv_heads = g.KH; w.local_intermediate = g.inter;
  w.embed = mat(g.vocab, g.hidden);
  for (int64_t i = 0; i < g.vocab * g.hidden; ++i) w.embed.ptr<float>()[i] *= 50.0f;  // O(1) activations
  w.final_norm = norm(g.hidden);
  w.lm_head = cfg.tie_word_embeddings ? w.embed : mat(g.vocab, g.hidden);
  w.head_rows = VocabSlice{0, g.vocab};
  w.layers.resize(size_t(cfg.num_layers));
  for (auto& L : w.layers) {
    L.attn_norm = norm(g.hidden);
    L.mlp_norm = norm(g.hidden);
    L.wq = mat(g.H * g.D, g.hidden);
    L.wk = mat(g.KH * g.D, g.hidden);
    L.wv = mat(g.KH * g.D, g.hidden);
    L.wo = mat(g.hidden, g.H * g.D);
    L.w_gate = mat(g.inter, g.hidden);
    L.w_up = mat(g.inter, g.hidden);
    L.w_down = mat(g.hidden, g.inter);
  }
  return w;
}

}  // namespace tf
