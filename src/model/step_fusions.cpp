#include "model/step_fusions.h"

#include <cstdlib>
#include <string>

#include "core/check.h"

namespace tf {

const StepFusions& step_fusions_default() {
  static const StepFusions f = [] {
    StepFusions d;
    d.stacked_gemms = switch_from_env("TRIFORCE_STACKED_GEMMS", d.stacked_gemms);
    d.fused_rope_kv = switch_from_env("TRIFORCE_FUSED_ROPE_KV", d.fused_rope_kv);
    d.fused_add_norm = switch_from_env("TRIFORCE_FUSED_ADD_NORM", d.fused_add_norm);
    d.persistent_step = switch_from_env("TRIFORCE_PERSISTENT_STEP", d.persistent_step);
    d.pdl = switch_from_env("TRIFORCE_PDL", d.pdl);
    d.fused_silu_down = switch_from_env("TRIFORCE_FUSED_SILU_DOWN", d.fused_silu_down);
    d.fused_combine = switch_from_env("TRIFORCE_FUSED_COMBINE", d.fused_combine);
    d.fused_norm_gemm = switch_from_env("TRIFORCE_FUSED_NORM_GEMM", d.fused_norm_gemm);
    d.fused_gate_up_silu = switch_from_env("TRIFORCE_FUSED_GATE_UP_SILU", d.fused_gate_up_silu);
    d.fused_qkv_rope = switch_from_env("TRIFORCE_FUSED_QKV_ROPE", d.fused_qkv_rope);
    d.direct_single_split = switch_from_env("TRIFORCE_DIRECT_SINGLE_SPLIT", d.direct_single_split);
    d.inputs_kernel = switch_from_env("TRIFORCE_INPUTS_KERNEL", d.inputs_kernel);
    return d;
  }();
  return f;
}

StepFusions step_fusions_for(long hidden_size) {
  StepFusions f = step_fusions_default();
  static const bool pdl_forced = [] {
    const char* s = std::getenv("TRIFORCE_PDL");
    return s && *s;
  }();
  if (!pdl_forced) f.pdl = hidden_size <= kPdlMaxHidden;
  return f;
}

}  // namespace tf
