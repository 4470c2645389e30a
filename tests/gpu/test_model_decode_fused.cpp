// The decode-path fusions of LlamaModel::run_chunk (ctest label gpu): calls of
// up to 32 tokens run the stacked q/k/v and gate/up GEMMs, one kernel for
// RoPE + the KV write and SiLU on the stacked rows. Each is claimed to give
// the unfused path's bits, so a model whose layers have no stacked weights
// (separate q/k/v/gate/up GEMMs, rope, KV write, silu_mul) must produce the
// same logits bit for bit: after a prefill, for decode steps, 3-, 7- and
// 32-token calls. (The residual add fused with the next norm is the same in
// both models; test_kernels_decode_fused checks it against add + norm.)
// Eager (graphs off) so the comparison is about the kernels alone;
// test_cuda_graphs compares graphs with eager.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/llama.h"
#include "model/weights_device.h"
#include "require_device.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "pdl.cuh"
#endif

using namespace tf;

namespace {

std::vector<int32_t> tokens_for(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 7919 + salt * 104729 + 13) % vocab);
  return t;
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  int64_t nan = 0;
  for (int64_t i = 0; i < a.numel(); ++i) nan += !std::isfinite(a.ptr<float>()[i]);
  EXPECT_EQ(nan, 0) << what;
  ASSERT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0) << what << ": fused and unfused logits differ";
}

}  // namespace

TEST(ModelDecodeFused, StackedAndFusedStepsEqualTheUnfusedPath) {
  REQUIRE_DEVICE();
  for (const char* name : {"synthetic:smollm2-135m", "synthetic:llama-68m"}) {
    SCOPED_TRACE(name);
    const ModelConfig cfg = synthetic_config(name);
    const LlamaWeights w = synthetic_weights(cfg, Device::CUDA, DType::BF16, 5);
    ASSERT_TRUE(w.layers[0].wqkv.data && w.layers[0].w_gate_up.data) << "device weights are stacked";
    LlamaWeights plain = w;  // the same storage (w keeps it alive), without the stacked views
    for (auto& L : plain.layers) L.wqkv = Tensor{}, L.w_gate_up = Tensor{};
    LlamaModel fused(cfg, w, 256), unfused(cfg, plain, 256);
    fused.set_cuda_graphs(false), unfused.set_cuda_graphs(false);
    const int64_t V = cfg.vocab_size;
    auto cf = fused.make_cache(2048), cu = unfused.make_cache(2048);
    const auto prompt = tokens_for(300, V, 1);
    expect_bitwise(fused.forward(prompt, cf, 4), unfused.forward(prompt, cu, 4), "prefill");
    int64_t salt = 10;
    for (int64_t n : {1, 1, 7, 1, 3, 32, 1, 7}) {
      const auto t = tokens_for(n, V, salt++);
      expect_bitwise(fused.forward(t, cf), unfused.forward(t, cu), std::to_string(n) + "-token step");
    }
    // And the fused path stays batch-invariant: a verify row equals its own decode step.
    const int64_t len = cf.length();
    const auto seven = tokens_for(7, V, 99);
    Tensor verify = fused.forward(seven, cf, 7);
    cf.truncate(len);
    for (int64_t i = 0; i < 7; ++i) {
      Tensor one = fused.forward({seven[size_t(i)]}, cf, 1);
      ASSERT_EQ(std::memcmp(one.data, verify.ptr<float>() + i * V, size_t(V) * 4), 0) << "verify row " << i;
    }
  }
}

// Programmatic dependent launch changes when a kernel starts, never what it
// computes: logits with PDL on and off, eager and through CUDA graphs, are
// the same bits (a kernel reading before its griddepcontrol.wait would race).
TEST(ModelDecodeFused, PdlOnAndOffGiveTheSameBits) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  const LlamaWeights w = synthetic_weights(cfg, Device::CUDA, DType::BF16, 6);
  const int64_t V = cfg.vocab_size;
  const bool before = cuda::pdl_enabled();
  std::vector<std::vector<Tensor>> runs;
  for (bool pdl : {false, true})
    for (bool graphs : {false, true}) {
      cuda::set_pdl_enabled(pdl);
      LlamaModel m(cfg, w, 256);
      m.set_cuda_graphs(graphs);
      auto c = m.make_cache(2048);
      std::vector<Tensor> out;
      out.push_back(m.forward(tokens_for(300, V, 1), c, 1));
      int64_t salt = 10;
      for (int rep = 0; rep < 3; ++rep)  // graphs: first use eager, second records, third replays
        for (int64_t n : {1, 7, 3}) out.push_back(m.forward(tokens_for(n, V, salt++), c));
      if (graphs) EXPECT_GT(m.step_graphs().replays(), 0) << "pdl " << pdl;
      runs.push_back(std::move(out));
    }
  cuda::set_pdl_enabled(before);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t i = 0; i < runs[0].size(); ++i)
      expect_bitwise(runs[r][i], runs[0][i], "run " + std::to_string(r) + " call " + std::to_string(i));
#endif
}
