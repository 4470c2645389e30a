// T > 0 on the device (ctest label gpu). The kernels against the host's rules:
// draw_rows against tf::draw_from and verify_rows (through DeviceSampler)
// against speculative::verify, token for token and with the same Philox
// numbers consumed, on dyadic rows (every partial sum exact, so the blocked
// device order and the host's sequential one cannot round apart), over
// awkward vocabularies, zero rows, p = q rows, q(x) = 0 proposals and the
// reference_bug mode; expand_columns against expand_restricted_logits.
// Then losslessness end to end: spec chains whose rows and draws stay on the
// device give the target's exact distribution of the first and second tokens
// (chi-square over thousands of seeds), and the reference's middle-level bug
// is caught by the same test (it has to fail). Poisoned outputs throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/device.h"
#include "core/philox.h"
#include "gen/sampling.h"
#include "model/draft_vocab.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "ops/ops.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "speculative/chain.h"
#include "speculative/device_sampler.h"
#include "speculative/retrieval_runner.h"
#include "speculative/streaming_drafter.h"
#include "speculative/stats.h"
#include "../unit/tiny_model.h"

using namespace tf;
using tf::testing::pick;

namespace {

// Values k / 2^20 with k < 2^10, about a third of them zero: sums of up to
// 2^21 of them are exact in double, and p - q is exact in float.
std::vector<float> dyadic_rows(int64_t n, int64_t V, uint64_t seed, double zero_fraction = 0.3) {
  std::vector<float> x(size_t(n * V));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (auto& v : x) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const double r = double(s >> 11) / double(1ull << 53);
    v = r < zero_fraction ? 0.0f : std::ldexp(float((s >> 20) & 1023), -20);
  }
  return x;
}

Tensor upload(const std::vector<float>& h, int64_t n, int64_t V) {
  Tensor t = empty_tensor(Device::CUDA, DType::F32, {n, V});
  copy_bytes(t.data, Device::CUDA, h.data(), Device::CPU, h.size() * sizeof(float));
  return t;
}

const int64_t kVocabs[] = {1, 3, 127, 1025, 4097, 49152, 128256};

}  // namespace

TEST(DeviceSampling, DrawRowsEqualDrawFromOnDyadicRows) {
  REQUIRE_DEVICE();
  for (int64_t V : kVocabs) {
    const int64_t n = pick<int64_t>(24, 6);
    std::vector<float> h = dyadic_rows(n, V, uint64_t(V));
    for (int64_t j = 0; j < V; ++j) h[size_t(0 * V + j)] = 0.0f;  // row 0: all zero (the host answers 0)
    for (int64_t j = 0; j + 1 < V; ++j) h[size_t(1 * V + j)] = 0.0f;  // row 1: only the last entry
    h[size_t(1 * V + V - 1)] = 0.5f;
    if (V > 1) {
      for (int64_t j = 1; j < V; ++j) h[size_t(2 * V + j)] = 0.0f;  // row 2: only entry 0
      h[size_t(2 * V)] = 0.25f;
    }
    Tensor probs = upload(h, n, V);
    Tensor out = empty_tensor(Device::CUDA, DType::I32, {n});
    for (uint64_t seed : {1ull, 977ull}) {
      for (uint64_t counter : {0ull, 5ull, 1ull << 40}) {
        std::vector<int32_t> got(size_t(n), -7);
        copy_bytes(out.data, Device::CUDA, got.data(), Device::CPU, got.size() * 4);  // poisoned
        ops::draw_rows(probs, out, seed, counter);
        copy_bytes(got.data(), Device::CPU, out.data, Device::CUDA, got.size() * 4);
        for (int64_t r = 0; r < n; ++r)
          ASSERT_EQ(got[size_t(r)], draw_from(h.data() + r * V, V, seed, counter + uint64_t(r)))
              << "V " << V << " row " << r << " seed " << seed << " counter " << counter;
      }
    }
  }
}

TEST(DeviceSampling, VerifyEqualsHostVerifyOnDyadicRows) {
  REQUIRE_DEVICE();
  using namespace tf::speculative;
  int64_t accepts = 0, rejects = 0, residual_zero = 0, bug_rejects = 0;
  for (int64_t V : {int64_t(1), int64_t(5), int64_t(1000), int64_t(49152)}) {
    for (int64_t g : {int64_t(0), int64_t(1), int64_t(3), int64_t(7), int64_t(31)}) {
      const int trials = int(pick<int64_t>(V > 5000 ? 12 : 60, 4));
      DeviceSampler dev;
      dev.reserve(2 * g + 1, V);  // q rows then p rows in one buffer: the chain's layout
      for (int t = 0; t < trials; ++t) {
        const uint64_t salt = uint64_t(V * 1000 + g * 10 + t);
        std::vector<float> q = dyadic_rows(std::max<int64_t>(g, 1), V, salt, 0.2);
        std::vector<float> p = dyadic_rows(g + 1, V, salt + 99991, 0.2);
        // Proposals: mostly the largest entries of q (so that some are
        // accepted), some random, some with q(x) = 0; a few p rows equal to q
        // (the residual vanishes and p is drawn from).
        std::vector<int32_t> x(static_cast<size_t>(g));
        for (int64_t i = 0; i < g; ++i) {
          float* qi = q.data() + i * V;
          int32_t best = 0;
          for (int64_t j = 1; j < V; ++j)
            if (qi[j] > qi[best]) best = int32_t(j);
          const int kind = int((salt + uint64_t(i)) % 5);
          x[size_t(i)] = kind < 3 ? best : int32_t((salt * 31 + uint64_t(i) * 7) % uint64_t(V));
          if (kind == 4) qi[x[size_t(i)]] = 0.0f;
          if ((t + i) % 6 == 5) std::copy(qi, qi + V, p.data() + i * V);
          p[size_t(i * V + x[size_t(i)])] *= float(1 + (t % 3));  // p(x) / q(x) spread around 1
          if (p[size_t(i * V + x[size_t(i)])] == 0.0f && t % 2) p[size_t(i * V + x[size_t(i)])] = std::ldexp(1.0f, -12);
        }
        if (g >= 1 && t % 7 == 3) {
          // Row 0 rejects a proposal with q(x) = p(x) = 0, and p_0 = q_0: the
          // residual is all zero, so the token comes from p_0.
          q[size_t(x[0])] = 0.0f;
          std::copy(q.begin(), q.begin() + V, p.begin());
        }
        std::vector<float> both(q.begin(), q.begin() + g * V);
        both.insert(both.end(), p.begin(), p.end());
        Tensor all = dev.view(0, 2 * g + 1);
        copy_bytes(all.data, Device::CUDA, both.data(), Device::CPU, both.size() * sizeof(float));
        Tensor qd = g ? dev.view(0, g) : Tensor(), pd = dev.view(g, g + 1);
        for (ResampleMode mode : {ResampleMode::residual, ResampleMode::reference_bug}) {
          RngStream hr = RngStream::for_level(uint64_t(t) + 3, int(g)), dr = hr;
          const VerifyResult want = speculative::verify(x, q.data(), p.data(), V, hr, false, mode);
          const VerifyResult got = dev.verify(x, qd, pd, dr, mode);
          ASSERT_EQ(got.tokens, want.tokens) << "V " << V << " g " << g << " trial " << t;
          ASSERT_EQ(got.accepted, want.accepted);
          ASSERT_EQ(got.resampled, want.resampled);
          ASSERT_EQ(got.bonus, want.bonus);
          ASSERT_EQ(dr.counter, hr.counter) << "the device used other Philox numbers than the host";
          if (mode == ResampleMode::reference_bug) {
            bug_rejects += got.resampled;
            continue;
          }
          accepts += got.accepted;
          rejects += got.resampled;
          if (got.resampled) {
            const int64_t k = got.accepted;
            bool zero = true;
            for (int64_t j = 0; j < V && zero; ++j) zero = !(p[size_t(k * V + j)] > q[size_t(k * V + j)]);
            residual_zero += zero;
          }
        }
      }
    }
  }
  // The grid reached every branch.
  EXPECT_GT(accepts, 0);
  EXPECT_GT(rejects, 0);
  EXPECT_GT(residual_zero, 0);
  EXPECT_GT(bug_rejects, 0);
}

TEST(DeviceSampling, ExpandColumnsEqualsHostExpansion) {
  REQUIRE_DEVICE();
  for (int64_t V : {int64_t(7), int64_t(4097), int64_t(49152)}) {
    std::vector<int32_t> ids;
    for (int64_t j = V % 3; j < V; j += 3) ids.push_back(int32_t(j));
    const int64_t K = int64_t(ids.size()), n = 5;
    Tensor in_h = Tensor::cpu(DType::F32, {n, K});
    std::vector<float> v = dyadic_rows(n, K, uint64_t(V), 0.0);
    std::copy(v.begin(), v.end(), in_h.ptr<float>());
    const Tensor want = expand_restricted_logits(in_h, ids, V);
    Tensor in = upload(v, n, K), id = empty_tensor(Device::CUDA, DType::I32, {K}),
           out = empty_tensor(Device::CUDA, DType::F32, {n, V});
    copy_bytes(id.data, Device::CUDA, ids.data(), Device::CPU, size_t(K) * 4);
    std::vector<float> got(size_t(n * V), 12345.0f);
    copy_bytes(out.data, Device::CUDA, got.data(), Device::CPU, got.size() * 4);  // poisoned
    ops::expand_columns(in, id, -std::numeric_limits<float>::infinity(), out);
    copy_bytes(got.data(), Device::CPU, out.data, Device::CUDA, got.size() * 4);
    for (int64_t i = 0; i < n * V; ++i) ASSERT_EQ(got[size_t(i)], want.ptr<float>()[i]) << "V " << V << " at " << i;
  }
}

namespace {

// The device path on, whatever the default (TRIFORCE_DEVICE_SAMPLING).
void device_sampling_on() { setenv("TRIFORCE_DEVICE_SAMPLING", "1", 1); }

// A tiny model the CUDA kernels take (head dim 64), with a 16-token
// vocabulary so that a chi-square over its tokens has power.
LlamaModel tiny_cuda(uint64_t seed) {
  ModelConfig c = tf::testing::tiny_llama_config(16, 128, 1, 2, 1, 256);
  return LlamaModel(c, upload_weights(LlamaWeights::random(c, seed, 0.2f), Device::CUDA, DType::BF16), 64);
}

// The target's exact distributions of the first and second generated tokens,
// as its device rows give them (the rows the chain verifies with).
void exact_first_two_device(LlamaModel& m, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                            std::vector<double>& p1, std::vector<double>& p2) {
  const int64_t V = m.config().vocab_size;
  Tensor rows = empty_tensor(Device::CUDA, DType::F32, {1, V});
  std::vector<float> d(static_cast<size_t>(V)), d2(static_cast<size_t>(V));
  FullKVCache cache = m.make_cache(int64_t(prompt.size()) + 2);
  const ops::SoftmaxParams smp = speculative::softmax_params(sp);
  m.forward_distributions(prompt, cache, 1, smp, rows);
  copy_bytes(d.data(), Device::CPU, rows.data, Device::CUDA, size_t(V) * 4);
  p1.assign(d.begin(), d.end());
  p2.assign(size_t(V), 0.0);
  for (int32_t x = 0; x < V; ++x) {
    if (d[size_t(x)] <= 0) continue;
    cache.truncate(int64_t(prompt.size()));
    m.forward_distributions(std::vector<int32_t>{x}, cache, 1, smp, rows);
    copy_bytes(d2.data(), Device::CPU, rows.data, Device::CUDA, size_t(V) * 4);
    for (int64_t y = 0; y < V; ++y) p2[size_t(y)] += double(d[size_t(x)]) * double(d2[size_t(y)]);
  }
}

struct Lossless {
  speculative::ChiSquare first, second;
};

Lossless run_lossless(speculative::Drafter& d, std::vector<LlamaModel*> levels, speculative::ChainOptions opt,
                      const SamplingParams& base, const std::vector<int32_t>& prompt, int64_t trials) {
  LlamaModel& target = *levels.back();
  const int64_t V = target.config().vocab_size;
  std::vector<double> p1, p2;
  exact_first_two_device(target, prompt, base, p1, p2);
  opt.max_context = 48;
  speculative::SpecChain chain(d, levels, opt);
  std::vector<int64_t> c1(size_t(V), 0), c2(size_t(V), 0);
  const int64_t sampled0 = LlamaModel::process_sampled_forwards();
  for (int64_t s = 0; s < trials; ++s) {
    SamplingParams sp = base;
    sp.seed = uint64_t(s) * 7919 + 1;
    speculative::ChainResult r = chain.generate(prompt, 2, sp);
    EXPECT_TRUE(r.device_sampling) << "the chain took the host path";
    ++c1[size_t(r.gen.tokens.at(0))];
    ++c2[size_t(r.gen.tokens.at(1))];
  }
  EXPECT_GT(LlamaModel::process_sampled_forwards() - sampled0, 2 * trials);
  return {speculative::chi_square(c1, p1), speculative::chi_square(c2, p2)};
}

void report(const char* name, const Lossless& r) {
  std::printf("%-44s first p=%.4g (chi2 %.2f, dof %lld)  second p=%.4g (chi2 %.2f, dof %lld)\n", name,
              r.first.p_value, r.first.statistic, (long long)r.first.dof, r.second.p_value, r.second.statistic,
              (long long)r.second.dof);
}

}  // namespace

TEST(DeviceSampling, ChainsOnTheDeviceAreLossless) {
  REQUIRE_DEVICE();
  device_sampling_on();
  using namespace tf::speculative;
  LlamaModel target = tiny_cuda(101), middle = tiny_cuda(202), draft = tiny_cuda(303);
  const std::vector<int32_t> prompt = {3, 7, 1, 9, 4};
  const int64_t trials = pick<int64_t>(4000, 400);
  SamplingParams sp;
  sp.temperature = 1.0f;
  SamplingParams sp_top_p = sp;
  sp_top_p.temperature = 0.8f;
  sp_top_p.top_p = 0.9f;
  {
    ModelDrafter d(draft, 48);
    Lossless r = run_lossless(d, {&target}, ChainOptions{{3}}, sp, prompt, trials);
    report("device 2-level draft->target T=1", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    ModelDrafter d(draft, 48);
    Lossless r = run_lossless(d, {&middle, &target}, ChainOptions{{2, 3}}, sp_top_p, prompt, trials);
    report("device 3-level draft->middle->target T=0.8 p=0.9", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  {
    // TriForce's shape: the middle level is the target itself.
    ModelDrafter d(draft, 48);
    Lossless r = run_lossless(d, {&target, &target}, ChainOptions{{1, 3}}, sp, prompt, trials);
    report("device 3-level draft->target->target T=1", r);
    EXPECT_GT(r.first.p_value, 1e-3);
    EXPECT_GT(r.second.p_value, 1e-3);
  }
  if (!tf::testing::sanitizer_shapes()) {
    // The reference's bug on the device: the same test must reject it.
    ModelDrafter d(draft, 48);
    ChainOptions opt{{1, 3}};
    opt.middle_mode = ResampleMode::reference_bug;
    Lossless r = run_lossless(d, {&target, &target}, opt, sp, prompt, trials);
    report("device BUGGY middle (reference_bug) T=1", r);
    EXPECT_LT(r.first.p_value, 1e-6);
  }
}

// TRIFORCE_DEVICE_SAMPLING=0 sends a chain back to the host rows, =1 to the device.
TEST(DeviceSampling, SwitchOffTakesTheHostPath) {
  REQUIRE_DEVICE();
  using namespace tf::speculative;
  LlamaModel target = tiny_cuda(101), draft = tiny_cuda(303);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 5;
  ModelDrafter d(draft, 48);
  ChainOptions opt{{3}};
  opt.max_context = 48;
  SpecChain chain(d, {&target}, opt);
  setenv("TRIFORCE_DEVICE_SAMPLING", "0", 1);
  const ChainResult host = chain.generate({3, 7, 1, 9, 4}, 8, sp);
  device_sampling_on();
  const ChainResult dev = chain.generate({3, 7, 1, 9, 4}, 8, sp);
  EXPECT_FALSE(host.device_sampling);
  EXPECT_TRUE(dev.device_sampling);
  EXPECT_EQ(host.gen.tokens.size(), 8u);
  EXPECT_EQ(dev.gen.tokens.size(), 8u);
}

// The TriForce shape on the device at T > 0 (a StreamingLLM drafter, the
// target on a retrieval cache, the full target): the same seed gives the same
// tokens with CUDA graphs and eagerly (the rows are the same bits, the draws
// deterministic), and every level took the device path.
TEST(DeviceSampling, TriforceShapeGraphsEqualEager) {
  REQUIRE_DEVICE();
  device_sampling_on();
  using namespace tf::speculative;
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  const LlamaWeights wt = synthetic_weights(cfg, Device::CUDA, DType::BF16, 17);
  const LlamaWeights wd = synthetic_weights(cfg, Device::CUDA, DType::BF16, 18);
  const int64_t V = cfg.vocab_size, n_new = pick<int64_t>(48, 12);
  std::vector<int32_t> prompt(size_t(pick<int64_t>(600, 200)));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % uint64_t(V));
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.seed = 11;
  std::vector<std::vector<int32_t>> runs;
  for (bool graphs : {true, false}) {
    LlamaModel target(cfg, wt, 512), draft(cfg, wd, 512);
    target.set_cuda_graphs(graphs);
    draft.set_cuda_graphs(graphs);
    RetrievalOptions ro;
    ro.budget = 128;
    ro.chunk = 8;
    ChainOptions opt{{2, 6}};
    opt.max_context = int64_t(prompt.size()) + n_new + 64;
    StreamingDrafter d(draft, 16, 64, 32);
    RetrievalRunner mid(target, ro, n_new + 32);
    ModelRunner top(target, opt.max_context);
    SpecChain chain(std::vector<Verifier*>{&mid, &top}, d, opt);
    const int64_t sampled0 = target.sampled_forwards(), drafted0 = draft.sampled_forwards();
    const ChainResult r = chain.generate(prompt, n_new, sp);
    EXPECT_TRUE(r.device_sampling) << (graphs ? "graphs" : "eager");
    EXPECT_GT(target.sampled_forwards() - sampled0, r.top_steps);
    EXPECT_GT(draft.sampled_forwards() - drafted0, r.top_steps);
    EXPECT_EQ(int64_t(r.gen.tokens.size()), n_new);
    runs.push_back(r.gen.tokens);
  }
  EXPECT_EQ(runs[0], runs[1]) << "graph and eager runs drew different tokens";
}
