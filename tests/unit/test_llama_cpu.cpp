// LlamaModel on random weights: one-call prefill == incremental decode,
// chunked == unchunked, truncate + reforward, position shift invariance,
// weight loading and tensor-parallel slicing from an in-memory WeightSource.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "model/checkpoint.h"
#include "model/llama.h"
#include "ops/cpu/skinny_cpu.h"
#include "ops/ops.h"

using namespace tf;

namespace {

ModelConfig tiny(int64_t heads = 4, int64_t kv = 2, bool tied = false) {
  ModelConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<int32_t> tokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

double max_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, double(std::abs(a[i] - b[i])));
  }
  return m;
}

void check_incremental(const ModelConfig& c, int64_t max_chunk) {
  LlamaModel m(c, LlamaWeights::random(c, 7), max_chunk);
  const int64_t n = 37, V = c.vocab_size;
  auto t = tokens(n, 3, V);
  auto cache = m.make_cache(64);
  Tensor full = m.forward(t, cache);
  ASSERT_EQ(full.shape, (std::vector<int64_t>{n, V}));
  EXPECT_EQ(cache.length(), n);
  double amax = 0;
  for (int64_t i = 0; i < n * V; ++i) amax = std::max(amax, double(std::abs(full.ptr<float>()[i])));
  EXPECT_GT(amax, 1e-3);  // the logits are not trivially zero

  auto inc = m.make_cache(64);
  int64_t done = 0;
  for (int64_t piece : {1, 5, 16, 15}) {
    std::vector<int32_t> part(t.begin() + done, t.begin() + done + piece);
    Tensor lg = m.forward(part, inc);
    EXPECT_LT(max_diff(lg.ptr<float>(), full.ptr<float>() + done * V, piece * V), 1e-5) << "piece at " << done;
    done += piece;
  }
  EXPECT_EQ(inc.length(), n);
}

}  // namespace

TEST(LlamaCpu, PrefillEqualsIncrementalGqa) { check_incremental(tiny(4, 2), 512); }
TEST(LlamaCpu, PrefillEqualsIncrementalMha) { check_incremental(tiny(4, 4), 512); }
TEST(LlamaCpu, PrefillEqualsIncrementalMqaTied) { check_incremental(tiny(4, 1, true), 512); }
TEST(LlamaCpu, ChunkedPrefill) { check_incremental(tiny(4, 2), 4); }

TEST(LlamaCpu, ChunkedEqualsUnchunkedAndNOut) {
  ModelConfig c = tiny();
  LlamaModel a(c, LlamaWeights::random(c, 11), 512), b(c, LlamaWeights::random(c, 11), 7);
  auto t = tokens(50, 5, c.vocab_size);
  auto ca = a.make_cache(64), cb = b.make_cache(64);
  Tensor la = a.forward(t, ca), lb = b.forward(t, cb);
  EXPECT_LT(max_diff(la.ptr<float>(), lb.ptr<float>(), la.numel()), 1e-5);
  for (int64_t n_out : {1, 3, 9, 50}) {
    auto cc = b.make_cache(64);
    Tensor lo = b.forward(t, cc, n_out);
    ASSERT_EQ(lo.shape[0], n_out);
    EXPECT_LT(max_diff(lo.ptr<float>(), lb.ptr<float>() + (50 - n_out) * c.vocab_size, lo.numel()), 1e-5);
  }
}

TEST(LlamaCpu, TruncateAndReforward) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 13));
  auto t = tokens(20, 9, c.vocab_size);
  auto cache = m.make_cache(40);
  m.forward(std::vector<int32_t>(t.begin(), t.begin() + 12), cache);
  Tensor first = m.forward(std::vector<int32_t>(t.begin() + 12, t.end()), cache);
  // roll back and take a different branch, then come back
  cache.truncate(12);
  m.forward({1, 2, 3}, cache);
  EXPECT_EQ(cache.length(), 15);
  cache.truncate(12);
  Tensor again = m.forward(std::vector<int32_t>(t.begin() + 12, t.end()), cache);
  ASSERT_EQ(first.numel(), again.numel());
  EXPECT_EQ(max_diff(first.ptr<float>(), again.ptr<float>(), first.numel()), 0.0);
  EXPECT_THROW(cache.truncate(21), tf::Error);
}

TEST(LlamaCpu, PositionShiftInvariance) {
  // RoPE scores depend only on position differences.
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 17));
  auto t = tokens(10, 2, c.vocab_size);
  std::vector<int64_t> p0(10), p1(10);
  for (int i = 0; i < 10; ++i) { p0[size_t(i)] = i; p1[size_t(i)] = 100 + i; }
  auto c0 = m.make_cache(16), c1 = m.make_cache(16);
  Tensor a = m.forward(t, p0, c0), b = m.forward(t, p1, c1);
  EXPECT_LT(max_diff(a.ptr<float>(), b.ptr<float>(), a.numel()), 1e-4);
}

TEST(LlamaCpu, ExplicitPositionsCausalByPosition) {
  // Tokens given out of slot order: attention masks by position, not by slot.
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 19));
  auto t = tokens(6, 4, c.vocab_size);
  auto ref_cache = m.make_cache(8);
  Tensor ref = m.forward(t, ref_cache);
  std::vector<int32_t> perm_t = {t[3], t[0], t[5], t[1], t[4], t[2]};
  std::vector<int64_t> perm_p = {3, 0, 5, 1, 4, 2};
  auto pc = m.make_cache(8);
  Tensor got = m.forward(perm_t, perm_p, pc);
  for (int i = 0; i < 6; ++i)
    EXPECT_LT(max_diff(got.ptr<float>() + i * c.vocab_size, ref.ptr<float>() + perm_p[size_t(i)] * c.vocab_size,
                       c.vocab_size), 1e-5)
        << "row " << i;
}

TEST(LlamaCpu, CapacityErrorRollsBack) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 23));
  auto cache = m.make_cache(8);
  m.forward(tokens(5, 1, c.vocab_size), cache);
  try {
    m.forward(tokens(4, 1, c.vocab_size), cache);
    FAIL() << "expected a capacity error";
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 5);
  EXPECT_THROW(m.forward({int32_t(c.vocab_size)}, cache), tf::Error);  // bad token id
  EXPECT_EQ(cache.length(), 5);
}

TEST(LlamaCpu, GreedyGenerate) {
  ModelConfig c = tiny();
  LlamaModel m(c, LlamaWeights::random(c, 29));
  auto prompt = tokens(7, 8, c.vocab_size);
  auto g = greedy_generate(m, prompt, 10);
  ASSERT_EQ(g.size(), 10u);
  // manual: full re-forward of the growing sequence each step
  std::vector<int32_t> seq = prompt;
  for (int i = 0; i < 10; ++i) {
    auto cache = m.make_cache(32);
    Tensor lg = m.forward(seq, cache, 1);
    Tensor am = Tensor::cpu(DType::I32, {1});
    ops::argmax(lg, am);
    EXPECT_EQ(am.ptr<int32_t>()[0], g[size_t(i)]) << "step " << i;
    seq.push_back(g[size_t(i)]);
  }
}

// A verification of n tokens equals n decode steps bit for bit on the CPU
// (the skinny kernels' batch invariance, ops/cpu/skinny_cpu.h): greedy
// speculation then reproduces ar exactly, and a row's logits do not depend on
// how many drafted tokens were verified with it.
void check_verify_equals_steps(LlamaModel& m, int64_t past, int64_t vocab) {
  const auto prompt = tokens(past, 31, vocab), draft = tokens(ops::cpu::kSkinnyMaxRows, 37, vocab);
  for (int64_t n : {int64_t(2), int64_t(3), int64_t(7), ops::cpu::kSkinnyMaxRows}) {
    auto a = m.make_cache(past + n + 1), b = m.make_cache(past + n + 1);
    m.forward(prompt, a, 1);
    m.forward(prompt, b, 1);
    const std::vector<int32_t> t(draft.begin(), draft.begin() + n);
    Tensor verify = m.forward(t, a);
    for (int64_t r = 0; r < n; ++r) {
      Tensor step = m.forward({t[size_t(r)]}, b);
      ASSERT_EQ(std::memcmp(step.ptr<float>(), verify.ptr<float>() + r * vocab, size_t(vocab) * sizeof(float)), 0)
          << "past " << past << ", n " << n << ": row " << r << " differs from its decode step";
    }
  }
}

TEST(LlamaCpu, VerifyRowsBitEqualDecodeSteps) {
  if (!ops::cpu::skinny_enabled()) GTEST_SKIP() << "TRIFORCE_CPU_KERNELS=blas";
  ModelConfig c = tiny(4, 2);
  c.head_dim = 16;  // two AVX2 vectors per head
  c.hidden_size = 4 * 16;
  c.max_position_embeddings = 512;
  LlamaModel m(c, LlamaWeights::random(c, 41));
  for (int64_t past : {1, 20, 300}) check_verify_equals_steps(m, past, c.vocab_size);  // 300: the KV in 3 splits
}

TEST(LlamaCpu, VerifyRowsBitEqualDecodeStepsSmolLM2) {
  if (!ops::cpu::skinny_enabled()) GTEST_SKIP() << "TRIFORCE_CPU_KERNELS=blas";
  const char* home = std::getenv("HOME");
  const char* dir = std::getenv("TRIFORCE_CACHE");
  const std::string path = (dir ? std::string(dir) : std::string(home ? home : "") + "/.cache/triforce") +
                           "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is missing (scripts/fetch_default_model.sh)";
  Checkpoint ck = open_checkpoint(path);
  LlamaModel m(ck.config, LlamaWeights::load(*ck.weights, ck.config));
  check_verify_equals_steps(m, 140, ck.config.vocab_size);  // past a split boundary
}

TEST(LlamaCpu, ScaledRopeTypesRun) {
  for (std::string type : {"linear", "dynamic", "yarn", "llama3"}) {
    ModelConfig c = tiny();
    c.max_position_embeddings = 16;
    c.rope_scaling.type = type;
    c.rope_scaling.factor = 2.0;
    c.rope_scaling.original_max_position_embeddings = 8;
    LlamaModel m(c, LlamaWeights::random(c, 31));
    auto cache = m.make_cache(40);
    Tensor lg = m.forward(tokens(30, 6, c.vocab_size), cache);
    for (int64_t i = 0; i < lg.numel(); ++i) ASSERT_TRUE(std::isfinite(lg.ptr<float>()[i])) << type;
  }
}

namespace {

// In-memory WeightSource over the tensors of a LlamaWeights.
class MemSource : public WeightSource {
 public:
  std::map<std::string, Tensor> t;
  bool has(const std::string& n) const override { return t.count(n) > 0; }
  TensorInfo info(const std::string& n) const override {
    TF_CHECK(has(n), "no tensor " << n);
    return TensorInfo{n, "mem", "F32", t.at(n).shape};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> v;
    for (auto& kv : t) v.push_back(kv.first);
    return v;
  }
  void read_rows_f32(const std::string& n, int64_t b, int64_t e, float* dst) const override {
    const Tensor& x = t.at(n);
    const int64_t rl = x.numel() / x.shape[0];
    std::copy(x.ptr<float>() + b * rl, x.ptr<float>() + e * rl, dst);
  }
};

MemSource source_of(const ModelConfig& c, const LlamaWeights& w) {
  MemSource s;
  s.t["model.embed_tokens.weight"] = w.embed;
  s.t["model.norm.weight"] = w.final_norm;
  if (!c.tie_word_embeddings) s.t["lm_head.weight"] = w.lm_head;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const auto& L = w.layers[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s.t[p + "input_layernorm.weight"] = L.attn_norm;
    s.t[p + "post_attention_layernorm.weight"] = L.mlp_norm;
    s.t[p + "self_attn.q_proj.weight"] = L.wq;
    s.t[p + "self_attn.k_proj.weight"] = L.wk;
    s.t[p + "self_attn.v_proj.weight"] = L.wv;
    s.t[p + "self_attn.o_proj.weight"] = L.wo;
    s.t[p + "mlp.gate_proj.weight"] = L.w_gate;
    s.t[p + "mlp.up_proj.weight"] = L.w_up;
    s.t[p + "mlp.down_proj.weight"] = L.w_down;
  }
  return s;
}

}  // namespace

TEST(LlamaWeights, LoadRoundTripAndErrors) {
  ModelConfig c = tiny(4, 2, true);
  LlamaWeights w = LlamaWeights::random(c, 37);
  MemSource s = source_of(c, w);
  LlamaWeights l = LlamaWeights::load(s, c);
  EXPECT_EQ(l.lm_head.data, l.embed.data);  // tied
  LlamaModel a(c, std::move(w)), b(c, std::move(l));
  auto t = tokens(9, 1, c.vocab_size);
  auto ca = a.make_cache(9), cb = b.make_cache(9);
  Tensor la = a.forward(t, ca), lb = b.forward(t, cb);
  EXPECT_EQ(max_diff(la.ptr<float>(), lb.ptr<float>(), la.numel()), 0.0);

  MemSource bad = s;
  bad.t["model.layers.1.mlp.up_proj.weight"] = Tensor::cpu(DType::F32, {47, 32});
  try {
    LlamaWeights::load(bad, c);
    FAIL();
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << e.what();
  }
  MemSource missing = s;
  missing.t.erase("model.norm.weight");
  EXPECT_THROW(LlamaWeights::load(missing, c), tf::Error);
  ModelConfig untied = c;
  untied.tie_word_embeddings = false;
  EXPECT_THROW(LlamaWeights::load(s, untied), tf::Error);  // no lm_head.weight
}

TEST(LlamaWeights, TensorParallelSlices) {
  ModelConfig c = tiny(4, 2);
  LlamaWeights w = LlamaWeights::random(c, 41);
  MemSource s = source_of(c, w);
  const int64_t D = c.head_dim, hid = c.hidden_size, I = c.intermediate_size;
  for (int64_t r = 0; r < 2; ++r) {
    LlamaWeights sh = LlamaWeights::load(s, c, ShardSpec{r, 2});
    EXPECT_EQ(sh.local_kv_heads, 1);
    EXPECT_EQ(sh.local_heads, 2);
    const auto& L = sh.layers[1];
    const auto& F = w.layers[1];
    ASSERT_EQ(L.wq.shape, (std::vector<int64_t>{2 * D, hid}));
    ASSERT_EQ(L.wk.shape, (std::vector<int64_t>{D, hid}));
    ASSERT_EQ(L.wo.shape, (std::vector<int64_t>{hid, 2 * D}));
    ASSERT_EQ(L.w_down.shape, (std::vector<int64_t>{hid, I / 2}));
    for (int64_t i = 0; i < 2 * D * hid; ++i) ASSERT_EQ(L.wq.ptr<float>()[i], F.wq.ptr<float>()[r * 2 * D * hid + i]);
    for (int64_t i = 0; i < D * hid; ++i) ASSERT_EQ(L.wv.ptr<float>()[i], F.wv.ptr<float>()[r * D * hid + i]);
    for (int64_t i = 0; i < I / 2 * hid; ++i) ASSERT_EQ(L.w_up.ptr<float>()[i], F.w_up.ptr<float>()[r * I / 2 * hid + i]);
    for (int64_t row = 0; row < hid; ++row) {
      for (int64_t j = 0; j < 2 * D; ++j)
        ASSERT_EQ(L.wo.ptr<float>()[row * 2 * D + j], F.wo.ptr<float>()[row * 4 * D + r * 2 * D + j]);
      for (int64_t j = 0; j < I / 2; ++j)
        ASSERT_EQ(L.w_down.ptr<float>()[row * I / 2 + j], F.w_down.ptr<float>()[row * I + r * I / 2 + j]);
    }
  }
  EXPECT_THROW(LlamaWeights::load(s, c, ShardSpec{0, 4}), tf::Error);  // 2 kv heads over 4 ranks
}

TEST(LlamaCpu, LongPromptChunkedVsPieces) {
  // 4097 tokens through 512-token internal chunks vs. uneven pieces through the cache.
  ModelConfig c = tiny(4, 1);
  c.max_position_embeddings = 8192;
  LlamaModel m(c, LlamaWeights::random(c, 43));
  const int64_t n = 4097, V = c.vocab_size;
  auto t = tokens(n, 12, V);
  auto a = m.make_cache(n);
  Tensor full = m.forward(t, a, 5);
  EXPECT_EQ(a.length(), n);
  auto b = m.make_cache(n);
  m.forward(std::vector<int32_t>(t.begin(), t.begin() + 1000), b, 1);
  m.forward(std::vector<int32_t>(t.begin() + 1000, t.begin() + 4000), b, 0);
  Tensor tail = m.forward(std::vector<int32_t>(t.begin() + 4000, t.end()), b, 5);
  EXPECT_LT(max_diff(full.ptr<float>(), tail.ptr<float>(), 5 * V), 1e-5);
  EXPECT_THROW(m.forward({1}, a), tf::Error);  // full
}

TEST(FullKVCache, ViewsAndPositions) {
  FullKVCache c(2, 3, 4, 10);
  EXPECT_EQ(c.length(), 0);
  std::vector<int32_t> p = {0, 1, 2};
  std::vector<float> k(3 * 3 * 4), v(3 * 3 * 4);
  for (size_t i = 0; i < k.size(); ++i) { k[i] = float(i); v[i] = -float(i); }
  EXPECT_EQ(c.append_slots(p.data(), 3), 0);
  c.write(1, 0, k.data(), v.data(), 3);
  auto view = c.view(1);
  EXPECT_EQ(view.length, 3);
  EXPECT_EQ(view.positions, nullptr);  // identity positions: attention may skip the lookup
  EXPECT_EQ(view.head_stride, 10 * 4);
  EXPECT_EQ(view.token_stride, 4);
  // slot 2, kv head 1, element 3 == k[(2*3 + 1)*4 + 3]
  EXPECT_EQ(view.k[1 * 40 + 2 * 4 + 3], k[(2 * 3 + 1) * 4 + 3]);
  EXPECT_EQ(view.v[1 * 40 + 2 * 4 + 3], v[(2 * 3 + 1) * 4 + 3]);
  std::vector<int32_t> q = {7, 3};
  EXPECT_EQ(c.append_slots(q.data(), 2), 3);
  EXPECT_NE(c.view(0).positions, nullptr);
  EXPECT_EQ(c.position(3), 7);
  c.truncate(3);
  EXPECT_EQ(c.view(0).positions, nullptr);  // back to identity after rollback
  std::vector<int32_t> big(8, 0);
  try {
    c.append_slots(big.data(), 8);
    FAIL();
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos);
  }
  EXPECT_EQ(c.length(), 3);
  EXPECT_THROW(c.write(0, 2, k.data(), v.data(), 2), tf::Error);  // beyond claimed length
}

// truncate tracks the first non-identity slot instead of rescanning the kept
// positions: the view's mask must still appear exactly when a kept slot moved.
TEST(FullKVCache, PositionMaskFollowsTruncation) {
  FullKVCache c(1, 1, 4, 16);
  const std::vector<int32_t> ident = {0, 1, 2, 3}, moved = {40, 41}, after = {6, 7};
  c.append_slots(ident.data(), 4);
  c.append_slots(moved.data(), 2);  // slots 4, 5 hold positions 40, 41
  c.append_slots(after.data(), 2);  // slots 6, 7 look like the identity but follow a moved slot
  EXPECT_NE(c.view(0).positions, nullptr);
  c.truncate(8);  // unchanged length
  EXPECT_NE(c.view(0).positions, nullptr);
  c.truncate(5);  // slot 4 still moved
  EXPECT_NE(c.view(0).positions, nullptr);
  c.truncate(4);
  EXPECT_EQ(c.view(0).positions, nullptr);
  const std::vector<int32_t> next = {4, 9};  // slot 4 the identity again, slot 5 not
  c.append_slots(next.data(), 1);
  EXPECT_EQ(c.view(0).positions, nullptr);
  c.append_slots(next.data() + 1, 1);
  EXPECT_NE(c.view(0).positions, nullptr);
  EXPECT_EQ(c.position(5), 9);
  c.append_slots(next.data(), 0);  // no slots: nothing changes
  EXPECT_EQ(c.length(), 6);
  c.reset();
  EXPECT_EQ(c.view(0).positions, nullptr);
}
