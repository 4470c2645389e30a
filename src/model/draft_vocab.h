// A draft's reduced vocabulary (FR-Spec): its lm_head holds only the rows of K
// token ids (the most frequent in the target's own generations), stored with
// the draft as the tensor `triforce_draft_vocab` (I32 [K], strictly increasing).
// The forward still returns a whole-vocabulary logits row, -inf outside the
// set, so the draft's q is exactly 0 there and every level, sampler and
// verifier stays generic: rejection sampling accepts a proposal x with
// min(1, p(x)/q(x)) and resamples from norm(max(p - q, 0)), which puts all of
// p's mass outside the set back in, so the output is still exactly p at every T
// (and at T = 0 the target's argmax, whatever the draft proposed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/weight_source.h"
#include "model/weights.h"

namespace tf {

inline constexpr const char* kDraftVocabTensor = "triforce_draft_vocab";

// Why `ids` is not a valid reduced vocabulary of a `vocab`-token model (one
// line naming the first bad entry), or "" when it is: at least one id, ids in
// [0, vocab), strictly increasing (sorted and unique).
std::string draft_vocab_error(const std::vector<int64_t>& ids, int64_t vocab);

// Reads and validates the tensor (1-D, stored as I32, then draft_vocab_error);
// a one-line tf::Error naming the file and tensor otherwise.
std::vector<int32_t> read_draft_vocab(const WeightSource& src, int64_t vocab);

// Replaces w.lm_head (the whole vocabulary's rows) by its rows at w.head_ids,
// on the head's device and in its dtype (a gather: bit-identical rows).
void restrict_head(LlamaWeights& w);

// [n, K] logits of the restricted head -> [n, vocab] rows, -inf outside the set.
Tensor expand_restricted_logits(const Tensor& logits_k, const std::vector<int32_t>& ids, int64_t vocab);

}  // namespace tf
