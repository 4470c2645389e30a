// Collapsing a middle target@retrieval level whose budget covers the whole
// context (speculative::resolve): "covers" agrees with what the retrieval
// cache really keeps; the level is dropped only then, never with
// --full-hierarchy or simulated rates; at T = 0 the collapsed and the full
// hierarchy give ar's tokens; the outcome and --json say which happened.
#include <gtest/gtest.h>

#include "kv/retrieval_cache.h"
#include "speculative/methods.h"
#include "tiny_model.h"

using namespace tf;
using namespace tf::speculative;

namespace {

LlamaModel tiny_target() {
  ModelConfig c = tf::testing::tiny_llama_config(32, 16, 2, 2, 1, 64);
  return LlamaModel(c, LlamaWeights::random(c, 7, 0.5f));
}

std::vector<int32_t> prompt_of(int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((i * 7 + 3) % 32));
  return p;
}

MethodRequest triforce(int64_t budget, int64_t max_new) {
  MethodRequest r;
  r.method = "triforce";
  r.draft = "layerskip:1";
  r.budget = budget;
  r.chunk = 8;
  r.max_new_tokens = max_new;
  return r;
}

}  // namespace

TEST(Collapse, CoversIffTheRetrievalCacheKeepsEveryPromptToken) {
  LlamaModel m = tiny_target();
  for (int64_t budget : {8, 16, 24}) {
    for (int64_t P = 2; P <= 40; ++P) {
      RetrievalOptions ro;
      ro.budget = budget;
      ro.chunk = 8;
      RetrievalKVCache rc(m.config(), ro, 8);
      rc.build(m, prompt_of(P));
      // The cache retrieves from the prompt but its last token.
      EXPECT_EQ(retrieval_covers(budget, 8, P - 1), rc.region() == P - 1) << "budget " << budget << ", P " << P;
    }
  }
}

TEST(Collapse, DropsTheMiddleLevelOnlyWhenItsBudgetCoversTheContext) {
  LlamaModel m = tiny_target();
  // Budget 16 / chunk 8: the last full chunk count that still fits is 2 (the partial one is always kept).
  ResolvedMethod a = resolve(m, triforce(16, 32), 24);  // 23 tokens: 2 full chunks + 7
  EXPECT_EQ(a.chain.str(), "layerskip:1@streaming:16/234 > target");
  EXPECT_EQ(a.gammas, (std::vector<int64_t>{2}));
  EXPECT_EQ(a.collapsed_levels, (std::vector<std::string>{"target@retrieval:16/8"}));
  ResolvedMethod b = resolve(m, triforce(16, 32), 25);  // 24 tokens: 3 full chunks, one is dropped
  EXPECT_EQ(b.chain.str(), "layerskip:1@streaming:16/234 > target@retrieval:16/8 > target");
  EXPECT_EQ(b.gammas, (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(b.collapsed_levels.empty());
  // Re-retrieval may rebuild from the committed context: it must fit too.
  MethodRequest rr = triforce(16, 32);
  rr.reretrieve = "every:4";
  EXPECT_TRUE(resolve(m, rr, 24).collapsed_levels.empty());
  rr.budget = 56;  // 23 + 32 = 55 tokens: 6 full chunks <= 7
  EXPECT_EQ(resolve(m, rr, 24).collapsed_levels.size(), 1u);
  // Forced hierarchy, and simulated rates (one per level of the requested chain), keep it.
  MethodRequest full = triforce(16, 32);
  full.full_hierarchy = true;
  EXPECT_EQ(resolve(m, full, 24).chain.levels.size(), 3u);
  MethodRequest sim = triforce(16, 32);
  sim.simulate_acceptance = {0.5, 0.9};
  EXPECT_EQ(resolve(m, sim, 24).chain.levels.size(), 3u);
  // Only middle levels on the target: `retrieval` (its bottom level) and ar are untouched.
  MethodRequest ret;
  ret.method = "retrieval";
  ret.budget = 16;
  EXPECT_EQ(resolve(m, ret, 24).chain.levels.size(), 2u);
  MethodRequest ar;
  EXPECT_TRUE(resolve(m, ar, 24).collapsed_levels.empty());
  // A deeper chain loses the covering level and its γ; the level below keeps its own.
  MethodRequest ch;
  ch.method = "chain";
  ch.chain = "ngram:2 > layerskip:1@streaming:4/16 > target@retrieval:32/8 > target";
  ch.gammas = {2, 3, 4};
  ResolvedMethod c = resolve(m, ch, 20);
  EXPECT_EQ(c.chain.str(), "ngram:2 > layerskip:1@streaming:4/16 > target");
  EXPECT_EQ(c.gammas, (std::vector<int64_t>{2, 3}));
}

TEST(Collapse, GreedyTokensEqualArCollapsedOrNot) {
  LlamaModel m = tiny_target();
  const std::vector<int32_t> prompt = prompt_of(20);
  PrefillSnapshot snap(m, prompt);
  MethodRequest ar;
  ar.max_new_tokens = 40;
  const MethodOutcome ref = run_method(m, ar, prompt, &snap);
  ASSERT_EQ(ref.tokens.size(), 40u);
  for (const char* method : {"triforce", "ngram-triforce"}) {
    MethodRequest r = triforce(24, 40);
    r.method = method;
    if (r.method == "ngram-triforce") r.draft = "";
    const MethodOutcome collapsed = run_method(m, r, prompt, &snap);
    r.full_hierarchy = true;
    const MethodOutcome full = run_method(m, r, prompt, &snap);
    EXPECT_EQ(collapsed.tokens, ref.tokens) << method;
    EXPECT_EQ(full.tokens, ref.tokens) << method;
    ASSERT_EQ(collapsed.levels.size(), 1u) << method;
    EXPECT_EQ(collapsed.levels[0].spec, "target");
    EXPECT_EQ(full.levels.size(), 2u) << method;
    // The full hierarchy's middle level computes the target's distribution: the top accepts everything.
    EXPECT_EQ(full.levels[1].accepted, full.levels[1].drafted) << method;
    EXPECT_EQ(collapsed.to_json()["collapsed_levels"], nlohmann::json::array({"target@retrieval:24/8"}));
    EXPECT_EQ(full.to_json()["collapsed_levels"], nlohmann::json::array());
  }
}
