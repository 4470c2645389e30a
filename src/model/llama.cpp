#include "model/llama.h"

#include <algorithm>
#include <limits>

#include "ops/ops.h"

namespace tf {

LlamaModel::LlamaModel(ModelConfig cfg, LlamaWeights w, int64_t max_chunk, dist::Communicator* comm)
    : cfg_(std::move(cfg)), w_(std::move(w)), comm_(comm), max_chunk_(max_chunk), rope_(cfg_) {
  TF_CHECK(max_chunk_ > 0, "LlamaModel: max_chunk must be positive");
  const int64_t comm_size = comm_ ? comm_->size() : 1;
  TF_CHECK(w_.shard.size == comm_size, "LlamaModel: weights are shard " << w_.shard.rank << " of " << w_.shard.size
                                                                       << " but the communicator has " << comm_size
                                                                       << " ranks");
  if (w_.shard.size == 1) {
    w_.local_heads = cfg_.num_heads;
    w_.local_kv_heads = cfg_.num_kv_heads;
    w_.local_intermediate = cfg_.intermediate_size;
  }
  TF_CHECK(int64_t(w_.layers.size()) == cfg_.num_layers,
           "LlamaModel: weights have " << w_.layers.size() << " layers, config " << cfg_.num_layers);
  const int64_t C = max_chunk_, H = w_.local_heads, KH = w_.local_kv_heads, D = cfg_.head_dim;
  tok_ = Tensor::cpu(DType::I32, {C});
  pos_ = Tensor::cpu(DType::I32, {C});
  x_ = Tensor::cpu(DType::F32, {C, cfg_.hidden_size});
  xn_ = Tensor::cpu(DType::F32, {C, cfg_.hidden_size});
  proj_ = Tensor::cpu(DType::F32, {C, cfg_.hidden_size});
  q_ = Tensor::cpu(DType::F32, {C, H, D});
  k_ = Tensor::cpu(DType::F32, {C, KH, D});
  v_ = Tensor::cpu(DType::F32, {C, KH, D});
  att_ = Tensor::cpu(DType::F32, {C, H, D});
  gate_ = Tensor::cpu(DType::F32, {C, w_.local_intermediate});
  up_ = Tensor::cpu(DType::F32, {C, w_.local_intermediate});
  cos_ = Tensor::cpu(DType::F32, {C, D / 2});
  sin_ = Tensor::cpu(DType::F32, {C, D / 2});
  inv_freq_ = Tensor::cpu(DType::F32, {D / 2});
}

FullKVCache LlamaModel::make_cache(int64_t capacity) const {
  return FullKVCache(cfg_.num_layers, w_.local_kv_heads, cfg_.head_dim, capacity);
}

Tensor LlamaModel::forward(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out) {
  std::vector<int64_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache.length() + int64_t(i);
  return forward(tokens, pos, cache, n_out);
}

Tensor LlamaModel::forward_capturing_last_query(const std::vector<int32_t>& tokens, FullKVCache& cache,
                                                int64_t n_out, std::vector<std::vector<float>>& last_query) {
  last_query.assign(size_t(cfg_.num_layers), std::vector<float>(size_t(w_.local_heads * cfg_.head_dim)));
  capture_q_ = &last_query;
  try {
    Tensor out = forward(tokens, cache, n_out);
    capture_q_ = nullptr;
    return out;
  } catch (...) {
    capture_q_ = nullptr;
    throw;
  }
}

Tensor LlamaModel::forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                           FullKVCache& cache, int64_t n_out) {
  const int64_t n = int64_t(tokens.size());
  TF_CHECK(n > 0, "forward: no tokens");
  TF_CHECK(int64_t(positions.size()) == n,
           "forward: " << n << " tokens but " << positions.size() << " positions");
  if (n_out < 0) n_out = n;
  TF_CHECK(n_out <= n, "forward: asked for " << n_out << " logit rows of " << n << " tokens");
  TF_CHECK(cache.num_layers() == cfg_.num_layers && cache.num_kv_heads() == w_.local_kv_heads &&
               cache.head_dim() == cfg_.head_dim,
           "forward: KV cache geometry does not match the model");
  TF_CHECK(cache.length() + n <= cache.capacity(),
           "KV cache full: " << cache.length() << " + " << n << " tokens exceed capacity " << cache.capacity());
  std::vector<int32_t> pos32(static_cast<size_t>(n));
  int64_t pmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    TF_CHECK(positions[i] >= 0 && positions[i] <= std::numeric_limits<int32_t>::max(),
             "forward: position " << positions[i] << " out of range");
    pos32[size_t(i)] = int32_t(positions[i]);
    pmax = std::max(pmax, positions[i]);
  }
  // Dynamic NTK: transformers updates once per call from max(position_ids) + 1.
  const RopeTable& rope = rope_.update(pmax + 1);

  const int64_t V = w_.lm_head.dim(0);  // the vocab, or this rank's slice of it (vocab-parallel lm_head)
  Tensor logits = Tensor::cpu(DType::F32, {n_out, V});
  const int64_t start_len = cache.length();
  const int64_t out_from = n - n_out;  // first token whose logits are returned
  try {
    for (int64_t c0 = 0; c0 < n; c0 += max_chunk_) {
      const int64_t m = std::min(max_chunk_, n - c0);
      float* dst = nullptr;
      int64_t from = 0;
      if (c0 + m > out_from) {
        from = std::max<int64_t>(0, out_from - c0);  // row within chunk
        dst = logits.ptr<float>() + (c0 + from - out_from) * V;
      }
      run_chunk(tokens.data() + c0, pos32.data() + c0, m, cache, rope, dst ? from : m, dst, c0 + m == n);
    }
  } catch (...) {
    cache.truncate(start_len);
    throw;
  }
  if (V != cfg_.vocab_size) {  // vocab-parallel lm_head: every rank receives every rank's slice
    Tensor full = Tensor::cpu(DType::F32, {n_out, cfg_.vocab_size});
    comm_->allgather_columns(logits, full, vocab_slice_sizes(cfg_.vocab_size, w_.shard.size));
    logits = full;
  }
  return logits;
}

void LlamaModel::run_chunk(const int32_t* tokens, const int32_t* positions, int64_t n, FullKVCache& cache,
                           const RopeTable& rope, int64_t out_from, float* logits_out, bool capture_last_row) {
  using ops::slice_rows;
  const int64_t H = w_.local_heads, KH = w_.local_kv_heads, D = cfg_.head_dim;
  std::copy_n(tokens, n, tok_.ptr<int32_t>());
  std::copy_n(positions, n, pos_.ptr<int32_t>());
  std::copy(rope.inv_freq.begin(), rope.inv_freq.end(), inv_freq_.ptr<float>());
  Tensor tok = slice_rows(tok_, 0, n), pos = slice_rows(pos_, 0, n);
  Tensor x = slice_rows(x_, 0, n), xn = slice_rows(xn_, 0, n), proj = slice_rows(proj_, 0, n);
  Tensor q = slice_rows(q_, 0, n), k = slice_rows(k_, 0, n), v = slice_rows(v_, 0, n);
  Tensor att = slice_rows(att_, 0, n), gate = slice_rows(gate_, 0, n), up = slice_rows(up_, 0, n);
  Tensor cs = slice_rows(cos_, 0, n), sn = slice_rows(sin_, 0, n);
  auto flat = [](const Tensor& t, int64_t cols) {  // [n, a, b] -> [n, a*b] view
    Tensor f = t;
    f.shape = {t.shape[0], cols};
    return f;
  };
  Tensor q2 = flat(q, H * D), k2 = flat(k, KH * D), v2 = flat(v, KH * D), att2 = flat(att, H * D);

  const ops::RmsNormParams np{float(cfg_.rms_norm_eps)};
  ops::AttentionParams ap;
  ap.num_heads = H;
  ap.num_kv_heads = KH;
  ap.head_dim = D;

  ops::embedding(w_.embed, tok, x);
  ops::rope_cos_sin(inv_freq_, pos, cs, sn, ops::RopeParams{rope.attention_scaling});
  const int64_t slot = cache.append_slots(positions, n);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    ops::rmsnorm(x, L.attn_norm, xn, np);
    ops::linear(xn, L.wq, q2);
    ops::linear(xn, L.wk, k2);
    ops::linear(xn, L.wv, v2);
    ops::rope_apply(q, cs, sn);
    ops::rope_apply(k, cs, sn);
    if (capture_q_ && capture_last_row)
      std::copy_n(q.ptr<float>() + (n - 1) * H * D, H * D, (*capture_q_)[size_t(l)].data());
    cache.write(l, slot, k.ptr<float>(), v.ptr<float>(), n);
    ops::attention(q, pos, cache.view(l), att, ap);
    ops::linear(att2, L.wo, proj);
    if (comm_) comm_->allreduce_sum(proj);  // row-parallel o
    ops::add_rmsnorm(x, proj, L.mlp_norm, xn, np);  // x += attn; xn = norm(x)
    ops::linear(xn, L.w_gate, gate);
    ops::linear(xn, L.w_up, up);
    ops::silu_mul(gate, up, gate);
    ops::linear(gate, L.w_down, proj);
    if (comm_) comm_->allreduce_sum(proj);  // row-parallel down
    ops::add_inplace(x, proj);
  }
  if (logits_out && out_from < n) {
    Tensor xs = slice_rows(x, out_from, n), xo = slice_rows(xn, out_from, n);
    ops::rmsnorm(xs, w_.final_norm, xo, np);
    Tensor lg;
    lg.data = logits_out;
    lg.dtype = DType::F32;
    lg.shape = {n - out_from, w_.lm_head.dim(0)};
    ops::linear(xo, w_.lm_head, lg);
  }
}

std::vector<int32_t> greedy_generate(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t n_new) {
  TF_CHECK(!prompt.empty(), "greedy_generate: empty prompt");
  FullKVCache cache = model.make_cache(int64_t(prompt.size()) + n_new + 1);
  std::vector<int32_t> out;
  Tensor lg = model.forward(prompt, cache, 1);
  Tensor best = Tensor::cpu(DType::I32, {1});
  for (int64_t i = 0; i < n_new; ++i) {
    ops::argmax(lg, best);
    out.push_back(best.ptr<int32_t>()[0]);
    if (i + 1 < n_new) lg = model.forward({out.back()}, cache, 1);
  }
  return out;
}

}  // namespace tf
