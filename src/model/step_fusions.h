// Which launches a CUDA forward step merges, each behind a process-wide
// switch so the H200 can A/B them. Every fusion is bit-identical to the ops it
// replaces (tests/gpu/test_model_step_fusions.cpp), so a switch changes time,
// never tokens.
//   stacked_gemms (TRIFORCE_STACKED_GEMMS): q/k/v and gate/up from one GEMM
//     over the stacked weights for every step of <= 32 tokens (off: for
//     one-token steps only, as before).
//   fused_rope_kv (TRIFORCE_FUSED_ROPE_KV): RoPE of q and k and the K/V cache
//     write in one launch (off: rope, then the cache write).
//   fused_add_norm (TRIFORCE_FUSED_ADD_NORM): a layer's closing residual add
//     with the next layer's RMSNorm, or the last one with the final norm, in
//     one launch (off: add, then norm).
//   persistent_step (TRIFORCE_PERSISTENT_STEP, off by default): a whole step
//     of 1..8 tokens of a small model (hidden <= 2048, one rank, the cache on
//     the device) as one persistent kernel (kernels/persistent_step.cuh), which
//     runs the per-op kernels' tiles with grid barriers between them; it
//     replaces the other three where it applies and gives their bits.
//   fused_silu_down (TRIFORCE_FUSED_SILU_DOWN, off by default: measured
//     slower, results/h200/step-pdl): with the stacked gate/up GEMM, the
//     down projection reads silu(gate) * up straight from its output,
//     computed in the skinny GEMM's input load with the silu_mul kernel's own
//     expression and rounding (one launch a layer fewer).
//   fused_combine (TRIFORCE_FUSED_COMBINE, off by default: measured slower,
//     results/h200/step-pdl and results/h100/step-fusions): decode
//     attention's combine done by the last split block of each KV head to
//     finish (an arrival counter), with the combine kernel's code: one launch
//     a layer fewer.
//   fused_norm_gemm (TRIFORCE_FUSED_NORM_GEMM, off by default: measured
//     slower, results/h100/step-fusions):
//     for steps of <= 32 tokens with the stacked GEMMs (<= 24 at a hidden size
//     of 4096: the rows must fit shared memory; a larger step of such a model
//     runs the launches below, same bits), the q/k/v and gate/up GEMMs compute their input's RMSNorm
//     (and the residual add before it) in their prologue
//     (kernels/gemm_skinny_norm.cuh), with the norm kernels' own row code: two
//     launches a layer fewer; the residual alternates between two buffers.
//     With fused_qkv_rope and fused_gate_up_silu those epilogues run in the
//     same launches (the norm, the GEMM and RoPE + the KV write, or the
//     SwiGLU, in one kernel): a layer of a step is then five launches (q/k/v,
//     attention, o, gate/up, down) where the defaults run seven.
//   fused_gate_up_silu (TRIFORCE_FUSED_GATE_UP_SILU, on by default: measured
//     faster with fused_qkv_rope, results/h100/step-fusions): the stacked
//     gate/up GEMM of a step writes silu(gate) * up itself (its tiles pair
//     gate row j with up row j, the epilogue rounds both as stored and
//     applies silu_mul's expression): no silu_mul launch.
//     Takes precedence over fused_silu_down, which then has nothing to read.
//   fused_qkv_rope (TRIFORCE_FUSED_QKV_ROPE, on by default, as above):
//     with fused_rope_kv and a device cache, the stacked q/k/v GEMM of a step
//     applies RoPE in its epilogue (its tiles pair rows j and j + head_dim / 2
//     of a head) and writes q, and k and v into the cache at the token's
//     slot, as rope_qkv_to_cache would from its output: no RoPE launch.
//   direct_single_split (TRIFORCE_DIRECT_SINGLE_SPLIT, on by default): a
//     decode attention call whose grid has one split (at most 512 slots, the
//     split size: a short context, a 68M draft's 250-slot window) has that
//     split write the output rows itself, the combine's bits from one split
//     (kernels/attention_decode_tile.cuh, SplitArgs::out): no combine launch.
//   pdl (TRIFORCE_PDL; unset: on for models of hidden size <= kPdlMaxHidden,
//     off above, as measured on the H200 in results/h200/step-pdl: 135M and
//     68M steps 12-25% faster, 7B steps about 1 ms slower): the kernels of a
//     step of <= 32 tokens launch with programmatic dependent launch, so each one's
//     launch, ramp and weight prefetch overlap the previous one's tail (in
//     eager runs and as programmatic edges in the step graphs). Every kernel
//     waits for its predecessor before it reads an activation or writes
//     anything (kernels/pdl.cuh), so the bits are those of the plain launches;
//     the kernel after an NCCL collective or a copy launches normally.
//   inputs_kernel (TRIFORCE_INPUTS_KERNEL, on by default: with the 8-warp
//     attention split, chained 68M draft steps 4% faster on an H100, the
//     other small steps 0-3%, results/h100/session-2026-12-08):
//     a CUDA step's staged inputs (ids, positions, slots, the RoPE rows, a
//     chained step's token; steps of <= 32 tokens, not prefill chunks) reach
//     the device through one kernel reading the
//     pinned staging (kernels/step_inputs.cuh) instead of two or three copy
//     nodes, and that kernel opens the PDL chain the embedding continues.
#pragma once
#include "core/env_knobs.h"  // switch_from_env

namespace tf {

struct StepFusions {
  bool stacked_gemms = true;
  bool fused_rope_kv = true;
  bool fused_add_norm = true;
  bool persistent_step = false;
  bool pdl = false;
  bool fused_silu_down = false;
  bool fused_combine = false;
  bool fused_norm_gemm = false;
  bool fused_gate_up_silu = true;
  bool fused_qkv_rope = true;
  bool direct_single_split = true;
  bool inputs_kernel = true;
};

// Every switch off: the per-op step the fusions are checked against (the
// tests' reference; aggregate initialisation would keep the defaults above).
inline StepFusions step_fusions_none() {
  StepFusions f;
  f.stacked_gemms = f.fused_rope_kv = f.fused_add_norm = false;
  f.persistent_step = f.pdl = f.fused_silu_down = f.fused_combine = false;
  f.fused_norm_gemm = f.fused_gate_up_silu = f.fused_qkv_rope = false;
  f.direct_single_split = f.inputs_kernel = false;
  return f;
}

// The defaults of models made in this process: the initialisers above, unless
// a fusion's environment variable says 0 (or 1). Read once; any other value fails with
// one line naming the variable.
const StepFusions& step_fusions_default();

// The largest hidden size whose steps launch with PDL when TRIFORCE_PDL is
// unset: SmolLM2-135M (576) and the 68M draft (768) gain, the 7B (4096) loses;
// sizes between were not measured.
inline constexpr long kPdlMaxHidden = 1024;

// The switches of a model of this hidden size: the process defaults, with pdl
// chosen by size unless TRIFORCE_PDL says 0 or 1.
StepFusions step_fusions_for(long hidden_size);


}  // namespace tf
