// Tensor parallelism pieces. In one process (ctest): the step protocol's
// codec and the vocab split. Under mpirun -np N (tests/cli/test_tp_unit.sh):
// (the Mpi* suites) the MPI communicator, sharded forwards against the whole model, retrieval
// chunk selection per rank against the whole model's, and rank 0 driving a
// TriForce chain through the op stream against the same chain in one process.
#include <gtest/gtest.h>

#include "skip_exit_code.h"

#include <cmath>

#include "parallel/launch.h"
#include "parallel/mpi_comm.h"
#include "parallel/step_driver.h"
#include "parallel/step_protocol.h"
#include "parallel/target_levels.h"
#include "parallel/tensor_parallel.h"
#include "io/npy.h"
#include "kv/retrieval_cache.h"
#include "model/checkpoint.h"
#include "speculative/chain.h"
#include "speculative/methods.h"
#include "speculative/streaming_drafter.h"

using namespace tf;
using namespace tf::parallel;

namespace {

const std::string kFixtures = TF_FIXTURES;

std::vector<int32_t> prompt_of(const std::string& fixture, size_t n) {
  Tensor t = read_npy(kFixtures + "/hf/" + fixture + "/prompt.npy");
  std::vector<int32_t> p;
  for (int64_t i = 0; i < t.numel() && p.size() < n; ++i)
    p.push_back(t.dtype == DType::I32 ? t.ptr<int32_t>()[i] : int32_t(t.ptr<int64_t>()[i]));
  return p;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  double m = 0, s = 1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, double(std::abs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    s = std::max(s, double(std::abs(b.ptr<float>()[i])));
  }
  return m / s;
}

#define REQUIRE_RANKS()                                                                     \
  do {                                                                                      \
    if (!tp_active()) GTEST_SKIP() << "needs mpirun -np N (tests/cli/test_tp_unit.sh)";     \
  } while (0)

}  // namespace

TEST(StepCodec, RoundTripWithSequenceDeltas) {
  StepCodec enc, dec;
  std::vector<int32_t> ctx = {5, 6, 7, 8, 9};
  std::vector<std::vector<StepOp>> batches = {
      {{Op::create_full, 0, {64}, {}}, {Op::create_retrieval, 1, {16, 4, 40}, {}}, {Op::begin, 1, {}, ctx}},
      {{Op::sync, 0, {}, ctx}, {Op::logits, 0, {3}, {5, 6, 7, 8, 9, 1, 2}}},
      {{Op::sync, 0, {}, {5, 6, 7, 8, 9, 1}}, {Op::reset, 1, {}, {}}, {Op::rebuild, 1, {}, {5, 6, 7, 8, 9, 1}}},
      {{Op::logits, 0, {1}, {4}}, {Op::destroy, 1, {}, {}}, {Op::shutdown, -1, {}, {}}}};
  size_t sent = 0;
  for (const auto& b : batches) {
    const auto bytes = enc.encode(b);
    sent += bytes.size();
    const auto got = dec.decode(bytes);
    ASSERT_EQ(got.size(), b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(got[i].op, b[i].op);
      EXPECT_EQ(got[i].id, b[i].id);
      EXPECT_EQ(got[i].args, b[i].args);
      EXPECT_EQ(got[i].seq, b[i].seq) << op_name(b[i].op);
    }
  }
  // The second batch re-sends none of the 5 context tokens: 2 fresh tokens only.
  EXPECT_LT(StepCodec().encode(batches[1]).size(), enc.encode({{Op::logits, 0, {3}, std::vector<int32_t>(40, 3)}}).size());
  EXPECT_THROW(StepCodec().decode({1, 0, 0, 0, 77}), tf::Error);  // unknown op code
  EXPECT_THROW(StepCodec().decode({1, 0, 0}), tf::Error);         // truncated
  EXPECT_TRUE(op_computes(Op::logits) && op_computes(Op::begin) && op_computes(Op::rebuild));
  EXPECT_FALSE(op_computes(Op::sync) || op_computes(Op::reset) || op_computes(Op::create_full));
  EXPECT_GT(sent, 0u);
}

TEST(VocabSlice, CoversTheVocabularyInBalancedSlices) {
  for (int64_t V : {61, 256, 49152, 128256})
    for (int64_t n : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int64_t r = 0; r < n; ++r) {
        const VocabSlice s = vocab_slice(V, r, n);
        EXPECT_EQ(s.begin, next);
        EXPECT_GE(s.size(), V / n);
        EXPECT_LE(s.size(), V / n + 1);
        next = s.end;
      }
      EXPECT_EQ(next, V);
    }
}

TEST(VocabSlice, ShardsHoldTheirLmHeadRowsAndATiedHeadIsAViewOfTheEmbedding) {
  for (const char* fx : {"mha_f32", "tied_f32"}) {
    Checkpoint ck = open_checkpoint(kFixtures + "/hf/" + fx);
    const LlamaWeights whole = LlamaWeights::load(*ck.weights, ck.config);
    const int64_t V = ck.config.vocab_size, H = ck.config.hidden_size;
    for (int64_t r = 0; r < 4; ++r) {
      const LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config, ShardSpec{r, 4});
      const VocabSlice vs = vocab_slice(V, r, 4);
      ASSERT_EQ(w.lm_head.shape, (std::vector<int64_t>{vs.size(), H})) << fx;
      EXPECT_EQ(w.head_rows.begin, vs.begin);
      for (int64_t i = 0; i < vs.size() * H; ++i)
        ASSERT_EQ(w.lm_head.ptr<float>()[i], whole.lm_head.ptr<float>()[vs.begin * H + i]) << fx << " rank " << r;
      if (ck.config.tie_word_embeddings) EXPECT_EQ(w.lm_head.ptr<float>(), w.embed.ptr<float>() + vs.begin * H);
      ShardSpec rep{r, 4};
      rep.vocab_parallel_head = false;
      EXPECT_EQ(LlamaWeights::load(*ck.weights, ck.config, rep).lm_head.dim(0), V);
    }
  }
}

TEST(TensorParallel, RefusesASizeThatDoesNotDivideTheKvHeads) {
  ModelConfig c;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.intermediate_size = 128;
  if (world().size <= c.num_kv_heads) {  // balanced: 2 KV heads split over 1 or 2 ranks
    EXPECT_EQ(tp_shard(c, "m").size, world().size);
  } else {
    try {
      tp_shard(c, "some/model");
      FAIL();
    } catch (const tf::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--tp " + std::to_string(world().size)), std::string::npos) << m;
      EXPECT_NE(m.find("some/model has 2 KV heads (6 query heads)"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(check_tp_option(world().size + 1), tf::Error);
  EXPECT_NO_THROW(check_tp_option(world().size));
}

TEST(MpiCommunicator, AllreduceAndUnevenAllgather) {
  REQUIRE_RANKS();
  Communicator& c = *tp_communicator();
  const int n = c.size(), r = c.rank();
  Tensor t = Tensor::cpu(DType::F32, {3, 5});
  for (int64_t i = 0; i < 15; ++i) t.ptr<float>()[i] = float(r + 1) * float(i);
  c.allreduce_sum(t);
  for (int64_t i = 0; i < 15; ++i) ASSERT_EQ(t.ptr<float>()[i], float(n * (n + 1) / 2) * float(i));
  std::vector<int64_t> cols;
  for (int k = 0; k < n; ++k) cols.push_back(k + 1);  // uneven: rank k holds k + 1 columns
  int64_t total = 0, c0 = 0;
  for (int k = 0; k < n; ++k) {
    if (k < r) c0 += cols[size_t(k)];
    total += cols[size_t(k)];
  }
  Tensor local = Tensor::cpu(DType::F32, {2, cols[size_t(r)]}), full = Tensor::cpu(DType::F32, {2, total});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < cols[size_t(r)]; ++j) local.ptr<float>()[i * cols[size_t(r)] + j] = float(100 * i + c0 + j);
  c.allgather_columns(local, full, cols);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < total; ++j) ASSERT_EQ(full.ptr<float>()[i * total + j], float(100 * i + j));
  EXPECT_THROW(c.allreduce_sum(local = Tensor::cpu(DType::I32, {2})), tf::Error);
}

class MpiShardedFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiShardedFixture, ForwardMatchesTheWholeModel) {
  REQUIRE_RANKS();
  Checkpoint ck = open_checkpoint(kFixtures + "/hf/" + GetParam());
  if (ck.config.num_kv_heads % world().size) GTEST_SKIP() << GetParam() << ": heads do not divide";
  LlamaModel whole(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  auto shard = load_model_shard(ck);
  EXPECT_EQ(shard->weights().local_kv_heads, ck.config.num_kv_heads / world().size);
  EXPECT_LT(shard->weights().lm_head.dim(0), ck.config.vocab_size);  // vocab-parallel head
  const auto p = prompt_of(GetParam(), 200);
  auto cw = whole.make_cache(int64_t(p.size()) + 4), cs = shard->make_cache(int64_t(p.size()) + 4);
  Tensor lw = whole.forward(p, cw), ls = shard->forward(p, cs);  // prefill: every row
  ASSERT_EQ(ls.shape, lw.shape);
  EXPECT_LE(rel_diff(ls, lw), 1e-5);
  for (int32_t t : {3, 17, 250}) {  // decode steps
    Tensor a = whole.forward({t}, cw, 1), b = shard->forward({t}, cs, 1);
    EXPECT_LE(rel_diff(b, a), 1e-5);
  }
  // Replicated head: the same logits.
  ShardSpec rep = tp_shard(ck.config, ck.path);
  rep.vocab_parallel_head = false;
  LlamaModel r(ck.config, LlamaWeights::load(*ck.weights, ck.config, rep), 512, tp_communicator());
  EXPECT_EQ(r.weights().lm_head.dim(0), ck.config.vocab_size);
  auto cr = r.make_cache(int64_t(p.size()));
  EXPECT_LE(rel_diff(r.forward(p, cr, 8), whole.forward(p, cw = whole.make_cache(int64_t(p.size())), 8)), 1e-5);
}

TEST_P(MpiShardedFixture, RetrievalSelectionPerRankIsTheWholeModelsForItsHeads) {
  REQUIRE_RANKS();
  Checkpoint ck = open_checkpoint(kFixtures + "/hf/" + GetParam());
  if (ck.config.num_kv_heads % world().size) GTEST_SKIP() << GetParam() << ": heads do not divide";
  LlamaModel whole(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  auto shard = load_model_shard(ck);
  const auto p = prompt_of(GetParam(), 300);
  const int64_t P = int64_t(p.size());
  RetrievalOptions opt;
  opt.budget = 64;
  opt.chunk = 8;
  auto cw = whole.make_cache(P), cs = shard->make_cache(P);
  std::vector<std::vector<float>> qw, qs;
  whole.forward_capturing_last_query(p, cw, 1, qw);
  shard->forward_capturing_last_query(p, cs, 1, qs);
  const RetrievalSelection sw = select_chunks(cw, P - 1, qw, whole.weights().local_heads, opt);
  const RetrievalSelection ss = select_chunks(cs, P - 1, qs, shard->weights().local_heads, opt);
  const int64_t KH = ck.config.num_kv_heads, kl = shard->weights().local_kv_heads, kv0 = world().rank * kl;
  ASSERT_EQ(ss.num_chunks, sw.num_chunks);
  ASSERT_EQ(ss.remainder, sw.remainder);
  for (int64_t l = 0; l < ck.config.num_layers; ++l)
    for (int64_t g = 0; g < kl; ++g) {
      const size_t a = size_t(l * kl + g), b = size_t(l * KH + kv0 + g);
      EXPECT_EQ(ss.chunks[a], sw.chunks[b]) << "layer " << l << " kv head " << kv0 + g;
      for (size_t c = 0; c < ss.scores[a].size(); ++c)
        EXPECT_NEAR(ss.scores[a][c], sw.scores[b][c], 1e-4 * std::max(1.0, std::abs(sw.scores[b][c])));
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MpiShardedFixture, ::testing::Values("mha_f32", "gqa_f32", "tied_f32"));

// Rank 0 drives: draft (whole first layer, rank 0 only) on a StreamingLLM
// cache > target on the retrieval cache > full target, with re-retrieval
// every 8 tokens; the workers mirror the two target levels. The tokens and
// per-level counts equal the same chain run by rank 0 alone on the whole model.
TEST(MpiStepProtocol, RankZeroDrivesTriforceLikeOneProcess) {
  REQUIRE_RANKS();
  const std::string path = kFixtures + "/hf/mha_f32";
  Checkpoint ck = open_checkpoint(path);
  auto shard = load_model_shard(ck);
  if (is_worker()) {
    EXPECT_GT(serve_steps(*shard), 10);
    return;
  }
  const auto prompt = prompt_of("mha_f32", 120);
  SamplingParams sp;  // greedy
  int64_t rebuilds = 0;
  auto run = [&](LlamaModel& target, TargetLevel& middle, TargetLevel& top, LlamaModel& draft) {
    speculative::StreamingDrafter drafter(draft, 4, 24, 16);
    speculative::ChainOptions opt;
    opt.gamma = {2, 4};
    opt.max_context = int64_t(prompt.size()) + 64;
    speculative::SpecChain chain({&middle, &top}, drafter, opt);
    chain.on_step = [&](const speculative::SpecChain&, const std::vector<int32_t>& ctx, const speculative::VerifyResult&) {
      if ((ctx.size() - prompt.size()) % 8 < 3) {
        middle.rebuild(ctx);
        ++rebuilds;
      }
    };
    return chain.generate(prompt, 40, sp);
  };
  LlamaModel whole(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  TargetLevels dist_levels(*shard);
  auto draft = dist_levels.layer_skip_draft(path, 1);  // whole, on rank 0 only
  RetrievalOptions ro;
  ro.budget = 32;
  ro.chunk = 8;
  speculative::ChainResult a, b;
  {
    auto middle = dist_levels.retrieval(ro, 64), top = dist_levels.full(int64_t(prompt.size()) + 64);
    a = run(*shard, *middle, *top, *draft);
  }
  const ChannelStats st = step_driver().stats();
  const int64_t driven_rebuilds = rebuilds;
  step_driver().shutdown();
  {
    auto middle = make_local_level(whole, {LevelSpec::Kind::retrieval, 0, ro, 64});
    auto top = make_local_level(whole, {LevelSpec::Kind::full, int64_t(prompt.size()) + 64, {}, 0});
    auto draft1 = std::make_unique<LlamaModel>(speculative::make_layer_skip_model(whole, 1));
    b = run(whole, *middle, *top, *draft1);
  }
  EXPECT_EQ(a.gen.tokens, b.gen.tokens);
  ASSERT_EQ(a.levels.size(), b.levels.size());
  for (size_t l = 1; l < a.levels.size(); ++l) {
    EXPECT_EQ(a.levels[l].drafted, b.levels[l].drafted) << "level " << l;
    EXPECT_EQ(a.levels[l].accepted, b.levels[l].accepted) << "level " << l;
  }
  // One broadcast per target forward (verify steps, the two prompt builds, the
  // re-retrievals): rollbacks and creations ride along with the next one.
  EXPECT_GT(driven_rebuilds, 0);
  const int64_t forwards = a.levels[1].steps + a.levels[2].steps + 2 + driven_rebuilds;
  EXPECT_EQ(st.batches, forwards) << st.batches << " batches for " << forwards << " forwards";
  std::printf("op stream: %lld batches, %lld bytes, %.1f us per broadcast\n", (long long)st.batches,
              (long long)st.bytes, st.batches ? 1e6 * st.bcast_s / double(st.batches) : 0.0);
}

// speculative::run_method driven by rank 0, the CLI's default under mpirun: every
// method (prefill snapshot shared through the snapshot/seed ops, re-retrieval
// from the top level through rebuild_from, a streaming middle level, a model
// draft and a layer-skip draft on rank 0 alone) gives the tokens and per-level
// counts of the same request run on the whole model in one process, and the
// workers forward exactly the target's tokens, nothing of the drafts.
TEST(MpiRunMethod, DrivenEqualsOneProcessForEveryMethod) {
  REQUIRE_RANKS();
  ASSERT_EQ(tp_mode(), TpMode::driven);
  const std::string path = kFixtures + "/hf/mha_f32";
  Checkpoint ck = open_checkpoint(path);
  auto shard = load_model_shard(ck);
  if (is_worker()) {
    const int64_t before = LlamaModel::process_forwarded_tokens();  // earlier tests forwarded too
    EXPECT_GT(serve_steps(*shard), 10);
    // Everything this worker forwarded was the target's (its mirrors), none of the drafts.
    EXPECT_EQ(LlamaModel::process_forwarded_tokens() - before, shard->forwarded_tokens());
    EXPECT_GT(shard->forwarded_tokens(), 0);
    EXPECT_TRUE(rank_counters(*shard).empty());  // a worker answers inside its serve loop
    return;
  }
  LlamaModel whole(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  const auto prompt = prompt_of("mha_f32", 120);
  struct Case {
    std::string method, draft, chain, reretrieve;
    float temperature;
  };
  const std::vector<Case> cases = {
      {"ar", "", "", "never", 0},
      {"spec", "ngram:2", "", "never", 0},
      {"spec", "model:" + kFixtures + "/hf/mqa_f32", "", "never", 0},
      {"retrieval", "", "", "every:8", 0},
      {"streaming-hier", "layerskip:1", "", "never", 0},
      {"triforce", "layerskip:1", "", "every:8", 0},
      {"ngram-triforce", "", "", "below:0.5", 0},
      {"chain", "", "ngram:2 > layerskip:1@streaming:4/16 > target@retrieval:32/8 > target", "every:8", 0},
      {"chain", "", "target@retrieval:32/8 > target@streaming:4/24 > layerskip:1@full > target", "never", 0},
      {"triforce", "layerskip:1", "", "every:8", 0.8f},
      {"ar", "", "", "never", 0.8f},
  };
  speculative::DraftModels driven_drafts, local_drafts;
  for (const Case& c : cases) {
    speculative::MethodRequest req;
    req.method = c.method;
    req.draft = c.draft;
    req.chain = c.chain;
    req.reretrieve = c.reretrieve;
    req.budget = 32;
    req.max_new_tokens = 24;
    req.sampling.temperature = c.temperature;
    req.sampling.seed = 3;
    req.target_path = path;
    const std::string label = c.method + " " + c.draft + c.chain + " T=" + std::to_string(c.temperature);
    auto snap = TargetLevels(*shard).snapshot(prompt);
    EXPECT_GE(snap->mirror_id(), 0);
    const speculative::MethodOutcome a = speculative::run_method(*shard, req, prompt, snap.get(), &driven_drafts);
    // The reference: rank 0 alone, on the whole model (nothing to drive).
    set_tp_mode(TpMode::lockstep);
    const speculative::MethodOutcome b = speculative::run_method(whole, req, prompt, nullptr, &local_drafts);
    set_tp_mode(TpMode::driven);
    EXPECT_EQ(a.tokens, b.tokens) << label;
    EXPECT_EQ(a.token_kinds, b.token_kinds) << label;
    EXPECT_EQ(a.retrieval_rebuilds, b.retrieval_rebuilds) << label;
    ASSERT_EQ(a.levels.size(), b.levels.size()) << label;
    for (size_t l = 0; l < a.levels.size(); ++l) {
      EXPECT_EQ(a.levels[l].drafted, b.levels[l].drafted) << label << " level " << a.levels[l].level;
      EXPECT_EQ(a.levels[l].accepted, b.levels[l].accepted) << label << " level " << a.levels[l].level;
    }
  }
  // The target as the StreamingLLM drafter samples between its forwards: refused, with a way out.
  speculative::MethodRequest bad;
  bad.method = "chain";
  bad.chain = "target@streaming:4/16 > target";
  try {
    speculative::run_method(*shard, bad, prompt);
    ADD_FAILURE() << "a driven target@streaming drafter ran";
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp-mode lockstep"), std::string::npos) << e.what();
  }
  // Per rank: [all models' tokens, the target shard's tokens, ops]. Every
  // worker forwarded the target's tokens of rank 0 and applied every op it sent
  // (each checks that it forwarded nothing else, above).
  const std::vector<int64_t> c = rank_counters(*shard);
  ASSERT_EQ(c.size(), size_t(3 * world().size));
  EXPECT_GT(c[1], 0);
  for (int r = 1; r < world().size; ++r) {
    EXPECT_EQ(c[size_t(3 * r + 1)], c[1]) << "rank " << r;
    EXPECT_EQ(c[size_t(3 * r + 2)], c[2]) << "rank " << r << " applied another number of ops";
  }
  step_driver().shutdown();
}

int main(int argc, char** argv) {
  tf::parallel::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // One process (ctest): the Mpi* suites run under mpirun in tests/cli/test_tp_unit.sh; leave
  // them out here rather than report them skipped (ctest would then mark the whole file skipped).
  if (!tp_active() && ::testing::GTEST_FLAG(filter) == "*") {
    ::testing::GTEST_FLAG(filter) = "-Mpi*:*/Mpi*";
    std::printf("one process: the Mpi* tests run under mpirun (tests/cli/test_tp_unit.sh)\n");
  }
  const int rc = tf::testing::skip_exit_code(RUN_ALL_TESTS());
  tf::parallel::finalize();
  return rc;
}
