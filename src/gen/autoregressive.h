// Plain autoregressive generation over the full KV cache: the `ar` baseline and
// the reference every speculative method must reproduce at T = 0.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "gen/sampling.h"
#include "kv/full_cache.h"
#include "model/llama.h"

namespace tf {

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (excluding the prompt)
  double prefill_ms = 0;
  double decode_ms = 0;  // all steps after the first token
  bool stopped_at_eos = false;
};

GenerateResult generate_autoregressive(LlamaModel& model, FullKVCache& cache, const std::vector<int32_t>& prompt,
                                       int64_t max_new_tokens, const SamplingParams& sp,
                                       const std::vector<int64_t>& stop_ids);

// The decode loop alone, after a prefill run elsewhere: `cache` holds the whole
// prompt and `last_logits` [vocab] are the logits after its last token.
// prefill_ms is left 0; decode_ms as above.
GenerateResult continue_autoregressive(LlamaModel& model, FullKVCache& cache, const float* last_logits,
                                       int64_t max_new_tokens, const SamplingParams& sp,
                                       const std::vector<int64_t>& stop_ids);

// The decode loop over any forward: token i is drawn from the logits [vocab]
// after token i - 1 (last_logits for i = 0), and next(token) returns the
// logits after it (called for every token but the last).
GenerateResult decode_autoregressive(const float* last_logits, int64_t vocab, int64_t max_new_tokens,
                                     const SamplingParams& sp, const std::vector<int64_t>& stop_ids,
                                     const std::function<const float*(int32_t)>& next);

// The T = 0 loop over a forward that returns ids: token 0 is first_token, and
// next(token) returns the argmax id after it (the device's, where the model
// takes it there: no logits row leaves the device). Same stops and timing as
// decode_autoregressive.
GenerateResult decode_greedy_ids(int32_t first_token, int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                 const std::function<int32_t(int32_t)>& next);

}  // namespace tf
