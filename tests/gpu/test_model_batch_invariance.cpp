// Batch invariance of the whole forward (ctest label gpu), what exact greedy
// speculation rests on: the logits of every row of a 7-token verification are
// bit-identical to the one-token decode step of that token, at long context
// (thousands of slots, many attention splits), on SmolLM2-135M's real weights
// when the default GGUF is cached and on its synthetic shape, with the stacked
// GEMMs and without them, graphs on and off, and the step fusions
// (model/step_fusions.h: the launch merges and the GEMM epilogues) all on and all off, and with the persistent
// whole-step kernel (StepFusions::persistent_step: decode and 7-token verify
// both take it), and with the fusions on plus programmatic dependent launch
// and the SiLU-mul read by the down projection and the combine in the split
// kernel (StepFusions::pdl, fused_silu_down, fused_combine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "default_model_path.h"
#include "core/device.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

using namespace tf;
using tf::testing::tokens_for;
namespace fs = std::filesystem;

namespace {

struct Mismatch {
  int64_t rows = 0, first = -1;
  double max_abs = 0.0;
};

// Decode `steps` tokens one at a time after a `prompt`-token prefill, then
// roll back and feed the same tokens as 7-token verifications: row by row,
// the verification's logits must be the decode step's bits.
Mismatch decode_vs_verify(LlamaModel& m, int64_t prompt, int64_t steps) {
  const int64_t V = m.config().vocab_size;
  auto cache = m.make_cache(prompt + steps + 16);
  m.forward(tokens_for(prompt, V, 1), cache, 1);
  const auto toks = tokens_for(steps, V, 2);
  std::vector<Tensor> one;
  for (int64_t i = 0; i < steps; ++i) one.push_back(m.forward({toks[size_t(i)]}, cache, 1));
  cache.truncate(prompt);
  Mismatch r;
  for (int64_t i0 = 0; i0 < steps; i0 += 7) {
    const int64_t n = std::min<int64_t>(7, steps - i0);
    const std::vector<int32_t> chunk(toks.begin() + i0, toks.begin() + i0 + n);
    const Tensor ver = m.forward(chunk, cache, n);
    for (int64_t j = 0; j < n; ++j) {
      const float* a = one[size_t(i0 + j)].ptr<float>();
      const float* b = ver.ptr<float>() + j * V;
      for (int64_t v = 0; v < V; ++v) EXPECT_TRUE(std::isfinite(b[v])) << "verify row " << i0 + j << " column " << v;
      if (std::memcmp(a, b, size_t(V) * 4) == 0) continue;
      ++r.rows;
      if (r.first < 0) r.first = i0 + j;
      for (int64_t v = 0; v < V; ++v) r.max_abs = std::max(r.max_abs, double(std::fabs(a[v] - b[v])));
    }
  }
  return r;
}

void check(const ModelConfig& cfg, LlamaWeights w, const std::string& name) {
  for (bool stacked : {true, false}) {
    LlamaWeights ws = w;
    if (!stacked)
      for (auto& L : ws.layers) L.wqkv = Tensor(), L.w_gate_up = Tensor();
    // the step fusions all on, all off, the persistent step, on + PDL + the fused SiLU-down
    for (int mode : {0, 1, 2, 3}) {
      const bool fused = mode != 1, persistent = mode == 2, pdl = mode == 3;
      if (!stacked && !fused) continue;  // without stacked weights only the other two switches act
      if (!stacked && persistent) continue;  // it needs the stacked weights
      for (bool graphs : {true, false}) {
        LlamaModel m(cfg, ws, 512);
        m.set_cuda_graphs(graphs);
        StepFusions f = step_fusions_none();
        // fused: the three launch merges and the two GEMM epilogues (the defaults);
        // with PDL the SwiGLU goes to the down projection's input load instead
        // (fused_silu_down, which the gate/up epilogue would take precedence over).
        f.stacked_gemms = f.fused_rope_kv = f.fused_add_norm = fused;
        f.fused_gate_up_silu = fused && !pdl;
        f.fused_qkv_rope = fused;
        f.persistent_step = persistent;
        f.pdl = pdl;
        f.fused_silu_down = pdl;
        f.fused_combine = pdl;
        m.set_step_fusions(f);
        // Sanitizer shapes: one prompt past a 512-slot split, two full verifications and a partial one.
        const int64_t steps = tf::testing::pick<int64_t>(70, 17);
        for (int64_t prompt : tf::testing::grid<int64_t>({1000, 6478}, {600})) {
          const Mismatch r = decode_vs_verify(m, prompt, steps);
          std::printf("[ invariance ] %s stacked=%d fusions=%d persistent=%d pdl=%d graphs=%d prompt %lld: %lld of %lld rows differ (first %lld, max |d| %.3g)\n",
                      name.c_str(), int(stacked), int(fused), int(persistent), int(pdl), int(graphs),
                      (long long)prompt, (long long)r.rows, (long long)steps, (long long)r.first, r.max_abs);
          EXPECT_EQ(r.rows, 0) << name << " stacked=" << stacked << " fusions=" << fused << " persistent=" << persistent
                               << " pdl=" << pdl << " graphs=" << graphs << " prompt " << prompt;
        }
        // Eager only: the persistent step never runs from the step graphs (model/persistent_step.cpp).
        if (persistent && !graphs) EXPECT_GT(m.persistent_steps(), 0) << name << ": the persistent step never ran";
      }
    }
  }
}

}  // namespace

TEST(ModelBatchInvariance, VerifyRowsEqualDecodeStepsSyntheticSmolLM2) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  check(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16, 5), "synthetic smollm2 bf16");
}

TEST(ModelBatchInvariance, VerifyRowsEqualDecodeStepsSmolLM2) {
  REQUIRE_DEVICE();
  const std::string path = default_model_gguf();
  if (!fs::exists(path)) GTEST_SKIP() << "the default model is not cached";
  Checkpoint ck = open_checkpoint(path);
  for (DType dt : {DType::BF16, DType::F16})
    check(ck.config, upload_weights(LlamaWeights::load(*ck.weights, ck.config), Device::CUDA, dt),
          std::string("SmolLM2 ") + dtype_name(dt));
}
