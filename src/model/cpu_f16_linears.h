// A draft's linears kept as f16 on the CPU. A CPU decode step reads every
// weight once, so its time is its bytes: a 2-layer draft with a 16,384-id head
// reads 66 MB a token in f32 and half that in f16. ops::linear widens f16
// exactly (cpu/skinny_cpu.h), so weights that came from an f16 checkpoint give
// the f32 model's bits; rows gathered from an f32 tensor (a borrowed
// embedding's head) are rounded to the nearest f16, which moves the draft's
// logits slightly. Only the draft's: a verifier's distributions are the
// target's own, so every method's output is unchanged (exact at any T).
#pragma once
#include "model/weights.h"

namespace tf {

// Converts every layer linear (q, k, v, o, gate, up, down) and the lm_head of
// CPU f32 weights to f16 tensors; norms and the embedding stay f32, and so
// does a head that is the embedding's own storage (tied, or borrowed whole
// from the target: no second copy of the vocabulary).
void cpu_f16_linears(LlamaWeights& w);

// TRIFORCE_CPU_DRAFT_F16: unset or 1 (default) keeps a CPU draft's linears in
// f16, 0 in f32 (the A/B).
bool cpu_draft_f16_enabled();

}  // namespace tf
