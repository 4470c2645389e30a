#include "model/cpu_f16_linears.h"

#include <cstdlib>
#include <string>

#include "core/check.h"
#include "core/half.h"

namespace tf {

namespace {

void to_f16(Tensor& t, const char* what) {
  if (t.data == nullptr || t.dtype == DType::F16) return;
  TF_CHECK(t.device == Device::CPU && t.dtype == DType::F32,
           "cpu_f16_linears: " << what << " is " << dtype_name(t.dtype) << " on the "
                               << (t.device == Device::CPU ? "CPU" : "GPU") << ", expected f32 on the CPU");
  Tensor h = Tensor::cpu(DType::F16, t.shape);
  const float* src = t.ptr<float>();
  uint16_t* dst = h.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = f32_to_f16(src[i]);
  t = std::move(h);
}

}  // namespace

void cpu_f16_linears(LlamaWeights& w) {
  for (LayerWeights& L : w.layers) {
    TF_CHECK(L.wqkv.data == nullptr && L.w_gate_up.data == nullptr,
             "cpu_f16_linears: stacked q/k/v or gate/up weights are a CUDA upload's, not a CPU model's");
    to_f16(L.wq, "wq");
    to_f16(L.wk, "wk");
    to_f16(L.wv, "wv");
    to_f16(L.wo, "wo");
    to_f16(L.w_gate, "w_gate");
    to_f16(L.w_up, "w_up");
    to_f16(L.w_down, "w_down");
  }
  if (w.lm_head.data != w.embed.data) to_f16(w.lm_head, "lm_head");  // a tied or borrowed whole head stays shared
}

bool cpu_draft_f16_enabled() {
  const char* v = std::getenv("TRIFORCE_CPU_DRAFT_F16");
  return !v || std::string(v) != "0";
}

}  // namespace tf
