// A draft with a reduced vocabulary (model/draft_vocab.h) on CUDA: the
// restricted head is gathered from the target's device embedding in its
// dtype, its logits are the full head's at the same ids (bit for bit: the
// same rows and the same GEMM per row would be ideal, so the bound is the
// dtype's rounding of an f32 accumulate over a different N) and -inf
// elsewhere, they match the CPU restricted draft within the dtype's bound,
// and greedy spec/triforce with it give ar's tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "core/device.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "speculative/methods.h"
#include "../unit/draft_vocab_fixture.h"

using namespace tf;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = TF_FIXTURES;
const fs::path kDraft = kFixtures / "draft" / "gqa_f32_draft";
const fs::path kTarget = kFixtures / "hf" / "gqa_f32";

std::unique_ptr<LlamaModel> load(const fs::path& p, Device dev, DType dt) {
  Checkpoint ck = open_checkpoint(p.string());
  LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
  if (dev == Device::CUDA) w = upload_weights(w, dev, dt);
  return std::make_unique<LlamaModel>(ck.config, std::move(w));
}

}  // namespace

TEST(DraftVocabGpu, RestrictedHeadMatchesFullHeadAndCpu) {
  REQUIRE_DEVICE();
  const std::vector<int32_t> ids = tf::testing::some_draft_ids();
  const fs::path dir = fs::temp_directory_path() / "tf_draft_vocab_gpu";
  const std::string restricted = tf::testing::draft_with_vocab(kDraft, dir, ids).string();
  const std::vector<int32_t> toks = {3, 17, 99, 250, 4, 8, 15, 16, 23, 42, 7, 1};
  auto cpu_target = load(kTarget, Device::CPU, DType::F32);
  speculative::DraftModels cpu_drafts;
  LlamaModel& cpu_part = cpu_drafts.get(restricted, *cpu_target);
  FullKVCache cc = cpu_part.make_cache(16);
  const Tensor ref = cpu_part.forward(toks, cc, int64_t(toks.size()));
  std::vector<bool> in(256, false);
  for (int32_t i : ids) in[size_t(i)] = true;
  for (DType dt : {DType::BF16, DType::F16}) {
    auto t = load(kTarget, Device::CUDA, dt);
    speculative::DraftModels drafts;
    LlamaModel& full = drafts.get(kDraft.string(), *t);
    LlamaModel& part = drafts.get(restricted, *t);
    EXPECT_EQ(part.weights().lm_head.device, Device::CUDA);
    EXPECT_EQ(part.weights().lm_head.dtype, dt);
    EXPECT_EQ(part.weights().lm_head.dim(0), int64_t(ids.size()));
    FullKVCache cf = full.make_cache(16), cp = part.make_cache(16);
    Tensor a = full.forward(toks, cf, int64_t(toks.size()));
    Tensor b = part.forward(toks, cp, int64_t(toks.size()));
    ASSERT_EQ(b.shape, a.shape);
    double max_full = 0, max_ref = 0, err_full = 0, err_ref = 0;
    for (int64_t r = 0; r < a.dim(0); ++r)
      for (int64_t v = 0; v < 256; ++v) {
        const float x = a.ptr<float>()[r * 256 + v], y = b.ptr<float>()[r * 256 + v], z = ref.ptr<float>()[r * 256 + v];
        if (!in[size_t(v)]) {
          EXPECT_EQ(y, -std::numeric_limits<float>::infinity()) << dtype_name(dt) << " row " << r << " id " << v;
          continue;
        }
        ASSERT_TRUE(std::isfinite(y)) << dtype_name(dt) << " row " << r << " id " << v;
        max_full = std::max(max_full, double(std::fabs(x)));
        max_ref = std::max(max_ref, double(std::fabs(z)));
        err_full = std::max(err_full, double(std::fabs(y - x)));
        err_ref = std::max(err_ref, double(std::fabs(y - z)));
      }
    // Same rows, same inputs: only the GEMM's own rounding may differ (one output rounding of the dtype).
    EXPECT_LE(err_full / max_full, dt == DType::BF16 ? 8e-3 : 1e-3) << dtype_name(dt) << " vs the full head";
    EXPECT_LT(err_ref / max_ref, dt == DType::BF16 ? 0.05 : 0.01) << dtype_name(dt) << " vs the CPU";
    // Greedy spec and triforce with the restricted draft give ar's tokens.
    std::vector<int32_t> prompt;
    for (int i = 0; i < 96; ++i) prompt.push_back(int32_t((i * 37 + 11) % 256));
    speculative::MethodRequest ar;
    ar.max_new_tokens = 48;
    const auto base = speculative::run_method(*t, ar, prompt, nullptr, &drafts);
    for (const char* m : {"spec", "triforce"}) {
      speculative::MethodRequest r = ar;
      r.method = m;
      r.draft = restricted;
      const auto o = speculative::run_method(*t, r, prompt, nullptr, &drafts);
      EXPECT_EQ(o.tokens, base.tokens) << m << " " << dtype_name(dt);
    }
  }
  fs::remove_all(dir);
}
