// The StreamingDrafter's prompt-absorption shortcut on CUDA: the same
// argument as on the CPU (tests/unit/test_streaming_absorb.cpp) holds with
// deterministic kernels in the same shapes, so the cache after begin() must
// be bit for bit the chunk-by-chunk one: every K and V element of every
// layer, head and slot, the positions, the length and the eviction count. On
// synthetic:llama-68m (the paper's draft shape) and on a 2-layer layer skip of
// synthetic:smollm2-135m (GQA), bf16, at a few thousand prompt tokens.
#include <gtest/gtest.h>

#include <cstring>

#include "core/device.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "sanitizer_shapes.h"
#include "random_data.h"
#include "speculative/streaming_drafter.h"

using namespace tf;
using namespace tf::speculative;

namespace {

std::vector<uint8_t> host_bytes(const Tensor& t) {
  std::vector<uint8_t> h(t.bytes());
  copy_bytes(h.data(), Device::CPU, t.data, t.device, h.size());
  return h;
}

void expect_same_cache(const StreamingDrafter& a, const StreamingDrafter& b, const std::string& what) {
  const FullKVCache& x = a.streaming().cache();
  const FullKVCache& y = b.streaming().cache();
  ASSERT_EQ(x.length(), y.length()) << what;
  EXPECT_EQ(a.evicted(), b.evicted()) << what;
  for (int64_t j = 0; j < x.length(); ++j) ASSERT_EQ(x.position(j), y.position(j)) << what << " slot " << j;
  const size_t row = size_t(x.head_dim()) * dtype_size(x.dtype());
  for (int64_t l = 0; l < x.num_layers(); ++l) {
    const auto xk = host_bytes(x.layer_k(l)), yk = host_bytes(y.layer_k(l));
    const auto xv = host_bytes(x.layer_v(l)), yv = host_bytes(y.layer_v(l));
    for (int64_t h = 0; h < x.num_kv_heads(); ++h)
      for (int64_t j = 0; j < x.length(); ++j) {
        const size_t off = (size_t(h) * size_t(x.capacity()) + size_t(j)) * row;
        ASSERT_EQ(std::memcmp(xk.data() + off, yk.data() + off, row), 0)
            << what << ": K of layer " << l << " head " << h << " slot " << j;
        ASSERT_EQ(std::memcmp(xv.data() + off, yv.data() + off, row), 0)
            << what << ": V of layer " << l << " head " << h << " slot " << j;
      }
  }
}

void check_model(LlamaModel& m, const std::string& name) {
  for (auto [sink, window] : std::vector<std::pair<int64_t, int64_t>>{{16, 234}, {4, 60}, {64, 32}}) {
    // Sanitizer shapes: one eviction just past the first full cache, and a few more off the window's grid.
    for (int64_t absorbed : tf::testing::grid<int64_t>({3000, 12 * window, 17 * window + 5},
                                                        {sink + window + 7, 3 * window + 5})) {
      for (bool reindex : {true, false}) {
        const auto prompt = tf::testing::tokens_for(absorbed + 1, m.config().vocab_size, absorbed + window);
        StreamingDrafter fast(m, sink, window, 16, reindex), slow(m, sink, window, 16, reindex);
        slow.set_fast_absorb(false);
        fast.begin(prompt);
        slow.begin(prompt);
        const std::string what = name + ", sink " + std::to_string(sink) + ", window " + std::to_string(window) + ", " +
                                 std::to_string(absorbed) + " tokens, reindex " + std::to_string(reindex);
        // The shortcut saves forwards only past a few windows (the full grid);
        // the sanitizer shapes are too short to, and must not cost more.
        if (window > sink && !tf::testing::sanitizer_shapes()) EXPECT_LT(fast.forwards(), slow.forwards()) << what;
        EXPECT_LE(fast.forwards(), slow.forwards()) << what;
        expect_same_cache(fast, slow, what);
        SamplingParams sp;
        RngStream r1{1, 0}, r2{1, 0};
        EXPECT_EQ(fast.propose(prompt, 4, sp, r1).tokens, slow.propose(prompt, 4, sp, r2).tokens) << what;
        std::printf("[ absorb   ] %s: %lld forwards instead of %lld, identical\n", what.c_str(),
                    (long long)fast.forwards() - 4, (long long)slow.forwards() - 4);
      }
    }
  }
}

}  // namespace

TEST(StreamingAbsorbGpu, ShortcutIsBitIdenticalOnLlama68m) {
  REQUIRE_DEVICE();
  const ModelConfig c = synthetic_config("synthetic:llama-68m");
  LlamaModel m(c, synthetic_weights(c, Device::CUDA, DType::BF16, kSyntheticDraftSeed), 2048);
  check_model(m, "synthetic:llama-68m bf16");
}

TEST(StreamingAbsorbGpu, ShortcutIsBitIdenticalOnALayerSkip) {
  REQUIRE_DEVICE();
  const ModelConfig c = synthetic_config("synthetic:smollm2-135m");
  LlamaModel target(c, synthetic_weights(c, Device::CUDA, DType::BF16, 3), 2048);
  LlamaModel skip = make_layer_skip_model(target, 2);
  check_model(skip, "layerskip:2 of synthetic:smollm2-135m bf16");
}
