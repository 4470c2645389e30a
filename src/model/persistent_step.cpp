// LlamaModel's side of the persistent whole-step kernel
// (kernels/persistent_step.cuh): when a chunk takes it, and the chunk as one
// launch over the model's own scratch, cache and weights. Bit-identical to the
// per-op run_chunk (tests/gpu/test_persistent_step.cpp), so the switch
// (StepFusions::persistent_step) changes time, never tokens.
#include <algorithm>
#include <vector>

#include "core/device.h"
#include "model/llama.h"
#include "model/persistent_step.h"
#include "ops/ops.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "persistent_step.cuh"
#include "stream.cuh"
#endif

namespace tf {

namespace {
// "Small": where a step is bound by launches rather than bytes. SmolLM2-135M
// is 0.27 GB in bf16, the 68M draft 0.14 GB.
constexpr double kMaxWeightBytes = 2e9;
}  // namespace

#ifdef TRIFORCE_HAVE_CUDA

std::string persistent_step_unsupported_for(const ModelConfig& cfg, const LlamaWeights& w, DType dt) {
  if (w.shard.size != 1) return "tensor parallel";
  if (const char* why = cuda::persistent_step_unsupported(cfg.hidden_size, w.local_intermediate, w.local_heads,
                                                          w.local_kv_heads, cfg.head_dim, dt))
    return why;
  if (double(cfg.param_count()) * 2.0 > kMaxWeightBytes) return "weights above 2 GB";
  if (w.lm_head.dim(0) != cfg.vocab_size) return "lm_head holds part of the vocabulary (vocab-parallel, or a draft's reduced vocabulary)";
  for (const LayerWeights& L : w.layers)
    if (!L.wqkv.data || !L.w_gate_up.data) return "no stacked q/k/v and gate/up weights";
  return "";
}

bool LlamaModel::persistent_applies(int64_t n, const FullKVCache& cache) const {
  // Eager steps only: on the H200 the cooperative launch was not replayed from the step graphs, and the
  // graph-replayed per-op step (0.80 ms for SmolLM2-135M) beat the persistent one (1.09 ms);
  // results/h200/step-latency/persistent.md.
  return device_ == Device::CUDA && fusions_.persistent_step && !graphs_on_ && pstep_unsupported_.empty() &&
         n <= kPersistentMaxTokens && n <= qkv_.shape[0] && !capture_q_ && !cache.offloaded() && !proj32_.data;
}

void LlamaModel::run_persistent(int64_t n, FullKVCache& cache, int64_t out_from, RowsOut out,
                                const GraphLaunch* g) {
  static_assert(kPersistentMaxTokens == cuda::kPersistentMaxTokens, "one bound for the model and the kernel");
  const int64_t H = w_.local_heads, KH = w_.local_kv_heads, D = cfg_.head_dim, half = D / 2;
  const int64_t L = cfg_.num_layers;
  // Lazy device state: the layer table (rebuilt if the weights moved, as in a
  // copied model), the barrier words (zero), the second residual buffer.
  if (pstep_layers_for_ != w_.embed.data) {
    std::vector<cuda::PersistentLayer> table(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
      const LayerWeights& W = w_.layers[size_t(l)];
      cuda::PersistentLayer& t = table[size_t(l)];
      t.attn_norm = W.attn_norm.data, t.wqkv = W.wqkv.data, t.wo = W.wo.data;
      t.mlp_norm = W.mlp_norm.data, t.w_gate_up = W.w_gate_up.data, t.w_down = W.w_down.data;
    }
    const size_t bytes = table.size() * sizeof(cuda::PersistentLayer);
    pstep_layers_ = empty_tensor(device_, DType::I32, {int64_t((bytes + 3) / 4)});
    copy_bytes(pstep_layers_.data, device_, table.data(), Device::CPU, bytes);
    pstep_layers_for_ = w_.embed.data;
  }
  if (!pstep_barrier_.data) {  // the grid barrier's 2 words, then a counter per KV head; all zero
    const std::vector<int32_t> zero(size_t(2 + KH), 0);
    pstep_barrier_ = empty_tensor(device_, DType::I32, {2 + KH});
    copy_bytes(pstep_barrier_.data, device_, zero.data(), Device::CPU, zero.size() * sizeof(int32_t));
  }
  if (!pstep_x_.data) pstep_x_ = empty_tensor(device_, dtype_, {std::min(max_chunk_, kPersistentMaxTokens), cfg_.hidden_size});

  // The cache's layers must sit at equal strides (one base pointer + a stride in the kernel).
  const Tensor k0 = cache.layer_k(0), v0 = cache.layer_v(0);
  const int64_t esz = int64_t(dtype_size(dtype_));
  const int64_t stride = L > 1 ? (static_cast<const uint8_t*>(cache.layer_k(1).data) -
                                  static_cast<const uint8_t*>(k0.data)) / esz
                               : 0;
  for (int64_t l = 1; l < L; ++l)
    TF_CHECK(static_cast<const uint8_t*>(cache.layer_k(l).data) == static_cast<const uint8_t*>(k0.data) + l * stride * esz &&
                 static_cast<const uint8_t*>(cache.layer_v(l).data) == static_cast<const uint8_t*>(v0.data) + l * stride * esz,
             "persistent step: the KV cache's layers are not equally spaced");

  // The splits the per-op attention would launch: for the graph's bucket, or the length.
  const int64_t split = attn_split_;
  const int64_t bound = std::min(g ? g->grid_slots : std::max<int64_t>(1, cache.length()), cache.capacity());
  const int max_splits = int((std::max<int64_t>(1, bound) + split - 1) / split);
  const size_t ws = cuda::persistent_step_workspace_bytes(n, H, D, max_splits);
  if (size_t(attn_ws_.bytes()) < ws) {
    TF_CHECK(!g, "persistent step: the graph's attention workspace is too small");
    graphs_.clear();  // every graph points at the old scratch
    attn_ws_ = empty_tensor(device_, DType::F32, {int64_t((std::max(ws, 2 * size_t(attn_ws_.bytes())) + 3) / 4)});
  }

  const int64_t qkv_ld = (H + 2 * KH) * D;
  cuda::PersistentStepParams p;
  p.layers = static_cast<const cuda::PersistentLayer*>(pstep_layers_.data);
  p.num_layers = int(L);
  p.embed = w_.embed.data, p.final_norm = w_.final_norm.data, p.lm_head = w_.lm_head.data;
  p.hidden = cfg_.hidden_size, p.inter = w_.local_intermediate, p.heads = H, p.kv_heads = KH, p.head_dim = D;
  p.vocab_rows = w_.lm_head.dim(0);
  p.eps = float(cfg_.rms_norm_eps);
  p.n = int(n);
  p.out_from = out ? int(out_from) : int(n);
  p.tokens = ints_.ptr<int32_t>();
  // RoPE + KV write exactly as ops::rope_qkv_to_cache sets it up in run_chunk.
  cuda::RopeQkvParams& r = p.rope;
  uint8_t* qkv = static_cast<uint8_t*>(qkv_.data);
  r.q = qkv, r.k = qkv + size_t(H * D * esz), r.v = qkv + size_t((H + KH) * D * esz);
  r.q_ld = r.k_ld = r.v_ld = qkv_ld;
  r.q_out = q_.data, r.k_out = k0.data, r.v_out = v0.data;
  r.out_head_stride = k0.shape[1] * D, r.out_slot_stride = D;
  r.slots = ints_.ptr<int32_t>() + 2 * n, r.slot_limit = k0.shape[1];
  r.cos = dcossin_.ptr<float>(), r.sin = dcossin_.ptr<float>() + n * half;
  r.rows = rows_.ptr<int32_t>(), r.table_rows = n;
  r.n = n, r.q_heads = H, r.kv_heads = KH, r.head_dim = D, r.dtype = dtype_;
  p.kv_layer_stride = stride;
  p.capacity = cache.capacity();
  p.kv_length = cache.view(0).dev_length;
  p.split_slots = split;
  p.max_splits = max_splits;
  p.x[0] = x_.data, p.x[1] = pstep_x_.data;
  p.qkv = qkv_.data, p.q = q_.data, p.att = att_.data, p.proj = proj_.data, p.gu = gu_.data;
  p.workspace = attn_ws_.ptr<float>(), p.workspace_bytes = size_t(attn_ws_.bytes());
  p.logits = dlogits_.ptr<float>();
  const bool head_outside = !cuda::persistent_step_lm_head() && p.out_from < n;
  if (head_outside) p.xn_out = xn_.data;  // rows [out_from, n) of the final norm, at row 0
  p.barrier = reinterpret_cast<unsigned*>(pstep_barrier_.data);
  p.counters = p.barrier + 2;
  p.fused_attention = cuda::persistent_step_fused_attention();
  p.direct_single_split = fusions_.direct_single_split;
  p.dtype = dtype_;
  cuda::persistent_step(p, cuda::compute_stream());
  ++persistent_steps_;

  if (p.out_from < n) {
    const int64_t V = w_.lm_head.dim(0);
    if (head_outside) {  // the per-op lm_head on the kernel's final-norm rows
      Tensor xo = ops::slice_rows(xn_, 0, n - out_from), lg = dlogits_;
      lg.shape = {n - out_from, V};
      ops::linear(xo, w_.lm_head, lg);
    }
    if (out.device) return;  // the rows stay in dlogits_ for forward_distributions
    if (out.ids) {  // the rows' argmax on the device: only the ids come back
      argmax_rows(0, n - out_from);
      const size_t bytes = size_t(n - out_from) * sizeof(int32_t);
      if (g) copy_bytes_async(out.ids, Device::CPU, dids_.data, Device::CUDA, bytes);
      else copy_bytes(out.ids, Device::CPU, dids_.data, Device::CUDA, bytes);
      return;
    }
    const size_t bytes = size_t(n - out_from) * size_t(V) * sizeof(float);
    if (g) copy_bytes_async(out.logits, Device::CPU, dlogits_.data, Device::CUDA, bytes);
    else copy_bytes(out.logits, Device::CPU, dlogits_.data, Device::CUDA, bytes);
  }
}

#else  // built without CUDA: never applies

std::string persistent_step_unsupported_for(const ModelConfig&, const LlamaWeights&, DType) {
  return "built without CUDA";
}
bool LlamaModel::persistent_applies(int64_t, const FullKVCache&) const { return false; }
void LlamaModel::run_persistent(int64_t, FullKVCache&, int64_t, RowsOut, const GraphLaunch*) {
  TF_FAIL("persistent step: built without CUDA");
}

#endif

}  // namespace tf
