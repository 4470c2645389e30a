#include "kv/retrieval_cache.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace tf {

void recompute_qk(const LlamaModel& model, const FullKVCache& cache, int32_t token, int64_t slot,
                  std::vector<std::vector<float>>& qo, std::vector<std::vector<float>>& ko) {
  const ModelConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  const int64_t H = c.num_heads, KH = c.num_kv_heads, D = c.head_dim, hid = c.hidden_size;
  TF_CHECK(slot >= 0 && slot < cache.length(), "recompute_qk: slot " << slot << " not in the cache");
  const int32_t pos_v = cache.position(slot);
  Tensor tok = Tensor::cpu(DType::I32, {1}), pos = Tensor::cpu(DType::I32, {1});
  tok.ptr<int32_t>()[0] = token;
  pos.ptr<int32_t>()[0] = pos_v;
  Tensor x = Tensor::cpu(DType::F32, {1, hid}), xn = Tensor::cpu(DType::F32, {1, hid});
  Tensor proj = Tensor::cpu(DType::F32, {1, hid});
  Tensor q = Tensor::cpu(DType::F32, {1, H, D}), k = Tensor::cpu(DType::F32, {1, KH, D});
  Tensor v = Tensor::cpu(DType::F32, {1, KH, D}), att = Tensor::cpu(DType::F32, {1, H, D});
  Tensor gate = Tensor::cpu(DType::F32, {1, c.intermediate_size}), up = Tensor::cpu(DType::F32, {1, c.intermediate_size});
  RopeTable rt = compute_rope(c, pos_v + 1);
  Tensor inv = Tensor::cpu(DType::F32, {D / 2});
  std::copy(rt.inv_freq.begin(), rt.inv_freq.end(), inv.ptr<float>());
  Tensor cs = Tensor::cpu(DType::F32, {1, D / 2}), sn = Tensor::cpu(DType::F32, {1, D / 2});
  ops::rope_cos_sin(inv, pos, cs, sn, ops::RopeParams{rt.attention_scaling});
  auto flat = [](const Tensor& t, int64_t cols) {
    Tensor f = t;
    f.shape = {t.shape[0], cols};
    return f;
  };
  Tensor q2 = flat(q, H * D), k2 = flat(k, KH * D), v2 = flat(v, KH * D), att2 = flat(att, H * D);
  const ops::RmsNormParams np{float(c.rms_norm_eps)};
  ops::AttentionParams ap;
  ap.num_heads = H;
  ap.num_kv_heads = KH;
  ap.head_dim = D;
  ops::embedding(w.embed, tok, x);
  qo.assign(size_t(c.num_layers), {});
  ko.assign(size_t(c.num_layers), {});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    ops::rmsnorm(x, L.attn_norm, xn, np);
    ops::linear(xn, L.wq, q2);
    ops::linear(xn, L.wk, k2);
    ops::linear(xn, L.wv, v2);
    ops::rope_apply(q, cs, sn);
    ops::rope_apply(k, cs, sn);
    qo[size_t(l)].assign(q.ptr<float>(), q.ptr<float>() + H * D);
    ko[size_t(l)].assign(k.ptr<float>(), k.ptr<float>() + KH * D);
    // The cache already holds this token's K/V at `slot`: attend over [0, slot].
    ops::KVView view = cache.view(l);
    view.length = slot + 1;
    ops::attention(q, pos, view, att, ap);
    ops::linear(att2, L.wo, proj);
    ops::add_rmsnorm(x, proj, L.mlp_norm, xn, np);
    ops::linear(xn, L.w_gate, gate);
    ops::linear(xn, L.w_up, up);
    ops::silu_mul(gate, up, gate);
    ops::linear(gate, L.w_down, proj);
    ops::add_inplace(x, proj);
  }
}

RetrievalSelection select_chunks(const FullKVCache& cache, int64_t n_tokens, const std::vector<std::vector<float>>& q,
                                 int64_t num_heads, const RetrievalOptions& opt) {
  TF_CHECK(opt.chunk >= 1 && opt.budget >= opt.chunk && opt.budget % opt.chunk == 0,
           "retrieval: budget " << opt.budget << " must be a positive multiple of chunk " << opt.chunk);
  const int64_t L = cache.num_layers(), KH = cache.num_kv_heads(), D = cache.head_dim();
  const int64_t group = num_heads / KH;
  RetrievalSelection s;
  s.num_chunks = n_tokens / opt.chunk;
  s.remainder = n_tokens % opt.chunk;
  const int64_t keep = std::min(s.num_chunks, opt.budget / opt.chunk);
  s.chunks.resize(size_t(L * KH));
  s.scores.resize(size_t(L * KH));
  auto& cref = const_cast<FullKVCache&>(cache);  // k_at is non-const; read only
  std::vector<double> mean(static_cast<size_t>(D));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t g = 0; g < KH; ++g) {
      // The group's query summed over its heads: sum_h q_h . mean_k == (sum_h q_h) . mean_k.
      std::vector<double> qs(size_t(D), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t d = 0; d < D; ++d) qs[size_t(d)] += q[size_t(l)][size_t(h * D + d)];
      auto& sc = s.scores[size_t(l * KH + g)];
      sc.assign(size_t(s.num_chunks), 0.0);
      for (int64_t c = 0; c < s.num_chunks; ++c) {
        std::fill(mean.begin(), mean.end(), 0.0);
        for (int64_t t = c * opt.chunk; t < (c + 1) * opt.chunk; ++t) {
          const float* kr = cref.k_at(l, g, t);
          for (int64_t d = 0; d < D; ++d) mean[size_t(d)] += kr[d];
        }
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qs[size_t(d)] * mean[size_t(d)] / double(opt.chunk);
        sc[size_t(c)] = dot;
      }
      std::vector<int64_t> order;
      for (int64_t c = 1; c < s.num_chunks; ++c) order.push_back(c);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sc[size_t(a)] > sc[size_t(b)]; });
      auto& ch = s.chunks[size_t(l * KH + g)];
      if (keep > 0) ch.push_back(0);
      for (int64_t i = 0; i + 1 < keep; ++i) ch.push_back(order[size_t(i)]);
      std::sort(ch.begin(), ch.end());
    }
  return s;
}

RetrievalKVCache::RetrievalKVCache(const ModelConfig& cfg, const RetrievalOptions& opt, int64_t tail_capacity)
    : opt_(opt), cache_(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, opt.budget + opt.chunk + tail_capacity) {}

void RetrievalKVCache::build(LlamaModel& model, const std::vector<int32_t>& prompt) {
  const int64_t P = int64_t(prompt.size());
  TF_CHECK(P >= 1, "retrieval cache: empty prompt");
  FullKVCache full = model.make_cache(P);
  model.forward(prompt, full, 1);
  std::vector<std::vector<float>> q, k;
  recompute_qk(model, full, prompt.back(), P - 1, q, k);
  sel_ = select_chunks(full, P - 1, q, model.config().num_heads, opt_);
  const int64_t L = full.num_layers(), KH = full.num_kv_heads(), D = full.head_dim();
  const int64_t per = int64_t(sel_.chunks.empty() ? 0 : sel_.chunks[0].size()) * opt_.chunk;
  region_ = per + sel_.remainder;
  cache_.reset();
  std::vector<int32_t> pos(static_cast<size_t>(region_));
  std::iota(pos.begin(), pos.end(), 0);
  cache_.append_slots(pos.data(), region_);
  const int64_t rem_from = sel_.num_chunks * opt_.chunk;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t g = 0; g < KH; ++g) {
      int64_t j = 0;
      auto copy = [&](int64_t t) {
        std::copy_n(full.k_at(l, g, t), D, cache_.k_at(l, g, j));
        std::copy_n(full.v_at(l, g, t), D, cache_.v_at(l, g, j));
        ++j;
      };
      for (int64_t c : sel_.chunks[size_t(l * KH + g)])
        for (int64_t t = c * opt_.chunk; t < (c + 1) * opt_.chunk; ++t) copy(t);
      for (int64_t t = rem_from; t < P - 1; ++t) copy(t);
    }
}

}  // namespace tf
