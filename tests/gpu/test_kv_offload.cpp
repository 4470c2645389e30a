// KV offloading (--offload-kv) on the GPU: an offloaded full cache (all
// layers in pinned host memory, or the first K on the device) gives logits
// bit-identical to the on-device cache for multi-chunk prefill, decode,
// verify-sized calls and rollback, on the HF fixtures and synthetic SmolLM2;
// copies between offloaded and device caches are exact; and greedy ar and
// TriForce tokens (retrieval built from, and re-retrieved from, an offloaded
// cache) equal the on-device run's.
#include <gtest/gtest.h>

#include <cstring>

#include "core/device.h"
#include "core/philox.h"
#include "kv/slot_gather.h"
#include "model/checkpoint.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "speculative/methods.h"
#include "speculative/prefill.h"

using namespace tf;
using namespace tf::speculative;

namespace {

const std::string kFixtures = TF_FIXTURES;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = philox4x32_10(seed, uint64_t(i)).v[0];
    t[size_t(i)] = int32_t(r % uint32_t(vocab));
  }
  return t;
}

// Bitwise equality of two host f32 logits tensors, with the first differing index.
void expect_bit_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  const float* x = a.ptr<float>();
  const float* y = b.ptr<float>();
  int64_t nan = 0;
  for (int64_t i = 0; i < a.numel(); ++i) nan += x[i] != x[i];
  EXPECT_EQ(nan, 0) << what << ": NaN logits";
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(x + i, y + i, sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": logits differ at " << i << " (" << x[i] << " vs " << y[i] << ")";
      return;
    }
}

// Slots [0, m) of every head of two [kv_heads, capacity, head_dim] device tensors, bitwise.
void expect_slots_identical(const Tensor& a, const Tensor& b, int64_t m, const std::string& what) {
  const Tensor x = to_host_f32(a), y = to_host_f32(b);
  const int64_t H = a.shape[0], C = a.shape[1], D = a.shape[2];
  for (int64_t h = 0; h < H; ++h)
    if (std::memcmp(x.ptr<float>() + h * C * D, y.ptr<float>() + h * C * D, size_t(m * D) * sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": head " << h << " differs";
      return;
    }
}

// Prefill (several chunks), 5 decode steps, a verify of 7, a rollback of 4 and
// another verify, on a device cache and on an offloaded one of the same model.
void check_model(LlamaModel& m, int64_t prompt_len, const std::string& name) {
  const int64_t L = m.config().num_layers;
  for (const int64_t on_chip : {int64_t(0), L / 2, L}) {
    SCOPED_TRACE(name + " on-chip layers " + std::to_string(on_chip));
    const int64_t cap = prompt_len + 64;
    m.set_kv_offload({});
    FullKVCache dev = m.make_cache(cap);
    m.set_kv_offload({true, on_chip});
    FullKVCache off = m.make_cache(cap);
    m.set_kv_offload({});
    EXPECT_EQ(off.offloaded(), on_chip < L);
    EXPECT_EQ(off.on_chip_layers(), on_chip);
    EXPECT_EQ(off.storage_bytes() + off.host_bytes(), dev.storage_bytes());

    const auto prompt = random_tokens(prompt_len, m.config().vocab_size, 11);
    expect_bit_identical(m.forward(prompt, off, 4), m.forward(prompt, dev, 4), "prefill");
    ASSERT_EQ(off.length(), dev.length());
    const auto more = random_tokens(40, m.config().vocab_size, 12);
    for (int i = 0; i < 5; ++i)
      expect_bit_identical(m.forward({more[size_t(i)]}, off, 1), m.forward({more[size_t(i)]}, dev, 1),
                           "decode " + std::to_string(i));
    std::vector<int32_t> block(more.begin() + 5, more.begin() + 12);
    expect_bit_identical(m.forward(block, off), m.forward(block, dev), "verify");
    off.truncate(off.length() - 4);
    dev.truncate(dev.length() - 4);
    std::vector<int32_t> block2(more.begin() + 20, more.begin() + 27);
    expect_bit_identical(m.forward(block2, off), m.forward(block2, dev), "verify after rollback");

    // A copy of an offloaded cache (pinned to pinned), and copy_prefix both
    // ways between offloaded and device caches, continue identically.
    FullKVCache off_copy(off);
    m.set_kv_offload({true, on_chip});
    FullKVCache off2 = m.make_cache(cap);
    m.set_kv_offload({});
    FullKVCache dev2 = m.make_cache(cap);
    const int64_t n = dev.length() - 3;
    copy_prefix(dev, n, off2);
    copy_prefix(off, n, dev2);
    FullKVCache dev3(dev);
    dev3.truncate(n);
    const std::vector<int32_t> tail(more.begin() + 30, more.begin() + 33);
    const Tensor want = m.forward(tail, dev3);
    expect_bit_identical(m.forward(tail, off2), want, "copy_prefix device -> offloaded");
    expect_bit_identical(m.forward(tail, dev2), want, "copy_prefix offloaded -> device");
    off_copy.truncate(n);
    expect_bit_identical(m.forward(tail, off_copy), want, "copy of an offloaded cache");

    // Gathers and chunk scores read an offloaded source layer by layer.
    FullKVCache g_dev = m.make_cache(64), g_off = m.make_cache(64);
    std::vector<int32_t> pos(48);
    for (int64_t i = 0; i < 48; ++i) pos[size_t(i)] = int32_t(i);
    g_dev.append_slots(pos.data(), 48);
    g_off.append_slots(pos.data(), 48);
    SlotGather g;
    g.m = 48;
    for (int64_t i = 0; i < 48; ++i) g.src_slots.push_back(int32_t((i * 5) % n));
    gather_slots(dev, g_dev, g);
    gather_slots(off, g_off, g);
    for (int64_t l = 0; l < L; ++l) {
      expect_slots_identical(g_off.layer_k(l), g_dev.layer_k(l), 48, "gathered K");
      expect_slots_identical(g_off.layer_v(l), g_dev.layer_v(l), 48, "gathered V");
      std::vector<double> q(size_t(dev.num_kv_heads() * dev.head_dim()), 0.25);
      EXPECT_EQ(chunk_scores(off, l, q, 8, n / 8), chunk_scores(dev, l, q, 8, n / 8)) << "chunk scores";
    }
  }
}

std::unique_ptr<LlamaModel> smollm2_synthetic(int64_t max_chunk) {
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  return std::make_unique<LlamaModel>(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16, 3), max_chunk);
}

}  // namespace

TEST(KvOffloadGpu, HfFixturesBitIdentical) {
  REQUIRE_DEVICE();
  for (const std::string name : {"gqa_f32", "mha_f32", "headdim32_f32"}) {
    Checkpoint ck = open_checkpoint(kFixtures + "/hf/" + name);
    LlamaModel m(ck.config, upload_weights(LlamaWeights::load(*ck.weights, ck.config), Device::CUDA, DType::BF16),
                 64);
    check_model(m, 200, name);  // 4 prefill chunks of 64
  }
}

TEST(KvOffloadGpu, SyntheticSmolLM2BitIdentical) {
  REQUIRE_DEVICE();
  // Chunks of 512 (sanitizer shapes: 128): the prefix streams 3 times.
  auto m = smollm2_synthetic(tf::testing::pick(512, 128));
  check_model(*m, tf::testing::pick(1300, 300), "synthetic:smollm2-135m");
}

TEST(KvOffloadGpu, GreedyArAndTriforceUnchanged) {
  REQUIRE_DEVICE();
  auto m = smollm2_synthetic(512);
  const auto prompt = random_tokens(tf::testing::pick(1500, 600), m->config().vocab_size, 21);
  MethodRequest req;
  req.max_new_tokens = tf::testing::pick(48, 20);
  req.device_sync = [] { device_synchronize(); };
  std::map<std::string, std::vector<int32_t>> base;
  for (const std::string method : {"ar", "triforce"}) {
    req.method = method;
    req.reretrieve = method == "triforce" ? "every:16" : "never";
    base[method] = run_method(*m, req, prompt).tokens;
  }
  EXPECT_EQ(base["triforce"], base["ar"]);
  for (const int64_t on_chip : {int64_t(0), int64_t(10)}) {
    m->set_kv_offload({true, on_chip});
    for (const std::string method : {"ar", "triforce"}) {
      SCOPED_TRACE(method + " offloaded, on-chip layers " + std::to_string(on_chip));
      req.method = method;
      req.reretrieve = method == "triforce" ? "every:16" : "never";
      // Its own snapshot (the top level adopts it), a shared one (copied),
      // and a consumed one (adopted).
      EXPECT_EQ(run_method(*m, req, prompt).tokens, base[method]);
      PrefillSnapshot shared(*m, prompt);
      EXPECT_TRUE(shared.cache().offloaded() || on_chip >= m->config().num_layers);
      EXPECT_EQ(run_method(*m, req, prompt, &shared).tokens, base[method]);
      PrefillSnapshot once(*m, prompt, PhaseClock(), int64_t(prompt.size()) + req.max_new_tokens + 64);
      EXPECT_EQ(run_method_consuming(*m, req, prompt, once).tokens, base[method]);
      EXPECT_TRUE(once.cache_taken());
    }
  }
  m->set_kv_offload({});
}
