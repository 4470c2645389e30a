// Parity of the CPU reference forward with transformers (fp32, eager):
// every fixture listed in tests/fixtures/hf/manifest.json, plus SmolLM2-135M
// (Q4_1 GGUF, dequantised by both sides). Per row relative L2 <= 1e-3, equal
// argmax at every position, identical greedy continuation.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "ops/ops.h"

using namespace tf;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = TF_FIXTURES;

std::vector<int32_t> ids(const Tensor& t) {
  return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
}

struct RowStats {
  double worst_rel = 0;
  int64_t worst_row = -1, argmax_mismatch = 0, first_mismatch = -1;
};

RowStats compare_rows(const Tensor& got, const Tensor& ref, int64_t ref_row0 = 0) {
  RowStats s;
  const int64_t n = got.shape[0], V = got.shape[1];
  for (int64_t i = 0; i < n; ++i) {
    const float* a = got.ptr<float>() + i * V;
    const float* b = ref.ptr<float>() + (ref_row0 + i) * V;
    double num = 0, den = 0;
    int64_t ga = 0, ra = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double d = double(a[j]) - b[j];
      num += d * d;
      den += double(b[j]) * b[j];
      if (a[j] > a[ga]) ga = j;
      if (b[j] > b[ra]) ra = j;
    }
    const double rel = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    if (!(rel <= s.worst_rel)) { s.worst_rel = rel; s.worst_row = i; }
    if (ga != ra) {
      ++s.argmax_mismatch;
      if (s.first_mismatch < 0) s.first_mismatch = i;
    }
  }
  return s;
}

// Full-prompt logits (optionally in a chunked model), incremental logits and
// greedy continuation against the reference files in `dir`.
void check_model(const std::string& name, const std::string& model_path, const std::string& dir, bool incremental) {
  SCOPED_TRACE("fixture " + name);
  Checkpoint ck = open_checkpoint(model_path);
  const ModelConfig cfg = ck.config;
  Tensor prompt_t = read_npy(dir + "/prompt.npy");
  Tensor ref = read_npy(dir + "/logits.npy");
  Tensor greedy_t = read_npy(dir + "/greedy.npy");
  ASSERT_EQ(prompt_t.dtype, DType::I32);
  ASSERT_EQ(ref.dtype, DType::F32);
  const auto prompt = ids(prompt_t), greedy = ids(greedy_t);
  const int64_t n = int64_t(prompt.size());
  ASSERT_EQ(ref.shape, (std::vector<int64_t>{n, cfg.vocab_size}));

  const LlamaWeights weights = LlamaWeights::load(*ck.weights, cfg);  // tensors are shared, copies are shallow
  LlamaModel model(cfg, weights, 512);
  {
    auto cache = model.make_cache(n + 1);
    Tensor lg = model.forward(prompt, cache);
    RowStats s = compare_rows(lg, ref);
    std::printf("[ parity   ] %-14s one call : max rel L2 %.3g (row %lld), argmax mismatches %lld/%lld\n",
                name.c_str(), s.worst_rel, (long long)s.worst_row, (long long)s.argmax_mismatch, (long long)n);
    EXPECT_LE(s.worst_rel, 1e-3) << "row " << s.worst_row;
    EXPECT_EQ(s.argmax_mismatch, 0) << "first at row " << s.first_mismatch;
  }
  if (incremental) {  // pieces through the cache, and a small internal chunk
    LlamaModel chunked(cfg, weights, 64);
    auto cache = chunked.make_cache(n + 1);
    double worst = 0;
    int64_t mism = 0;
    for (int64_t b = 0; b < n;) {
      const int64_t m = std::min<int64_t>(n - b, b == 0 ? 7 : (b % 3 == 0 ? 1 : 100));
      Tensor lg = chunked.forward(std::vector<int32_t>(prompt.begin() + b, prompt.begin() + b + m), cache);
      RowStats s = compare_rows(lg, ref, b);
      worst = std::max(worst, s.worst_rel);
      mism += s.argmax_mismatch;
      b += m;
    }
    std::printf("[ parity   ] %-14s pieces   : max rel L2 %.3g, argmax mismatches %lld\n", name.c_str(), worst,
                (long long)mism);
    EXPECT_LE(worst, 1e-3);
    EXPECT_EQ(mism, 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto g = greedy_generate(model, prompt, int64_t(greedy.size()));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int64_t first_diff = -1;
  for (size_t i = 0; i < greedy.size(); ++i)
    if (g[i] != greedy[i]) { first_diff = int64_t(i); break; }
  std::printf("[ parity   ] %-14s greedy   : %s (%zu tokens, %.1f ms)\n", name.c_str(),
              first_diff < 0 ? "identical" : ("differs at " + std::to_string(first_diff)).c_str(), greedy.size(), ms);
  EXPECT_EQ(g, greedy) << "first difference at token " << first_diff;
}

}  // namespace

TEST(ParityHF, ManifestFixtures) {
  const std::string manifest = kFixtures + "/hf/manifest.json";
  if (!fs::exists(manifest)) GTEST_SKIP() << "no " << manifest << " (run scripts/make_hf_fixtures.py)";
  std::ifstream f(manifest);
  nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_TRUE(j.is_array() && !j.empty()) << manifest << " lists no fixtures";
  int checked = 0;
  for (const auto& e : j) {
    const std::string name = e.at("name").get<std::string>();
    const std::string dir = kFixtures + "/" + e.at("path").get<std::string>();
    if (!fs::exists(dir + "/config.json")) {
      ADD_FAILURE() << "fixture " << name << ": " << dir << " has no config.json";
      continue;
    }
    const std::string rope = e.value("rope_type", std::string("default"));
    // Dynamic NTK: transformers re-derives frequencies from the sequence length
    // of each call, so piecewise prefill legitimately differs from one call.
    check_model(name, dir, dir, rope != "dynamic");
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(ParityHF, SmolLM2Q4_1) {
  const std::string dir = kFixtures + "/smollm2";
  const char* home = std::getenv("HOME");
  const std::string model = std::string(home ? home : "") + "/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(dir + "/logits.npy")) GTEST_SKIP() << "no " << dir << "/logits.npy";
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model << " (scripts fetch the default model)";
  check_model("smollm2", model, dir, true);
}
