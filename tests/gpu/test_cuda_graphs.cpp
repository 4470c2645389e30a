// CUDA graphs of the decode-sized forward (model/step_graphs.h) against eager
// runs of the same weights: logits bit-identical step by step (decode, a
// 7-token verify, steps crossing 512-slot attention splits, a rollback then
// replay, a streaming draft cache and a retrieval cache), and greedy tokens of
// ar and triforce identical with graphs on and off, on synthetic SmolLM2-135M
// and on the HF fixtures. Every comparison also checks that the graph model
// really replayed graphs (a test that would pass with graphs silently off is
// no test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "io/npy.h"
#include "kv/retrieval_cache.h"
#include "kv/streaming_cache.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "speculative/methods.h"

using namespace tf;
using tf::testing::pick;
using tf::testing::tokens_for;

namespace {

const std::string kFixtures = TF_FIXTURES;

// One set of device weights, two models: graphs on and off.
struct Pair {
  std::unique_ptr<LlamaModel> graph, eager;
};
Pair make_pair(const ModelConfig& cfg, const LlamaWeights& w, int64_t chunk) {
  Pair p;
  p.graph = std::make_unique<LlamaModel>(cfg, w, chunk);
  p.eager = std::make_unique<LlamaModel>(cfg, w, chunk);
  p.graph->set_cuda_graphs(true);
  p.eager->set_cuda_graphs(false);
  return p;
}
Pair synthetic_smollm2() {
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  return make_pair(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16, 11), 512);
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  int64_t nan = 0;
  for (int64_t i = 0; i < a.numel(); ++i) nan += !std::isfinite(a.ptr<float>()[i]);
  EXPECT_EQ(nan, 0) << what;
  ASSERT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0) << what << ": graph and eager logits differ";
}

// Steps of `sizes` tokens (n_out = all) on both models' caches, compared bit for bit.
void step_both(Pair& p, FullKVCache& cg, FullKVCache& ce, const std::vector<int64_t>& sizes, int64_t vocab,
               int64_t salt, std::vector<Tensor>* keep = nullptr) {
  for (size_t s = 0; s < sizes.size(); ++s) {
    const auto t = tokens_for(sizes[s], vocab, salt + int64_t(s));
    Tensor a = p.graph->forward(t, cg), b = p.eager->forward(t, ce);
    expect_bitwise(a, b, "step " + std::to_string(s) + " of " + std::to_string(sizes[s]) + " tokens at length " +
                             std::to_string(cg.length()));
    if (keep) keep->push_back(a);
  }
}

}  // namespace

TEST(CudaGraphs, DecodeVerifySplitBoundariesRollbackBitIdentical) {
  REQUIRE_DEVICE();
  Pair p = synthetic_smollm2();
  const int64_t V = p.graph->config().vocab_size;
  auto cg = p.graph->make_cache(4096), ce = p.eager->make_cache(4096);
  const auto prompt = tokens_for(500, V, 1);
  expect_bitwise(p.graph->forward(prompt, cg, 1), p.eager->forward(prompt, ce, 1), "prefill");
  // 500 -> 1120: one-token steps and 7-token verifies across the 512 and 1024
  // split boundaries (and the graph grid buckets of 1, 2 and 4 splits).
  std::vector<int64_t> sizes;
  if (!tf::testing::sanitizer_shapes()) {
    for (int i = 0; i < 30; ++i) sizes.push_back(1);
    for (int i = 0; i < 140; ++i) sizes.push_back(i % 2 ? 1 : 7);
    for (int i = 0; i < 10; ++i) sizes.push_back(3);
  } else {  // the same boundaries in fewer steps: 500 -> 546, one 470-token chunk, 1016 -> 1046
    for (int i = 0; i < 6; ++i) sizes.push_back(1);
    for (int i = 0; i < 10; ++i) sizes.push_back(i % 2 ? 1 : 7);
    sizes.push_back(470);
    for (int i = 0; i < 6; ++i) sizes.push_back(i % 2 ? 1 : 7);
    for (int i = 0; i < 2; ++i) sizes.push_back(3);
  }
  std::vector<Tensor> first;
  step_both(p, cg, ce, sizes, V, 100, &first);
  EXPECT_GT(p.graph->step_graphs().replays(), pick(50, 5));
  EXPECT_GE(p.graph->step_graphs().captures(), 3);  // n = 1, 7, 3
  EXPECT_EQ(p.eager->step_graphs().replays(), 0);
  // Rollback into the middle and replay the same steps: the same bits again.
  cg.truncate(500), ce.truncate(500);
  std::vector<Tensor> again;
  step_both(p, cg, ce, sizes, V, 100, &again);
  for (size_t i = 0; i < first.size(); ++i) expect_bitwise(first[i], again[i], "replay after rollback " + std::to_string(i));
  // A verify row equals the decode of that token (batch invariance survives the graphs).
  ASSERT_GE(cg.length(), pick(1100, 1040));
  cg.truncate(1000);
  const auto seven = tokens_for(7, V, 999);
  Tensor verify = p.graph->forward(seven, cg, 7);
  cg.truncate(1000);
  for (int64_t i = 0; i < 7; ++i) {
    Tensor one = p.graph->forward({seven[size_t(i)]}, cg, 1);
    ASSERT_EQ(std::memcmp(one.data, verify.ptr<float>() + i * V, size_t(V) * 4), 0) << "verify row " << i;
  }
}

TEST(CudaGraphs, StreamingAndRetrievalCachesBitIdentical) {
  REQUIRE_DEVICE();
  Pair p = synthetic_smollm2();
  const ModelConfig& cfg = p.graph->config();
  const int64_t V = cfg.vocab_size, KH = p.graph->weights().local_kv_heads;
  // A streaming draft cache (sink 16 + window 234) absorbing a prompt, then
  // decoding and evicting: the same storage, positions re-indexed.
  StreamingKVCache sg(cfg, 16, 234, 16 + 234 + 8, true, KH, Device::CUDA, DType::BF16);
  StreamingKVCache se(cfg, 16, 234, 16 + 234 + 8, true, KH, Device::CUDA, DType::BF16);
  const auto prompt = tokens_for(200, V, 2);
  expect_bitwise(p.graph->forward(prompt, sg.next_positions(200, 0), sg.cache(), 1),
                 p.eager->forward(prompt, se.next_positions(200, 0), se.cache(), 1), "draft prefill");
  const int steps = pick(120, 70);  // past the first eviction at step 58 either way
  for (int s = 0; s < steps; ++s) {
    if (sg.length() + 1 > sg.cache().capacity()) {
      sg.evict();
      se.evict();
    }
    const auto t = tokens_for(1, V, 300 + s);
    const auto pos = sg.next_positions(1, 200 + s);
    expect_bitwise(p.graph->forward(t, pos, sg.cache(), 1), p.eager->forward(t, pos, se.cache(), 1),
                   "draft step " + std::to_string(s));
  }
  EXPECT_GT(p.graph->step_graphs().replays(), steps - 20);

  // A retrieval cache (budget 256, chunk 8, tail for 8 tokens): steps of 1
  // and γ + 1 = 7 at the prompt's positions, rolled back after each verify.
  const int64_t P = pick<int64_t>(1500, 700);
  const auto long_prompt = tokens_for(P, V, 3);
  RetrievalOptions opt;
  opt.budget = 256;
  RetrievalKVCache rg(cfg, opt, 32, KH, Device::CUDA, DType::BF16), re(cfg, opt, 32, KH, Device::CUDA, DType::BF16);
  rg.build(*p.graph, long_prompt);
  re.build(*p.eager, long_prompt);
  const int64_t base = rg.cache().length();
  ASSERT_EQ(base, re.cache().length());
  const int64_t before = p.graph->step_graphs().replays();
  for (int s = 0; s < 12; ++s) {
    const int64_t n = s % 2 ? 7 : 1;
    const auto t = tokens_for(n, V, 500 + s);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = P - 1 + i;
    expect_bitwise(p.graph->forward(t, pos, rg.cache(), n), p.eager->forward(t, pos, re.cache(), n),
                   "retrieval step " + std::to_string(s));
    rg.cache().truncate(base), re.cache().truncate(base);
  }
  // 6 uses per shape = eager, capture, replays; the first verify grows the
  // attention workspace, which drops the decode graph once (measured: 7).
  EXPECT_GE(p.graph->step_graphs().replays() - before, 6);
}

namespace {
// ar and triforce greedy tokens with graphs on and off. The drafts a method
// builds (layer-skip models) take the process default, so it is switched too.
void methods_identical(Pair& p, const std::vector<int32_t>& prompt, int64_t new_tokens, const std::string& what) {
  for (const std::string m : {"ar", "triforce"}) {
    SCOPED_TRACE(what + " " + m);
    speculative::MethodRequest req;
    req.max_new_tokens = new_tokens;
    req.method = m;
    set_cuda_graphs_default(false);
    const speculative::MethodOutcome eager = speculative::run_method(*p.eager, req, prompt);
    set_cuda_graphs_default(true);
    const int64_t before = p.graph->step_graphs().replays();
    const speculative::MethodOutcome graph = speculative::run_method(*p.graph, req, prompt);
    EXPECT_EQ(graph.tokens, eager.tokens);
    EXPECT_EQ(int64_t(graph.tokens.size()), new_tokens);
    EXPECT_GT(p.graph->step_graphs().replays(), before) << "the target never replayed a graph";
    if (m == "triforce") {
      ASSERT_EQ(graph.levels.size(), eager.levels.size());
      for (size_t l = 0; l < graph.levels.size(); ++l) EXPECT_EQ(graph.levels[l].alpha, eager.levels[l].alpha) << l;
    }
  }
}
}  // namespace

TEST(CudaGraphs, GreedyMethodsIdenticalOnSyntheticSmolLM2) {
  REQUIRE_DEVICE();
  Pair p = synthetic_smollm2();
  // Long enough for a retrieval budget of several chunks and a full draft window.
  methods_identical(p, tokens_for(pick(1400, 700), p.graph->config().vocab_size, 4), pick(96, 24),
                    "synthetic smollm2");
}

TEST(CudaGraphs, FixturesLogitsAndGreedyIdentical) {
  REQUIRE_DEVICE();
  std::ifstream f(kFixtures + "/hf/manifest.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& e : j) {
    const std::string dir = kFixtures + "/" + e.at("path").get<std::string>();
    SCOPED_TRACE(e.at("name").get<std::string>());
    Checkpoint ck = open_checkpoint(dir);
    const LlamaWeights host = LlamaWeights::load(*ck.weights, ck.config);
    Pair p = make_pair(ck.config, upload_weights(host, Device::CUDA, DType::BF16), 64);
    const Tensor pt = read_npy(dir + "/prompt.npy");
    const std::vector<int32_t> prompt(pt.ptr<int32_t>(), pt.ptr<int32_t>() + pt.numel());
    const int64_t n = int64_t(prompt.size());
    // Dynamic NTK recomputes the rope table from each call's largest position:
    // the graph replays the host's rows, so it must follow.
    auto cg = p.graph->make_cache(n + 64), ce = p.eager->make_cache(n + 64);
    const int64_t head = std::max<int64_t>(1, n / 2);
    const std::vector<int32_t> first(prompt.begin(), prompt.begin() + head);
    expect_bitwise(p.graph->forward(first, cg, 1), p.eager->forward(first, ce, 1), "prefill");
    for (int64_t b = head; b < n;) {
      const int64_t m = std::min<int64_t>(n - b, (b % 3) == 0 ? 7 : 1);
      const std::vector<int32_t> part(prompt.begin() + b, prompt.begin() + b + m);
      expect_bitwise(p.graph->forward(part, cg), p.eager->forward(part, ce), "step at " + std::to_string(b));
      b += m;
    }
    EXPECT_GT(p.graph->step_graphs().replays(), 0);
    methods_identical(p, prompt, pick(24, 8), e.at("name").get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 10);
}
