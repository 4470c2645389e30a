// The prefill options (model/prefill_options.h), ctest label gpu: a chunked
// prefill (chunks of 256, 256 and 188 rows: every chunk prefill-shaped) with
// the stacked q/k/v and gate/up GEMMs, against the fp32 CPU reference of the
// same weights, next to the same prefill without them: both within the
// dtype's relative L2 per logit row, and the stacked one no worse than twice
// the unstacked one's error (cuBLAS may round a wider GEMM differently, not
// worse). Decode-shaped calls (<= 32 rows) never read the options: a sequence
// of them is bit-identical with the options on and off. Synthetic SmolLM2-135M
// shapes (GQA 9/3, head_dim 64) in bf16 and f16. SKIPPED without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/device.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "random_data.h"
#include "require_device.h"

using namespace tf;
using tf::testing::tokens_for;

namespace {

// The worst relative L2 over rows of got against ref (NaN anywhere: infinity).
double worst_rel_l2(const Tensor& got, const Tensor& ref) {
  const int64_t n = got.shape[0], V = got.shape[1];
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double a = got.ptr<float>()[i * V + j], b = ref.ptr<float>()[i * V + j];
      if (!std::isfinite(a)) return INFINITY;
      num += (a - b) * (a - b), den += b * b;
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

// What test_model_gpu allows a whole forward against the CPU reference.
double rel_bound(DType t) { return t == DType::BF16 ? 0.12 : 0.02; }

}  // namespace

TEST(ModelPrefillGpu, StackedPrefillMatchesCpu) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  const LlamaWeights host = synthetic_weights(cfg, Device::CPU, DType::F32, 7);
  const std::vector<int32_t> prompt = tokens_for(700, cfg.vocab_size, 3);
  const int64_t rows = 48;  // logit rows from the last two chunks
  LlamaModel cpu(cfg, host, 512);
  auto cc = cpu.make_cache(704);
  const Tensor ref = cpu.forward(prompt, cc, rows);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dt));
    const LlamaWeights dev = upload_weights(host, Device::CUDA, dt);
    double err[2] = {};
    for (bool stacked : {false, true}) {
      LlamaModel m(cfg, dev, 256);
      m.set_prefill_options(PrefillOptions{stacked});
      auto cache = m.make_cache(704);
      const Tensor got = m.forward(prompt, cache, rows);
      ASSERT_EQ(got.shape, ref.shape);
      err[stacked] = worst_rel_l2(got, ref);
      std::printf("[ gpu      ] prefill %s stacked=%d: worst rel L2 %.4g (bound %.3g)\n", dtype_name(dt), int(stacked),
                  err[stacked], rel_bound(dt));
      EXPECT_LE(err[stacked], rel_bound(dt)) << "stacked=" << stacked;
    }
    EXPECT_LE(err[1], 2 * err[0] + 1e-4) << "the stacked prefill is further from the CPU than the unstacked one";
  }
}

TEST(ModelPrefillGpu, DecodeShapedCallsIgnoreTheOptions) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  const LlamaWeights w = synthetic_weights(cfg, Device::CUDA, DType::BF16, 5);
  std::vector<std::vector<float>> runs[2];
  for (bool stacked : {false, true}) {
    LlamaModel m(cfg, w, 256);
    m.set_prefill_options(PrefillOptions{stacked});
    auto cache = m.make_cache(256);
    int64_t salt = 1;
    for (int64_t n : {32, 1, 3, 7, 32, 1}) {
      const Tensor lg = m.forward(tokens_for(n, cfg.vocab_size, salt++), cache);
      runs[stacked].emplace_back(lg.ptr<float>(), lg.ptr<float>() + lg.numel());
    }
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)), 0)
        << "call " << i << " changed with the prefill options";
}
