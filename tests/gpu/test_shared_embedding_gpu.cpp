// A draft that borrows its target's embedding, on CUDA: DraftModels::get
// points the draft at the target's device embedding (no second copy, the
// target's dtype), its logits match the fp32 CPU draft within the dtype's
// bound, and with the committed SmolLM2 draft greedy spec and triforce give
// ar's tokens (the default draft of the default model).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "default_model_path.h"
#include "core/device.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "speculative/methods.h"

using namespace tf;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = TF_FIXTURES;

std::unique_ptr<LlamaModel> load(const fs::path& p, Device dev, DType dt) {
  Checkpoint ck = open_checkpoint(p.string());
  LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
  if (dev == Device::CUDA) w = upload_weights(w, dev, dt);
  return std::make_unique<LlamaModel>(ck.config, std::move(w));
}

// max |a - b| / max |b| over all logits.
double rel_err(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    num = std::max(num, double(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    den = std::max(den, double(std::fabs(b.ptr<float>()[i])));
  }
  return num / den;
}

}  // namespace

TEST(SharedEmbeddingGpu, BorrowsTheDeviceEmbedding) {
  REQUIRE_DEVICE();
  const fs::path draft = kFixtures / "draft" / "gqa_f32_draft", target = kFixtures / "hf" / "gqa_f32";
  auto cpu_target = load(target, Device::CPU, DType::F32);
  speculative::DraftModels cpu_drafts;
  const std::vector<int32_t> toks = {3, 17, 99, 250, 4, 8, 15, 16, 23, 42, 7, 1};
  FullKVCache cc = cpu_drafts.get(draft.string(), *cpu_target).make_cache(16);
  const Tensor ref = cpu_drafts.get(draft.string(), *cpu_target).forward(toks, cc);
  for (DType dt : {DType::BF16, DType::F16}) {
    auto t = load(target, Device::CUDA, dt);
    speculative::DraftModels drafts;
    LlamaModel& d = drafts.get(draft.string(), *t);
    EXPECT_EQ(d.device(), Device::CUDA);
    EXPECT_EQ(d.dtype(), dt);
    EXPECT_EQ(d.weights().embed.data, t->weights().embed.data) << "a second copy of the embedding";
    EXPECT_EQ(d.weights().lm_head.data, t->weights().embed.data);
    FullKVCache c = d.make_cache(16);
    const Tensor got = d.forward(toks, c);
    EXPECT_LT(rel_err(got, ref), dt == DType::BF16 ? 0.05 : 0.01) << dtype_name(dt);
  }
}

TEST(SharedEmbeddingGpu, DefaultDraftGreedyEqualsAr) {
  REQUIRE_DEVICE();
  const fs::path model = default_model_gguf();
  if (!fs::exists(model)) GTEST_SKIP() << model << " is missing";
  auto t = load(model, Device::CUDA, DType::BF16);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 700; ++i) prompt.push_back(int32_t((i * 7919 + 13) % 20000 + 100));
  speculative::DraftModels drafts;
  speculative::MethodRequest ar;
  ar.max_new_tokens = 48;
  const auto base = speculative::run_method(*t, ar, prompt, nullptr, &drafts);
  for (const char* m : {"spec", "triforce"}) {
    speculative::MethodRequest r = ar;
    r.method = m;
    const auto o = speculative::run_method(*t, r, prompt, nullptr, &drafts);
    EXPECT_EQ(o.resolved.draft_choice, "trained") << m << ": " << o.resolved.chain.str();
    EXPECT_EQ(o.tokens, base.tokens) << m;
  }
}
