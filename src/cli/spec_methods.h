// Builds and runs a speculative method for `triforce generate --method`.
// Available now: `spec` with a drafter chosen by --draft:
//   PATH          a small draft checkpoint that shares the target's vocabulary
//   layerskip:K   the target's first K layers with its final norm and head
//   ngram:N       prompt lookup over the history (suffixes of N..1 tokens)
// The retrieval- and StreamingLLM-cache levels (retrieval, streaming-hier,
// triforce, ngram-triforce) come with the sparse caches.
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
};

struct SpecOutcome {
  GenerateResult gen;
  nlohmann::json levels;  // per verifier level: drafted, accepted, alpha, tau, histogram, avg_tokens
};

SpecOutcome run_spec_method(LlamaModel& target, const SpecRequest& req, const std::vector<int32_t>& prompt,
                            int64_t max_new_tokens, const SamplingParams& sp, const std::vector<int64_t>& stops);

}  // namespace tf::cli
