// A tensor-parallel shard of a synthetic model holds exactly its slices of the
// unsharded model's numbers, so TP runs of synthetic:NAME are comparable with
// TP 1 (the 2-GPU issue compares their tokens).
#include <gtest/gtest.h>

#include <cstring>

#include "core/device.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

using namespace tf;

namespace {

// rows [r0, r0+nr) x cols [c0, c0+nc) of a host [R, C] matrix
std::vector<float> window(const Tensor& h, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<float> out;
  const int64_t C = h.dim(1);
  for (int64_t r = r0; r < r0 + nr; ++r)
    for (int64_t c = c0; c < c0 + nc; ++c) out.push_back(h.ptr<float>()[r * C + c]);
  return out;
}
std::vector<float> all(const Tensor& d) {
  Tensor h = to_host_f32(d);
  return std::vector<float>(h.ptr<float>(), h.ptr<float>() + h.numel());
}
// Rows [r0, r1) of a device matrix, as host f32 (the vocab-sized matrices are
// checked on a few rows at each end of a slice: 128K x 4K elements each).
std::vector<float> rows_of(const Tensor& d, int64_t r0, int64_t r1) {
  Tensor v = d;
  v.shape = {r1 - r0, d.dim(1)};
  v.data = static_cast<uint8_t*>(d.data) + size_t(r0 * d.dim(1)) * dtype_size(d.dtype);
  return all(v);
}

void check_shards(const std::string& name, int64_t N, bool vocab_parallel) {
  const ModelConfig cfg = synthetic_config(name);
  const LlamaWeights full = synthetic_weights(cfg, Device::CUDA, DType::BF16, 5);
  const int64_t hd = cfg.head_dim, hid = cfg.hidden_size, inter = cfg.intermediate_size;
  const int64_t group = cfg.num_heads / cfg.num_kv_heads, il = inter / N;
  for (int64_t r = 0; r < N; ++r) {
    SCOPED_TRACE(name + " rank " + std::to_string(r) + " of " + std::to_string(N));
    // balanced KV heads: rank r holds [KH r / N, KH (r + 1) / N) and their query groups
    const int64_t kv0 = cfg.num_kv_heads * r / N, kvl = cfg.num_kv_heads * (r + 1) / N - kv0, hl = kvl * group;
    ShardSpec s{r, N, vocab_parallel};
    const LlamaWeights w = synthetic_weights(cfg, Device::CUDA, DType::BF16, 5, s);
    EXPECT_EQ(w.local_heads, hl);
    EXPECT_EQ(w.local_kv_heads, kvl);
    EXPECT_EQ(w.local_intermediate, il);
    const int64_t V = cfg.vocab_size, e = 64;
    EXPECT_EQ(rows_of(w.embed, 0, e), rows_of(full.embed, 0, e));
    EXPECT_EQ(rows_of(w.embed, V - e, V), rows_of(full.embed, V - e, V));
    const VocabSlice vs = vocab_parallel ? vocab_slice(V, r, N) : VocabSlice{0, V};
    ASSERT_EQ(w.lm_head.dim(0), vs.size());
    EXPECT_EQ(rows_of(w.lm_head, 0, e), rows_of(full.lm_head, vs.begin, vs.begin + e));
    EXPECT_EQ(rows_of(w.lm_head, vs.size() - e, vs.size()), rows_of(full.lm_head, vs.end - e, vs.end));
    EXPECT_EQ(all(w.final_norm), all(full.final_norm));
    for (size_t l : {size_t(0), full.layers.size() - 1}) {
      const LayerWeights &a = w.layers[l], &b = full.layers[l];
      EXPECT_EQ(all(a.attn_norm), all(b.attn_norm));
      EXPECT_EQ(all(a.wq), window(to_host_f32(b.wq), kv0 * group * hd, hl * hd, 0, hid));
      EXPECT_EQ(all(a.wk), window(to_host_f32(b.wk), kv0 * hd, kvl * hd, 0, hid));
      EXPECT_EQ(all(a.wv), window(to_host_f32(b.wv), kv0 * hd, kvl * hd, 0, hid));
      EXPECT_EQ(all(a.wo), window(to_host_f32(b.wo), 0, hid, kv0 * group * hd, hl * hd));
      EXPECT_EQ(all(a.w_gate), window(to_host_f32(b.w_gate), r * il, il, 0, hid));
      EXPECT_EQ(all(a.w_up), window(to_host_f32(b.w_up), r * il, il, 0, hid));
      EXPECT_EQ(all(a.w_down), window(to_host_f32(b.w_down), 0, hid, r * il, il));
    }
  }
}

}  // namespace

TEST(SyntheticShard, SlicesOfTheUnshardedModel) {
  REQUIRE_DEVICE();
  check_shards("synthetic:smollm2-135m", 3, true);   // tied lm_head, GQA 9/3
  check_shards("synthetic:smollm2-135m", 1, true);
  check_shards("synthetic:smollm2-135m", 2, true);   // 3 KV heads over 2 ranks: 2 + 1
  // Sanitizer shapes: the untied and replicated lm_head cases on llama-68m (MHA 12/12, 32K vocab), not 16 GB of 8B.
  const std::string untied = tf::testing::pick<std::string>("synthetic:llama3.1-8b", "synthetic:llama-68m");
  check_shards(untied, 2, true);    // untied, GQA 32/8, 128K vocab
  check_shards(untied, 4, false);   // replicated lm_head
}

TEST(SyntheticShard, RejectsMoreRanksThanKVHeads) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");  // 3 KV heads
  EXPECT_THROW(synthetic_weights(cfg, Device::CUDA, DType::BF16, 5, ShardSpec{0, 4, true}), Error);
}
