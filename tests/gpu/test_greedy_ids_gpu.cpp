// The T = 0 decision on the device (LlamaModel::forward_greedy, ctest label
// gpu): for the same calls on two caches of one model, the ids it brings back
// equal argmax_lowest of the logits forward() returns, every id of every row:
// prefills with one row out and with more rows than one lm_head launch holds,
// decode steps, verification shapes (n_out = n, and n_out < n), steps across
// the 512-slot attention splits, a rollback and the same steps again; graphs
// on (the ids path must replay its own graphs) and off, the persistent step,
// a reduced-vocabulary head (token 0 in the set and not). The graph model's
// ids are also the eager model's. Then the verifying runners (full,
// retrieval, StreamingLLM caches): greedy_ids against host_greedy_ids of a
// twin runner's logits, with the same state afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/device.h"
#include "gen/sampling.h"
#include "kv/retrieval_cache.h"
#include "model/draft_vocab.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "synthetic_models.h"
#include "speculative/drafter.h"
#include "speculative/retrieval_runner.h"
#include "speculative/streaming_runner.h"

using namespace tf;
using tf::testing::pick;
using tf::testing::tokens_for;

namespace {

struct Call {
  int64_t n = 1, n_out = 1;
  int64_t truncate_to = -1;  // >= 0: both caches are rolled back to this length first
};

// Prefills (eager, n > 32; 70 rows out > the 64 rows of one lm_head launch),
// then steps from ~400 past 512 slots, a rollback and the same steps again.
std::vector<Call> calls() {
  std::vector<Call> c = {{300, 1}, {100, 70}, {4, 2}};
  const int steps = pick(60, 16);
  for (int i = 0; i < steps; ++i) c.push_back(i % 3 == 1 ? Call{7, 7} : i % 5 == 4 ? Call{5, 5} : Call{1, 1});
  c.push_back({1, 1, 404});  // rollback, then the same steps (the graphs replay)
  for (int i = 0; i < steps; ++i) c.push_back(i % 3 == 1 ? Call{7, 7} : i % 5 == 4 ? Call{5, 5} : Call{1, 1});
  return c;
}

// Every call on cache `a` through forward_greedy (its ids, in call order), then
// on cache `b` through forward(); each id against argmax_lowest of its row.
std::vector<int32_t> ids_equal_logits_argmax(LlamaModel& m, const std::string& what, int64_t* replays_in_ids = nullptr) {
  const int64_t V = m.config().vocab_size;
  const std::vector<Call> cs = calls();
  FullKVCache a = m.make_cache(2048), b = m.make_cache(2048);
  std::vector<int32_t> all, ids;
  const int64_t replays0 = m.step_graphs().replays(), greedy0 = m.greedy_forwards();
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i].truncate_to >= 0) a.truncate(cs[i].truncate_to);
    m.forward_greedy(tokens_for(cs[i].n, V, int64_t(i % 37)), a, cs[i].n_out, ids);
    EXPECT_EQ(int64_t(ids.size()), cs[i].n_out) << what << " call " << i;
    all.insert(all.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(m.greedy_forwards() - greedy0, int64_t(cs.size())) << what;
  if (replays_in_ids) *replays_in_ids = m.step_graphs().replays() - replays0;
  size_t k = 0;
  int64_t mismatches = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i].truncate_to >= 0) b.truncate(cs[i].truncate_to);
    const Tensor lg = m.forward(tokens_for(cs[i].n, V, int64_t(i % 37)), b, cs[i].n_out);
    for (int64_t r = 0; r < cs[i].n_out; ++r, ++k) {
      const int32_t want = int32_t(argmax_lowest(lg.ptr<float>() + r * V, V));
      if (all[k] != want && mismatches++ < 5)
        ADD_FAILURE() << what << " call " << i << " (" << cs[i].n << " tokens, " << cs[i].n_out << " out) row " << r
                      << ": device id " << all[k] << ", argmax of the logits " << want;
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
  EXPECT_EQ(a.length(), b.length()) << what;
  // The caches hold the same K/V: one more step gives the same logits bits.
  const auto t = tokens_for(3, V, 99);
  const Tensor la = m.forward(t, a, 3), lb = m.forward(t, b, 3);
  EXPECT_EQ(std::memcmp(la.data, lb.data, la.bytes()), 0) << what << ": the ids path left other K/V";
  return all;
}

using Models = tf::testing::SyntheticModel;
Models synthetic(const std::string& name, DType dt) { return tf::testing::synthetic_model(name, dt, 17); }

void graphs_and_eager(const Models& s, const std::string& what) {
  LlamaModel graph(s.cfg, s.w, 512), eager(s.cfg, s.w, 512);
  graph.set_cuda_graphs(true);
  eager.set_cuda_graphs(false);
  ASSERT_TRUE(graph.greedy_on_device() && eager.greedy_on_device()) << what;
  int64_t replays = 0;
  const std::vector<int32_t> g = ids_equal_logits_argmax(graph, what + " graphs", &replays);
  EXPECT_GT(replays, pick(40, 8)) << what << ": the ids path never replayed its graphs";
  const std::vector<int32_t> e = ids_equal_logits_argmax(eager, what + " eager");
  EXPECT_EQ(eager.step_graphs().replays(), 0);
  EXPECT_EQ(g, e) << what << ": graph and eager ids differ";
}

}  // namespace

TEST(GreedyIdsGpu, EqualArgmaxOfLogitsSyntheticSmolLM2Bf16) {
  REQUIRE_DEVICE();
  graphs_and_eager(synthetic("synthetic:smollm2-135m", DType::BF16), "smollm2 bf16");
}

TEST(GreedyIdsGpu, EqualArgmaxOfLogitsSyntheticLlama68mF16) {
  REQUIRE_DEVICE();
  graphs_and_eager(synthetic("synthetic:llama-68m", DType::F16), "llama-68m f16");
}

TEST(GreedyIdsGpu, EqualArgmaxOfLogitsPersistentStep) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:smollm2-135m", DType::BF16);
  LlamaModel m(s.cfg, s.w, 512);
  m.set_cuda_graphs(false);  // the persistent step runs eager steps only
  StepFusions f = m.step_fusions();
  f.persistent_step = true;
  m.set_step_fusions(f);
  ASSERT_TRUE(m.persistent_step_unsupported().empty()) << m.persistent_step_unsupported();
  const int64_t before = m.persistent_steps();
  ids_equal_logits_argmax(m, "persistent step");
  EXPECT_GT(m.persistent_steps() - before, pick(40, 8)) << "the persistent step never ran";
}

TEST(GreedyIdsGpu, ReducedVocabularyHead) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:smollm2-135m", DType::BF16);
  const int64_t V = s.cfg.vocab_size;
  for (int set = 0; set < 2; ++set) {
    LlamaWeights w = s.w;
    w.head_ids.clear();
    for (int64_t j = set == 0 ? 0 : 5; j < V; j += set == 0 ? 3 : 7) w.head_ids.push_back(int32_t(j));
    restrict_head(w);
    const std::string what = set == 0 ? "reduced vocabulary with token 0" : "reduced vocabulary without token 0";
    for (bool graphs : {true, false}) {
      LlamaModel m(s.cfg, w, 512);
      m.set_cuda_graphs(graphs);
      ASSERT_TRUE(m.greedy_on_device()) << what;
      const std::vector<int32_t> ids = ids_equal_logits_argmax(m, what + (graphs ? " graphs" : " eager"));
      for (int32_t id : ids) {
        if ((id - (set == 0 ? 0 : 5)) % (set == 0 ? 3 : 7) != 0) {
          ADD_FAILURE() << what << ": id " << id << " is not in the set";
          break;
        }
      }
    }
  }
}

// The runners: greedy_ids on one, logits (and a host scan) on its twin, over
// the same calls (verification of g + 1 rows, one-row draft steps, syncs that
// roll back and commit); the same ids and the same state.
TEST(GreedyIdsGpu, RunnersEqualTheirLogitsTwins) {
  REQUIRE_DEVICE();
  const Models s = synthetic("synthetic:smollm2-135m", DType::BF16);
  LlamaModel m(s.cfg, s.w, 512);
  const int64_t V = s.cfg.vocab_size;
  std::vector<int32_t> prompt = tokens_for(pick<int64_t>(700, 300), V, 5);
  RetrievalOptions ro;
  ro.budget = 128;
  ro.chunk = 8;
  std::vector<std::unique_ptr<speculative::Verifier>> a, b;
  a.push_back(std::make_unique<speculative::ModelRunner>(m, 2048));
  b.push_back(std::make_unique<speculative::ModelRunner>(m, 2048));
  a.push_back(std::make_unique<speculative::RetrievalRunner>(m, ro, 256));
  b.push_back(std::make_unique<speculative::RetrievalRunner>(m, ro, 256));
  a.push_back(std::make_unique<speculative::StreamingRunner>(m, 16, 64, 32));
  b.push_back(std::make_unique<speculative::StreamingRunner>(m, 16, 64, 32));
  const char* names[] = {"full", "retrieval", "streaming"};
  for (size_t r = 0; r < a.size(); ++r) {
    SCOPED_TRACE(names[r]);
    a[r]->begin(prompt);
    b[r]->begin(prompt);
    std::vector<int32_t> ctx = prompt, ids, want;
    const int64_t greedy0 = m.greedy_forwards();
    for (int step = 0; step < pick(40, 12); ++step) {
      const int64_t g = step % 3 == 0 ? 1 : 6;  // a draft-like step, or a verification of g + 1 rows
      std::vector<int32_t> seq = ctx;
      const auto drafts = tokens_for(g, V, 1000 + step);
      seq.insert(seq.end(), drafts.begin(), drafts.end());
      const int64_t n_out = g == 1 ? 1 : g + 1;
      a[r]->greedy_ids(seq, n_out, ids);
      speculative::host_greedy_ids(b[r]->logits(seq, n_out), want);
      ASSERT_EQ(ids, want) << "step " << step;
      // Commit the first id and one draft on even steps, only the id on odd
      // ones (a rejection): the caches roll back to that context.
      if (step % 2 == 0 && g > 1) ctx.push_back(drafts[0]);
      ctx.push_back(ids[0]);
      a[r]->sync(ctx);
      b[r]->sync(ctx);
    }
    EXPECT_GT(m.greedy_forwards() - greedy0, pick(30, 8));
  }
  // The state the calls left: the same cache lengths.
  auto* fa = dynamic_cast<speculative::ModelRunner*>(a[0].get());
  auto* fb = dynamic_cast<speculative::ModelRunner*>(b[0].get());
  EXPECT_EQ(fa->cache().length(), fb->cache().length());
  EXPECT_EQ(fa->cached_tokens(), fb->cached_tokens());
  auto* ra = dynamic_cast<speculative::RetrievalRunner*>(a[1].get());
  auto* rb = dynamic_cast<speculative::RetrievalRunner*>(b[1].get());
  EXPECT_EQ(ra->tail_length(), rb->tail_length());
  EXPECT_EQ(ra->retrieval().cache().length(), rb->retrieval().cache().length());
  auto* sa = dynamic_cast<speculative::StreamingRunner*>(a[2].get());
  auto* sb = dynamic_cast<speculative::StreamingRunner*>(b[2].get());
  EXPECT_EQ(sa->committed_tokens(), sb->committed_tokens());
  EXPECT_EQ(sa->streaming().length(), sb->streaming().length());
  EXPECT_GT(sa->evicted(), 0) << "the streaming runner never evicted";
}
