// The step fusions (model/step_fusions.h) change launches, never bits (ctest
// label gpu): every combination of the three switches, graphs on and off,
// gives logits bit-identical to the unfused eager forward over one sequence
// of calls: a chunked prefill (n > 32: the fused RoPE + KV write also runs
// there), steps of 1, 2, 3, 7 and 32 tokens, a call that returns only its last
// row (the fused final norm covers every row), a rollback and steps again.
// The persistent whole-step kernel (StepFusions::persistent_step) too: on with
// every switch off and with every switch on (its steps of <= 8 tokens, the
// per-op path with those switches for the 20-, 32- and 700-token calls).
// Programmatic dependent launch (StepFusions::pdl), the SiLU-mul read by the
// down projection (fused_silu_down) and the combine in the attention split
// kernel (fused_combine) too, each alone and all together, with every switch
// off and every switch on, graphs on and off; with PDL the launches must have
// overlapped. The GEMM epilogue fusions (fused_gate_up_silu: the SwiGLU in
// the gate/up GEMM; fused_qkv_rope: RoPE and the KV write in the q/k/v GEMM)
// the same way: each alone, and both with every launch switch above; the
// KV cache after the sequence must match too (the fused RoPE writes it). The
// norm-prologue GEMMs (fused_norm_gemm) alone, with PDL, and with everything
// (then the epilogues run in the norm-prologue launches themselves).
// The inputs kernel (inputs_kernel: the staged ids, slots and RoPE rows read
// from pinned memory by a kernel, not copied) with PDL, and in both all-on runs.
// The one-split attention that writes its own rows (direct_single_split) with
// the process defaults, over caches below and across 512 slots (check_direct).
// Shapes: synthetic SmolLM2-135M (bf16, head_dim 64, GQA 9/3), synthetic
// llama-68m (f16, head_dim 64, MHA), synthetic Llama-3.1-8B (bf16, head_dim
// 128, GQA 32/8), and the real SmolLM2 in f16 when the default GGUF is cached.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "default_model_path.h"
#include "core/device.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "ops/ops.h"
#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

using namespace tf;
using tf::testing::pick;
using tf::testing::tokens_for;

namespace {

// Sanitizer shapes: a 200-token prompt in chunks of 128 + 72 (kMaxChunk), the same steps after it.
const int64_t kMaxChunk = pick<int64_t>(512, 128);
const int64_t kPrompt = pick<int64_t>(700, 200);

// Slots [0, length) of every head of a device cache layer [kv_heads, capacity,
// hd], their raw bits in an f32 tensor's bytes (compared bitwise, never as
// floats). The other slots hold whatever the allocation did.
Tensor used_slots_bits(const Tensor& layer, int64_t length) {
  const int64_t KH = layer.shape[0], cap = layer.shape[1];
  const size_t head_bytes = layer.bytes() / size_t(KH), used = head_bytes / size_t(cap) * size_t(length);
  std::vector<uint8_t> all(layer.bytes());
  copy_bytes(all.data(), Device::CPU, layer.data, layer.device, all.size());
  Tensor bits = Tensor::cpu(DType::F32, {int64_t((size_t(KH) * used + 3) / 4)});
  std::memset(bits.data, 0, bits.bytes());
  for (int64_t h = 0; h < KH; ++h)
    std::memcpy(static_cast<uint8_t*>(bits.data) + size_t(h) * used, all.data() + size_t(h) * head_bytes, used);
  return bits;
}

// The logits of every call, then the final cache's K and V layers (used_slots_bits).
std::vector<Tensor> run_sequence(LlamaModel& m) {
  const int64_t V = m.config().vocab_size;
  auto cache = m.make_cache(kPrompt + 500);
  std::vector<Tensor> out;
  out.push_back(m.forward(tokens_for(kPrompt, V, 1), cache, 2));  // chunks of 512 + 188
  int64_t salt = 10;
  for (int64_t n : {1, 3, 7, 1, 32, 2, 1, 7}) out.push_back(m.forward(tokens_for(n, V, salt++), cache));
  out.push_back(m.forward(tokens_for(20, V, salt++), cache, 1));  // one logit row of 20
  cache.truncate(kPrompt + 4);
  for (int64_t n : {3, 1, 7, 1}) out.push_back(m.forward(tokens_for(n, V, salt++), cache));
  for (int64_t l = 0; l < m.config().num_layers; ++l)
    for (const Tensor& layer : {cache.layer_k(l), cache.layer_v(l)}) out.push_back(used_slots_bits(layer, cache.length()));
  return out;
}

void check(const ModelConfig& cfg, const LlamaWeights& w, const std::string& name) {
  LlamaModel ref(cfg, w, kMaxChunk);
  ref.set_cuda_graphs(false);
  ref.set_step_fusions(step_fusions_none());
  const std::vector<Tensor> want = run_sequence(ref);
  const size_t calls = want.size() - 2 * size_t(cfg.num_layers);  // then the cache's K and V layers
  // extra: 0 the three switches alone, 1 with the persistent step, 2 with PDL,
  // 3 with the fused SiLU-down, 4 with the fused combine, 5 with all three,
  // 6 with the gate/up SwiGLU epilogue, 7 with the q/k/v RoPE epilogue, 8 with
  // both and the three of 5, 9 with the norm-prologue GEMMs, 10 with those and
  // PDL, 11 with every switch of 8 and the norm prologue, 12 the inputs kernel
  // with PDL (it opens the chain; 8 and 11 run it too)
  for (int extra : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
  for (int bits = 0; bits < 8; ++bits)
    for (bool graphs : {false, true}) {
      const bool persistent = extra == 1, pdl = extra == 2 || extra == 5 || extra == 8 || extra >= 10;
      const bool inputs_kernel = extra == 8 || extra >= 11;
      const bool silu_down = extra == 3 || extra == 5 || extra == 8 || extra == 11;
      const bool combine = extra == 4 || extra == 5 || extra == 8 || extra == 11;
      const bool gate_up_silu = extra == 6 || extra == 8 || extra == 11;
      const bool qkv_rope = extra == 7 || extra == 8 || extra == 11, norm_gemm = extra >= 9 && extra <= 11;
      StepFusions f = step_fusions_none();
      f.stacked_gemms = bits & 1, f.fused_rope_kv = bits & 2, f.fused_add_norm = bits & 4;
      f.persistent_step = persistent;
      f.pdl = pdl;
      f.fused_silu_down = silu_down;
      f.fused_combine = combine;
      f.fused_gate_up_silu = gate_up_silu;
      f.fused_qkv_rope = qkv_rope;
      f.fused_norm_gemm = norm_gemm;
      f.inputs_kernel = inputs_kernel;
      if (bits == 0 && !graphs && extra == 0) continue;  // the reference itself
      if (extra != 0 && bits != 0 && bits != 7) continue;
      // Sanitizer shapes: every kernel variant under the tool, not every mix's bits (the full suite checks
      // those): the three switches each alone and together, eager; graphs with none, all, the fused ones
      // together (8) and with the norm prologue (11); each extra once, eager, with all three switches.
      if (tf::testing::sanitizer_shapes()) {
        if (bits == 3 || bits == 5 || bits == 6) continue;
        if (graphs && !((extra == 0 && (bits == 0 || bits == 7)) || extra == 8 || extra == 11)) continue;
        if (extra != 0 && bits != 7) continue;
      }
      const int64_t overlapped = ops::step_overlapped_launches(), inputs_launches = ops::step_inputs_launches();
      LlamaModel m(cfg, w, kMaxChunk);
      m.set_cuda_graphs(graphs);
      m.set_step_fusions(f);
      const std::vector<Tensor> got = run_sequence(m);
      const std::string what = name + " stacked=" + std::to_string(f.stacked_gemms) + " rope_kv=" +
                               std::to_string(f.fused_rope_kv) + " add_norm=" + std::to_string(f.fused_add_norm) +
                               " graphs=" + std::to_string(graphs) + " persistent=" + std::to_string(persistent) +
                               " pdl=" + std::to_string(pdl) + " silu_down=" + std::to_string(silu_down) +
                               " combine=" + std::to_string(combine) + " gate_up_silu=" +
                               std::to_string(gate_up_silu) + " qkv_rope=" + std::to_string(qkv_rope) +
                               " norm_gemm=" + std::to_string(norm_gemm) +
                               " inputs_kernel=" + std::to_string(inputs_kernel);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].shape, want[i].shape) << what << " call " << i;
        for (int64_t j = 0; i < calls && j < got[i].numel(); ++j)  // the cache bits are no floats
          ASSERT_TRUE(std::isfinite(got[i].ptr<float>()[j])) << what << " call " << i << " element " << j;
        EXPECT_EQ(std::memcmp(got[i].data, want[i].data, got[i].bytes()), 0)
            << what << ": " << (i < calls ? "call " + std::to_string(i) : "cache layer " + std::to_string(i - calls))
            << " differs from the unfused forward";
      }
      if (graphs) EXPECT_GT(m.step_graphs().replays(), 0) << what << ": no graph was replayed";
      // Eager only: the persistent step never runs from the step graphs (model/persistent_step.cpp).
      if (persistent && !graphs && m.persistent_step_unsupported().empty())
        EXPECT_GT(m.persistent_steps(), 0) << what << ": the persistent step never ran";
      if (pdl) EXPECT_GT(ops::step_overlapped_launches(), overlapped) << what << ": no launch overlapped";
      if (inputs_kernel) {
        EXPECT_GT(ops::step_inputs_launches(), inputs_launches) << what << ": the inputs kernel never ran";
      } else {
        EXPECT_EQ(ops::step_inputs_launches(), inputs_launches) << what << ": the inputs kernel ran while off";
      }
      // Every model here has steps the norm-prologue kernel takes (the 8B's n = 32 step is not one of
      // them: it runs the two launches, whose bits the comparison above checks all the same).
      if (norm_gemm) {
        EXPECT_GT(m.norm_gemm_chunks(), 0) << what << ": no step ran the norm-prologue GEMMs";
      } else {
        EXPECT_EQ(m.norm_gemm_chunks(), 0) << what << ": the norm-prologue GEMMs ran while switched off";
      }
      // With both epilogues (and the stacked GEMMs and RoPE to the cache they need) the norm-prologue
      // GEMMs run them in the same launch; without them, never.
      if (norm_gemm && gate_up_silu && qkv_rope && bits == 7) {
        EXPECT_GT(m.norm_epilogue_chunks(), 0) << what << ": no norm-prologue GEMM ran an epilogue";
      } else if (!norm_gemm || (!gate_up_silu && !qkv_rope)) {
        EXPECT_EQ(m.norm_epilogue_chunks(), 0) << what << ": a norm-prologue epilogue ran while switched off";
      }
    }
}

// StepFusions::direct_single_split: with a cache of at most 512 slots (one
// attention split) the split kernel writes the rows and no combine runs. Short
// prompts, steps that stay under 512 slots and steps that cross it (a verify of
// 32 tokens from 500), graphs on and off, the process defaults otherwise: the
// same logits and cache as with the combine always launched.
void check_direct(const ModelConfig& cfg, const LlamaWeights& w, const std::string& name) {
  auto sequence = [&](LlamaModel& m) {
    const int64_t V = m.config().vocab_size;
    std::vector<Tensor> out;
    for (int64_t prompt : {int64_t(40), int64_t(480)}) {
      auto cache = m.make_cache(prompt + 100);
      out.push_back(m.forward(tokens_for(prompt, V, 1), cache, 1));
      int64_t salt = 10;
      for (int64_t n : {1, 3, 7, 1, 32, 2, 1}) out.push_back(m.forward(tokens_for(n, V, salt++), cache));
      cache.truncate(prompt + 2);
      for (int64_t n : {7, 1}) out.push_back(m.forward(tokens_for(n, V, salt++), cache));
      for (int64_t l = 0; l < m.config().num_layers; ++l)
        for (const Tensor& layer : {cache.layer_k(l), cache.layer_v(l)})
          out.push_back(used_slots_bits(layer, cache.length()));
    }
    return out;
  };
  StepFusions off = step_fusions_for(cfg.hidden_size);
  off.direct_single_split = false;
  LlamaModel ref(cfg, w, kMaxChunk);
  ref.set_cuda_graphs(false);
  ref.set_step_fusions(off);
  const std::vector<Tensor> want = sequence(ref);
  for (bool graphs : {false, true}) {
    StepFusions on = off;
    on.direct_single_split = true;
    LlamaModel m(cfg, w, kMaxChunk);
    m.set_cuda_graphs(graphs);
    m.set_step_fusions(on);
    const int64_t direct_before = ops::attention_direct_launches();
    const std::vector<Tensor> got = sequence(m);
    const std::string what = name + " direct_single_split graphs=" + std::to_string(graphs);
    EXPECT_GT(ops::attention_direct_launches(), direct_before) << what << ": no call wrote its rows from its one split";
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape, want[i].shape) << what << " output " << i;
      EXPECT_EQ(std::memcmp(got[i].data, want[i].data, got[i].bytes()), 0)
          << what << ": output " << i << " differs from the combine's";
    }
  }
}

}  // namespace

TEST(ModelStepFusions, DirectSingleSplitBitIdentical) {
  REQUIRE_DEVICE();
  for (const char* name : {"synthetic:smollm2-135m", "synthetic:llama-68m", "synthetic:llama3.1-8b"}) {
    const ModelConfig cfg = synthetic_config(name);
    const DType dt = std::string(name) == "synthetic:llama-68m" ? DType::F16 : DType::BF16;
    check_direct(cfg, synthetic_weights(cfg, Device::CUDA, dt, 7), name);
  }
}

TEST(ModelStepFusions, EveryCombinationBitIdenticalSyntheticSmolLM2Bf16) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  check(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16, 3), "synthetic smollm2 bf16");
}

TEST(ModelStepFusions, EveryCombinationBitIdenticalSyntheticLlama68mF16) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:llama-68m");
  check(cfg, synthetic_weights(cfg, Device::CUDA, DType::F16, 4), "synthetic llama-68m f16");
}

TEST(ModelStepFusions, EveryCombinationBitIdenticalSyntheticLlama31_8B) {
  REQUIRE_DEVICE();
  const ModelConfig cfg = synthetic_config("synthetic:llama3.1-8b");
  check(cfg, synthetic_weights(cfg, Device::CUDA, DType::BF16, 6), "synthetic llama3.1-8b bf16");
}

TEST(ModelStepFusions, EveryCombinationBitIdenticalSmolLM2F16) {
  REQUIRE_DEVICE();
  const std::string path = default_model_gguf();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "the default model is not cached";
  Checkpoint ck = open_checkpoint(path);
  check(ck.config, upload_weights(LlamaWeights::load(*ck.weights, ck.config), Device::CUDA, DType::F16), "SmolLM2 f16");
}
