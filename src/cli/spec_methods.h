// Builds and runs a speculative method for `triforce generate --method`.
// Methods: `spec` (drafter -> full target), `triforce` (draft model on a
// StreamingLLM cache -> target on the retrieval cache -> full target) and
// `ngram-triforce` (n-gram -> target + retrieval -> full). --draft picks:
//   PATH          a small draft checkpoint that shares the target's vocabulary
//   layerskip:K   the target's first K layers with its final norm and head
//   ngram:N       prompt lookup over the history (suffixes of N..1 tokens)
// `retrieval` and `streaming-hier` are not wired yet.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gen/autoregressive.h"
#include "gen/sampling.h"
#include "model/llama.h"

namespace tf::cli {

struct SpecRequest {
  std::string method;  // "spec"
  std::string draft;   // see above
  int64_t gamma1 = 4;
  int64_t gamma2 = 6;
  int64_t budget = 4096;  // retrieval cache: tokens kept per layer and KV head
  int64_t chunk = 8;      // retrieval chunk size
  int64_t sink = 16;      // draft StreamingLLM cache
  int64_t window = 234;
  std::string reretrieve = "never";  // never | every:N | below:A
};

struct SpecOutcome {
  GenerateResult gen;
  nlohmann::json levels;  // per verifier level: drafted, accepted, alpha, tau, histogram, avg_tokens
  int64_t retrieval_rebuilds = 0;  // re-retrievals after the initial build
  // Per generated token, how the top level committed it: 'a' accepted draft,
  // 'r' resampled after a rejection, 'b' bonus (everything accepted).
  std::string token_kinds;
};

SpecOutcome run_spec_method(LlamaModel& target, const SpecRequest& req, const std::vector<int32_t>& prompt,
                            int64_t max_new_tokens, const SamplingParams& sp, const std::vector<int64_t>& stops);

}  // namespace tf::cli
