// A draft with a reduced vocabulary (FR-Spec, model/draft_vocab.h): the
// loader's one-line refusals of a bad triforce_draft_vocab, the restricted
// head's logits against the full head's at the same ids (-inf elsewhere),
// greedy spec/triforce == ar with such a draft, and exactness at T > 0 (chi-square
// over seeds): q is 0 outside the set, so the residual carries p's mass there.
#include <gtest/gtest.h>

#include <cstdlib>

#include <cmath>
#include <filesystem>
#include <limits>

#include "model/checkpoint.h"
#include "model/draft_vocab.h"
#include "model/llama.h"
#include "speculative/methods.h"
#include "speculative/stats.h"
#include "draft_vocab_fixture.h"
#include "exact_distribution.h"
#include "test_util.h"
#include "tiny_model.h"

namespace fs = std::filesystem;
using namespace tf;
using namespace tf::speculative;
using tf::testing::expect_throws_naming;

namespace {

const fs::path kFixtures = TF_FIXTURES;
const fs::path kDraft = kFixtures / "draft" / "gqa_f32_draft";
const fs::path kTarget = kFixtures / "hf" / "gqa_f32";  // vocabulary 256

std::unique_ptr<LlamaModel> load_model(const fs::path& p) {
  Checkpoint ck = open_checkpoint(p.string());
  return std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config));
}

fs::path vocab_draft(const std::string& name, const std::vector<int32_t>& ids, const std::string& dtype = "I32",
                     std::vector<int64_t> shape = {}) {
  return tf::testing::draft_with_vocab(kDraft, tf::testing::tmp_dir("tf_draft_vocab") / name, ids, dtype, shape);
}

}  // namespace

TEST(DraftVocab, ValidationRules) {
  EXPECT_EQ(draft_vocab_error({0, 5, 255}, 256), "");
  EXPECT_NE(draft_vocab_error({}, 256).find("holds no token ids"), std::string::npos);
  EXPECT_NE(draft_vocab_error({0, 256}, 256).find("entry 1 is token id 256, outside the vocabulary [0, 256)"),
            std::string::npos);
  EXPECT_NE(draft_vocab_error({-1}, 256).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(draft_vocab_error({3, 2}, 256).find("strictly increasing"), std::string::npos);
  EXPECT_NE(draft_vocab_error({2, 2}, 256).find("strictly increasing"), std::string::npos);
  EXPECT_NE(draft_vocab_error({0, 1, 2}, 2).find("more than the vocabulary"), std::string::npos);
}

TEST(DraftVocab, LoaderRefusesBadSubsetsInOneLine) {
  auto target = load_model(kTarget);
  auto expect = [&](const fs::path& d, const std::string& rule) {
    DraftModels drafts;
    expect_throws_naming([&] { drafts.get(d.string(), *target); }, (d / "model.safetensors").string(), rule);
  };
  expect(vocab_draft("out_of_range", {1, 2, 300}), "triforce_draft_vocab entry 2 is token id 300");
  expect(vocab_draft("unsorted", {5, 1, 2}), "entry 1 is token id 1 after 5");
  expect(vocab_draft("repeated", {1, 2, 2}), "strictly increasing");
  expect(vocab_draft("negative", {-4, 2}), "outside the vocabulary");
  expect(vocab_draft("empty", {}), "holds no token ids");
  expect(vocab_draft("float", {1, 2, 3}, "F32"), "is F32, expected I32 token ids");
  expect(vocab_draft("matrix", {1, 2, 3, 4}, "I32", {2, 2}), "has 2 dimensions, expected 1");
}

TEST(DraftVocab, RestrictedLogitsAreTheFullHeadsRowsAndMinusInfElsewhere) {
  // Both heads f32: a gathered head would otherwise be rounded to f16 on the CPU (model/cpu_f16_linears.h)
  // and the whole one, the target's own embedding, not.
  ::setenv("TRIFORCE_CPU_DRAFT_F16", "0", 1);
  struct Unset {
    ~Unset() { ::unsetenv("TRIFORCE_CPU_DRAFT_F16"); }
  } unset;
  auto target = load_model(kTarget);
  const std::vector<int32_t> ids = tf::testing::some_draft_ids();
  DraftModels drafts;
  LlamaModel& full = drafts.get(kDraft.string(), *target);
  LlamaModel& part = drafts.get(vocab_draft("restricted", ids).string(), *target);
  EXPECT_EQ(part.weights().lm_head.shape, (std::vector<int64_t>{int64_t(ids.size()), 96}));
  EXPECT_EQ(part.weights().head_ids, ids);
  EXPECT_EQ(part.weights().embed.data, target->weights().embed.data) << "the embedding is still the target's";
  const std::vector<int32_t> toks = {3, 17, 99, 250, 4, 8, 15, 16, 23, 42, 7, 1};
  FullKVCache cf = full.make_cache(16), cp = part.make_cache(16);
  const Tensor a = full.forward(toks, cf, int64_t(toks.size())), b = part.forward(toks, cp, int64_t(toks.size()));
  ASSERT_EQ(b.shape, a.shape);
  std::vector<bool> in(256, false);
  for (int32_t i : ids) in[size_t(i)] = true;
  for (int64_t r = 0; r < a.dim(0); ++r)
    for (int64_t v = 0; v < 256; ++v) {
      const float x = a.ptr<float>()[r * 256 + v], y = b.ptr<float>()[r * 256 + v];
      if (in[size_t(v)]) EXPECT_NEAR(y, x, 1e-5f * std::max(1.0f, std::fabs(x))) << "row " << r << " id " << v;
      else EXPECT_EQ(y, -std::numeric_limits<float>::infinity()) << "row " << r << " id " << v;
    }
  // A model with its own head restricts at load (no target to borrow from): the same rows.
  ModelConfig c = tf::testing::tiny_llama_config(12, 16, 1, 2, 1, 32);
  LlamaWeights w = LlamaWeights::random(c, 5, 0.6f);
  LlamaModel whole(c, LlamaWeights::random(c, 5, 0.6f));
  w.head_ids = {1, 4, 5, 11};
  restrict_head(w);
  LlamaModel cut(c, std::move(w));
  FullKVCache c1 = whole.make_cache(8), c2 = cut.make_cache(8);
  const Tensor x = whole.forward({2, 3, 9}, c1), y = cut.forward({2, 3, 9}, c2);
  for (int64_t v = 0; v < 12; ++v) {
    const bool kept = v == 1 || v == 4 || v == 5 || v == 11;
    if (kept) EXPECT_NEAR(y.ptr<float>()[v], x.ptr<float>()[v], 1e-5f) << v;
    else EXPECT_EQ(y.ptr<float>()[v], -std::numeric_limits<float>::infinity()) << v;
  }
}

TEST(DraftVocab, GreedySpecAndTriforceEqualAr) {
  auto target = load_model(kTarget);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 96; ++i) prompt.push_back(int32_t((i * 37 + 11) % 256));
  DraftModels drafts;
  MethodRequest ar;
  ar.max_new_tokens = 64;
  const MethodOutcome base = run_method(*target, ar, prompt, nullptr, &drafts);
  // The set holds every id ar generates (so the draft can be right) and a third of the rest.
  std::vector<bool> keep(256, false);
  for (int32_t t : base.tokens) keep[size_t(t)] = true;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 256; ++i)
    if (keep[size_t(i)] || i % 3 == 0) ids.push_back(i);
  ASSERT_LT(ids.size(), 200u);
  const std::string d = vocab_draft("greedy", ids).string();
  for (const char* m : {"spec", "triforce"}) {
    MethodRequest r = ar;
    r.method = m;
    r.draft = d;
    const MethodOutcome o = run_method(*target, r, prompt, nullptr, &drafts);
    EXPECT_EQ(o.tokens, base.tokens) << m;
    ASSERT_FALSE(o.levels.empty());
    EXPECT_GT(o.levels[0].drafted, 0) << m;
  }
}

TEST(DraftVocab, SamplingStaysExact) {
  // The lossless setup of test_spec_methods (vocabulary 12, random target),
  // with a draft whose head covers 5 of the 12 ids: the first two generated
  // tokens must still follow the target's exact distributions.
  ModelConfig c = tf::testing::tiny_llama_config(12, 16, 2, 2, 1, 32);
  LlamaModel target(c, LlamaWeights::random(c, 101, 0.6f));
  LlamaWeights dw = LlamaWeights::random(c, 303, 0.6f);
  dw.head_ids = {0, 3, 4, 7, 10};
  restrict_head(dw);
  DraftModels drafts;
  drafts.put("draft", std::make_unique<LlamaModel>(c, std::move(dw)));
  const std::vector<int32_t> prompt = {3, 7, 1, 9, 4, 4, 10, 2, 6, 5, 8, 0, 11};
  for (const char* method : {"spec", "triforce"}) {
    MethodRequest req;
    req.method = method;
    req.draft = "model:draft";
    req.budget = 4, req.chunk = 2, req.sink = 1, req.window = 3;
    req.sampling.temperature = 1.0f;
    req.max_new_tokens = 2;
    std::vector<double> p1, p2;
    tf::testing::exact_first_two(target, prompt, req.sampling, p1, p2);
    PrefillSnapshot snap(target, prompt);
    std::vector<int64_t> c1(12, 0), c2(12, 0);
    int64_t accepted = 0;
    for (int64_t s = 0; s < 4000; ++s) {
      req.sampling.seed = uint64_t(s) * 7919 + 3;
      const MethodOutcome o = run_method(target, req, prompt, &snap, &drafts);
      ++c1[size_t(o.tokens.at(0))];
      ++c2[size_t(o.tokens.at(1))];
      accepted += o.levels.at(0).accepted;
    }
    const ChiSquare x1 = chi_square(c1, p1), x2 = chi_square(c2, p2);
    std::printf("%s: first p=%.4g second p=%.4g, draft tokens accepted %lld\n", method, x1.p_value, x2.p_value,
                (long long)accepted);
    EXPECT_GT(x1.p_value, 1e-3) << method;
    EXPECT_GT(x2.p_value, 1e-3) << method;
    EXPECT_GT(accepted, 0) << method << ": the draft never contributed, so the test would show nothing";
    // Tokens outside the draft's set still come out (from the residual).
    EXPECT_GT(c1[1] + c1[2] + c1[5] + c2[1] + c2[2] + c2[5], 0) << method;
  }
}
