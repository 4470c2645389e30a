// A CPU draft's linears in f16 (model/cpu_f16_linears.h): with weights that
// are f16 values (an f16 checkpoint's), the model's logits are the f32 model's
// bit for bit, on a prompt chunk longer than the skinny rows (BLAS on widened
// weights), on decode steps and on verification rows; and the embedding and
// norms stay f32.
#include <gtest/gtest.h>

#include <cstring>

#include "core/half.h"
#include "model/cpu_f16_linears.h"
#include "model/llama.h"
#include "tiny_model.h"

using namespace tf;

namespace {

// t rounded to the nearest f16, kept as f32.
Tensor f16_rounded(const Tensor& t) {
  Tensor r = Tensor::cpu(DType::F32, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) r.ptr<float>()[i] = f16_to_f32(f32_to_f16(t.ptr<float>()[i]));
  return r;
}

}  // namespace

TEST(CpuF16Linears, LogitsAreTheF32ModelsBits) {
  for (bool tied : {true, false}) {
    ModelConfig c = tf::testing::tiny_llama_config(67, 40, 2, 4, 2, 72, 512);
    c.tie_word_embeddings = tied;
    LlamaWeights w = LlamaWeights::random(c, 21, 0.5f);
    for (LayerWeights& L : w.layers)
      for (Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) *t = f16_rounded(*t);
    if (!tied) w.lm_head = f16_rounded(w.lm_head);
    LlamaWeights h = w;
    cpu_f16_linears(h);
    ASSERT_EQ(h.layers[1].w_down.dtype, DType::F16);
    ASSERT_EQ(h.lm_head.dtype, tied ? DType::F32 : DType::F16);  // a tied head stays the embedding's storage
    ASSERT_EQ(h.embed.dtype, DType::F32);
    ASSERT_EQ(w.layers[0].wq.dtype, DType::F32);  // the source is untouched
    LlamaModel a(c, std::move(w)), b(c, std::move(h));
    FullKVCache ca = a.make_cache(128), cb = b.make_cache(128);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 13 + 5) % c.vocab_size));
    auto same = [](const Tensor& x, const Tensor& y) {
      return x.numel() == y.numel() && std::memcmp(x.data, y.data, x.bytes()) == 0;
    };
    ASSERT_TRUE(same(a.forward(prompt, ca, -1), b.forward(prompt, cb, -1))) << "prefill of 40, tied " << tied;
    for (int step = 0; step < 4; ++step) {
      const std::vector<int32_t> t = step % 2 ? std::vector<int32_t>{3, 9, 27} : std::vector<int32_t>{int32_t(step)};
      ASSERT_TRUE(same(a.forward(t, ca, -1), b.forward(t, cb, -1))) << "step " << step << ", tied " << tied;
    }
  }
}

TEST(CpuF16Linears, RefusesCudaStackedWeights) {
  ModelConfig c = tf::testing::tiny_llama_config(16, 16, 1, 2, 1, 24, 64);
  LlamaWeights w = LlamaWeights::random(c, 1, 0.5f);
  w.layers[0].wqkv = Tensor::cpu(DType::F32, {32, 16});
  try {
    cpu_f16_linears(w);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stacked q/k/v"), std::string::npos) << e.what();
  }
}
