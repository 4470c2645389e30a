#include "gen/autoregressive.h"

#include <algorithm>
#include <chrono>

namespace tf {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
// Token 0 is `first`, token i + 1 = next(token i); stops after a stop id or max_new_tokens.
GenerateResult decode_loop(int64_t max_new_tokens, const std::vector<int64_t>& stop_ids, int32_t first,
                           const std::function<int32_t(int32_t)>& next) {
  GenerateResult r;
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  auto t1 = std::chrono::steady_clock::now();
  int32_t tok = first;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    r.tokens.push_back(tok);
    if (is_stop(tok)) {
      r.stopped_at_eos = true;
      break;
    }
    if (i + 1 == max_new_tokens) break;
    if (i == 0) t1 = std::chrono::steady_clock::now();
    tok = next(tok);
  }
  r.decode_ms = r.tokens.size() > 1 ? ms_since(t1) : 0.0;
  return r;
}
}  // namespace

GenerateResult generate_autoregressive(LlamaModel& model, FullKVCache& cache, const std::vector<int32_t>& prompt,
                                       int64_t max_new_tokens, const SamplingParams& sp,
                                       const std::vector<int64_t>& stop_ids) {
  TF_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  TF_CHECK(int64_t(prompt.size()) + max_new_tokens <= cache.capacity(),
           "generate: prompt (" << prompt.size() << ") + --max-new-tokens (" << max_new_tokens
                                << ") exceeds the KV capacity " << cache.capacity());
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model.forward(prompt, cache, 1);
  const double prefill_ms = ms_since(t0);
  GenerateResult r = continue_autoregressive(model, cache, logits.ptr<float>(), max_new_tokens, sp, stop_ids);
  r.prefill_ms = prefill_ms;
  return r;
}

GenerateResult continue_autoregressive(LlamaModel& model, FullKVCache& cache, const float* last_logits,
                                       int64_t max_new_tokens, const SamplingParams& sp,
                                       const std::vector<int64_t>& stop_ids) {
  TF_CHECK(cache.length() + max_new_tokens - 1 <= cache.capacity(),
           "generate: " << cache.length() << " cached tokens + --max-new-tokens (" << max_new_tokens
                        << ") exceed the KV capacity " << cache.capacity());
  Tensor logits;
  return decode_autoregressive(last_logits, model.config().vocab_size, max_new_tokens, sp, stop_ids,
                               [&](int32_t tok) {
                                 logits = model.forward(std::vector<int32_t>{tok}, cache, 1);
                                 return logits.ptr<float>();
                               });
}

GenerateResult decode_autoregressive(const float* last_logits, int64_t vocab, int64_t max_new_tokens,
                                     const SamplingParams& sp, const std::vector<int64_t>& stop_ids,
                                     const std::function<const float*(int32_t)>& next) {
  const float* lg = last_logits;
  int64_t i = 0;
  // Draw i of the seed's stream decides token i, whatever the backend.
  return decode_loop(max_new_tokens, stop_ids, sample_token(lg, vocab, sp, 0), [&](int32_t tok) {
    lg = next(tok);
    return sample_token(lg, vocab, sp, uint64_t(++i));
  });
}

GenerateResult decode_greedy_ids(int32_t first_token, int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                 const std::function<int32_t(int32_t)>& next) {
  return decode_loop(max_new_tokens, stop_ids, first_token, next);
}

}  // namespace tf
