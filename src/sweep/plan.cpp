#include "sweep/plan.h"

#include <algorithm>

namespace tf::sweep {

namespace {

double kv_per_token(const ModelConfig& c, int64_t layers, double elem) {
  return 2.0 * double(layers) * double(c.kv_dim()) * elem;
}

int64_t layerskip_k(const ModelConfig& t, const std::string& draft) {
  if (draft.rfind("layerskip:", 0) == 0) return std::max<int64_t>(1, std::atoll(draft.c_str() + 10));
  return std::max<int64_t>(1, t.num_layers / 4);
}

}  // namespace

MemoryPlan memory_plan(const ModelConfig& t, const Point& p, const Throughput& tp, const ModelConfig* draft_cfg) {
  MemoryPlan m;
  const double e = tp.elem_bytes;
  const double kv = kv_per_token(t, t.num_layers, e);
  const int64_t g1 = std::max<int64_t>(p.gamma1, 4), g2 = std::max<int64_t>(p.gamma2, 6);
  const int64_t room = g1 + g2 + 8;
  // run_method's default budget: a quarter of the prompt in whole chunks, at most 4096.
  const int64_t C = p.chunk > 0 ? p.chunk : 8;
  const int64_t B = p.budget > 0 ? p.budget : C * std::clamp<int64_t>((p.context - 1) / (4 * C), 1, 4096 / C);
  m.weights = double(t.param_count()) * e;
  m.full_kv = kv * double(p.context + p.max_new + room);
  m.snapshot = kv * double(p.context);
  const MethodParams mp = method_params(p.method);
  if (p.method == "retrieval" || p.method == "triforce" || p.method == "ngram-triforce")
    m.levels += kv * double(B + p.max_new + room);  // retrieval cache + its tail
  if (p.method == "streaming-hier") m.levels += kv * double(B + room);
  if (mp.draft && p.draft.rfind("ngram:", 0) != 0 && p.method != "ngram-triforce") {
    const bool streaming = mp.streaming;
    const int64_t slots = streaming ? std::max<int64_t>(p.sink, 16) + std::max<int64_t>(p.window, 256) + room
                                    : p.context + p.max_new + room;
    if (draft_cfg) {
      m.draft_weights = double(draft_cfg->param_count()) * e;
      m.levels += kv_per_token(*draft_cfg, draft_cfg->num_layers, e) * double(slots);
    } else {  // layer skip: the target's first K layers, weights shared
      m.levels += kv_per_token(t, layerskip_k(t, p.draft), e) * double(slots);
    }
  }
  // The forward's scratch over a 512-token chunk, and the logits rows of a verify.
  m.scratch = 512.0 * double(t.hidden_size * 4 + t.intermediate_size * 3 + t.vocab_size) * 4.0;
  return m;
}

double estimate_prefill_s(const ModelConfig& t, int64_t context, const Throughput& tp) {
  const double P = double(t.param_count()), n = double(context);
  const double attn = 2.0 * double(t.num_layers) * n * n * double(t.num_heads * t.head_dim);  // QK^T and PV, causal
  return (2.0 * P * n + attn) / tp.flops;
}

double estimate_decode_s(const ModelConfig& t, const Point& p, const Throughput& tp) {
  const double weights = double(t.param_count()) * tp.elem_bytes;
  const double kv = kv_per_token(t, t.num_layers, tp.elem_bytes);
  const double per_token = (weights + kv * double(p.context + p.max_new / 2)) / tp.bytes_per_s;
  return per_token * double(p.max_new);
}

}  // namespace tf::sweep
