// How a CUDA forward runs its prefill-shaped chunks (more than
// LlamaModel::kGraphMaxTokens rows), each behind a process-wide switch so the
// H200 can A/B them. Decode and verification steps (<= 32 rows) never read
// these: their kernels, and with them batch invariance, are untouched.
// Prefill rounds differently under each switch (cuBLAS picks its algorithm
// per shape), which no method's tokens depend on: ar and every speculative top
// level take the prompt's last token from the decode kernels.
//   stacked_gemms (TRIFORCE_PREFILL_STACKED, off by default): q/k/v as one
//     GEMM over the stacked [(H + 2KH)·D, hidden] weights and gate/up as one
//     over [2·I, hidden] (at 7B and M = 8192: 12288×4096 at 780 TFLOPS where
//     three 4096×4096 ran at ~663), into [chunk, ...] scratch made on first
//     use (chunk × ((H + 2KH)·D + 2·I) elements: 0.56 GB at 7B, chunk 8192);
//     the row-strided outputs feed the RoPE + KV write and SiLU·mul directly.
#pragma once

namespace tf {

struct PrefillOptions {
  bool stacked_gemms = false;
};

// The defaults of models made in this process: read once from the environment
// (0 or 1; any other value fails with one line naming the variable).
const PrefillOptions& prefill_options_default();

}  // namespace tf
