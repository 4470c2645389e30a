// The chained T = 0 draft steps (LlamaModel::forward_greedy_chain, on unless
// TRIFORCE_GREEDY_CHAIN=0; ctest label gpu): k steps whose tokens come from
// the previous step's argmax on the device, staged ahead and waited for once,
// against the k forward_greedy calls they replace on a twin cache: the same
// ids and the same K/V, for k = 1..16, first steps of 1 and of several tokens,
// rollbacks between rounds, lengths across the 512-slot attention splits
// (the graph bucket changes inside a chain), a reduced-vocabulary head, and
// the drafters that use it (the full-cache and the StreamingLLM drafter, with
// and without re-indexing): the same proposals and the same state. The chain
// must really have run (greedy_chains) and replayed its graphs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/device.h"
#include "model/draft_vocab.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "synthetic_models.h"
#include "speculative/drafter.h"
#include "speculative/streaming_drafter.h"

using namespace tf;
using tf::testing::pick;
using tf::testing::tokens_for;

namespace {

// TRIFORCE_GREEDY_CHAIN for the scope (read at each call).
struct ChainSwitch {
  explicit ChainSwitch(bool on) { setenv("TRIFORCE_GREEDY_CHAIN", on ? "1" : "0", 1); }
  ~ChainSwitch() { unsetenv("TRIFORCE_GREEDY_CHAIN"); }
};

using Models = tf::testing::SyntheticModel;
Models synthetic(const std::string& name, DType dt) { return tf::testing::synthetic_model(name, dt, 23); }

// Rounds of one chain on cache a against its k steps on cache b, from a
// prompt of ~450 slots across 512; every third round first rolls both back.
void chain_equals_steps(LlamaModel& m, const std::string& what) {
  const int64_t V = m.config().vocab_size;
  FullKVCache a = m.make_cache(2048), b = m.make_cache(2048);
  const auto prompt = tokens_for(450, V, 3);
  m.forward(prompt, a, 1);
  m.forward(prompt, b, 1);
  const int64_t chains0 = m.greedy_chains(), replays0 = m.step_graphs().replays();
  const int64_t ks[] = {1, 2, 3, 4, 5, 8, 16, 4, 4, 4};
  std::vector<int32_t> got, want, one;
  int64_t rounds = 0;
  for (int rep = 0; rep < pick(3, 1); ++rep)
    for (int64_t k : ks) {
      SCOPED_TRACE(::testing::Message() << what << " round " << rounds << " k=" << k << " length " << a.length());
      if (rounds % 3 == 2) a.truncate(a.length() - 3), b.truncate(b.length() - 3);
      const int64_t n = rounds % 4 == 1 ? 3 : 1;  // a first step of several tokens (a context's unseen tail)
      const auto first = tokens_for(n, V, 100 + rounds);
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = a.length() + i;
      {
        ChainSwitch on(true);
        m.forward_greedy_chain(first, pos, a, k, got);
      }
      want.clear();
      m.forward_greedy(first, pos, b, 1, one);
      want.push_back(one[0]);
      for (int64_t i = 1; i < k; ++i) {
        m.forward_greedy({want.back()}, {pos.back() + i}, b, 1, one);
        want.push_back(one[0]);
      }
      ASSERT_EQ(got, want);
      ASSERT_EQ(a.length(), b.length());
      ++rounds;
    }
  EXPECT_EQ(m.greedy_chains() - chains0, rounds) << what << ": the chained path did not run";
  EXPECT_GT(m.step_graphs().replays() - replays0, rounds) << what << ": no chained step replayed its graph";
  // The same K/V: one more step on each gives the same logits bits.
  const auto t = tokens_for(3, V, 99);
  const Tensor la = m.forward(t, a, 3), lb = m.forward(t, b, 3);
  EXPECT_EQ(std::memcmp(la.data, lb.data, la.bytes()), 0) << what << ": the chain left other K/V";
}

}  // namespace

TEST(GreedyChainGpu, ChainEqualsStepsSmolLM2Bf16) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:smollm2-135m", DType::BF16);
  LlamaModel m(s.cfg, s.w, 512);
  m.set_cuda_graphs(true);
  chain_equals_steps(m, "smollm2 bf16");
}

TEST(GreedyChainGpu, ChainEqualsStepsLlama68mF16) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:llama-68m", DType::F16);
  LlamaModel m(s.cfg, s.w, 512);
  m.set_cuda_graphs(true);
  chain_equals_steps(m, "llama-68m f16");
}

TEST(GreedyChainGpu, ChainEqualsStepsReducedVocabularyHead) {
  REQUIRE_DEVICE();
  Models s = synthetic("synthetic:smollm2-135m", DType::BF16);
  s.w.head_ids.clear();
  for (int64_t j = 5; j < s.cfg.vocab_size; j += 7) s.w.head_ids.push_back(int32_t(j));
  restrict_head(s.w);
  LlamaModel m(s.cfg, s.w, 512);
  m.set_cuda_graphs(true);
  chain_equals_steps(m, "reduced head");
}

// Where it does not apply (graphs off, the switch off) it makes the k calls: same ids, no chain counted.
TEST(GreedyChainGpu, FallsBackToTheCalls) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:llama-68m", DType::F16);
  for (int c = 0; c < 2; ++c) {
    LlamaModel m(s.cfg, s.w, 512);
    m.set_cuda_graphs(c == 1);
    const int64_t V = s.cfg.vocab_size;
    FullKVCache a = m.make_cache(512);
    ChainSwitch sw(c == 0);  // graphs off with the switch on; graphs on with it off
    EXPECT_FALSE(m.greedy_chain_applies(a, 1, 4));
    std::vector<int32_t> ids;
    m.forward_greedy_chain(tokens_for(5, V, 1), {0, 1, 2, 3, 4}, a, 4, ids);
    EXPECT_EQ(ids.size(), 4u);
    EXPECT_EQ(a.length(), 8);
    EXPECT_EQ(m.greedy_chains(), 0);
  }
}

// The drafters: the same proposals, forwards and state with the chain as with the k calls.
TEST(GreedyChainGpu, DraftersProposeTheSame) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:llama-68m", DType::F16);
  LlamaModel m(s.cfg, s.w, 512);
  m.set_cuda_graphs(true);
  const int64_t V = s.cfg.vocab_size;
  const auto prompt = tokens_for(pick<int64_t>(600, 300), V, 8);
  SamplingParams greedy;  // T = 0
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE(kind == 0 ? "full cache" : kind == 1 ? "streaming, re-indexed" : "streaming, true positions");
    auto make = [&]() -> std::unique_ptr<speculative::Drafter> {
      if (kind == 0) return std::make_unique<speculative::ModelDrafter>(m, 2048);
      return std::make_unique<speculative::StreamingDrafter>(m, 4, 64, 32, kind == 1);
    };
    auto a = make(), b = make();
    a->begin(prompt);
    b->begin(prompt);
    std::vector<int32_t> ctx = prompt;
    const int64_t chains0 = m.greedy_chains();
    speculative::RngStream ra, rb;
    for (int round = 0; round < pick(30, 10); ++round) {
      const int64_t k = 1 + round % 6;
      speculative::Proposal pa, pb;
      {
        ChainSwitch on(true);
        pa = a->propose(ctx, k, greedy, ra);
      }
      {
        ChainSwitch off(false);
        pb = b->propose(ctx, k, greedy, rb);
      }
      ASSERT_EQ(pa.tokens, pb.tokens) << "round " << round;
      ASSERT_EQ(a->cache_length(), b->cache_length()) << "round " << round;
      // Accept some of the proposal (a rejection after it), as a chain would commit.
      const int64_t accepted = round % 3;
      for (int64_t i = 0; i < std::min<int64_t>(accepted, k); ++i) ctx.push_back(pa.tokens[size_t(i)]);
      ctx.push_back(int32_t((round * 131 + 7) % V));
      a->sync(ctx);
      b->sync(ctx);
    }
    EXPECT_GT(m.greedy_chains() - chains0, 0) << "the drafter never chained";
    if (kind > 0) {
      auto* sa = dynamic_cast<speculative::StreamingDrafter*>(a.get());
      auto* sb = dynamic_cast<speculative::StreamingDrafter*>(b.get());
      EXPECT_EQ(sa->forwards(), sb->forwards());
      EXPECT_EQ(sa->tail_length(), sb->tail_length());
      EXPECT_EQ(sa->evicted(), sb->evicted());
    }
  }
}
