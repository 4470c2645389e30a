// A draft that stores no embedding and borrows its target's
// (config.json: triforce_shared_embedding, model/config.h SharedEmbedding).
// The target's model.embed_tokens.weight is the draft's embedding and, tied,
// its output head; the draft keeps only its layers and final norm, so the
// SmolLM2 draft is 14 MB instead of 70. The borrowed tensor is the target's own
// (host f32, or the device copy in the target's dtype): no second copy.
#pragma once
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace tf {

// Why the draft (config `draft`, read from `draft_path`) does not fit the
// target, as one line, or "" when it does: the target's config fields the
// marker names, the vocabulary and hidden size, and the fingerprint (the L2
// norm of each listed embedding row within kFingerprintTolerance, relative;
// the target may be Q4_1 or bf16 where the draft was trained on f32).
std::string shared_embedding_mismatch(const ModelConfig& draft, const std::string& draft_path,
                                      const ModelConfig& target, const LlamaWeights& target_weights);
constexpr double kFingerprintTolerance = 0.03;

// Points the draft's embedding and lm_head at the target's embedding after
// checking that it fits (one-line tf::Error naming the draft otherwise). The
// draft's other weights must already be on the target's device and dtype.
void borrow_target_embedding(LlamaWeights& draft, const ModelConfig& draft_cfg, const std::string& draft_path,
                             const ModelConfig& target_cfg, const LlamaWeights& target_weights);

}  // namespace tf
