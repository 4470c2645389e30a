#include "cli/spec_methods.h"

#include <memory>

#include "core/check.h"
#include "model/checkpoint.h"
#include "spec/chain.h"
#include "spec/drafter.h"

namespace tf::cli {

namespace {
bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

int64_t parse_suffix_int(const std::string& s, const std::string& prefix) {
  const std::string num = s.substr(prefix.size());
  char* end = nullptr;
  long v = std::strtol(num.c_str(), &end, 10);
  TF_CHECK(!num.empty() && end && *end == '\0' && v > 0, "--draft " << s << ": expected " << prefix << "N with N > 0");
  return v;
}
}  // namespace

SpecOutcome run_spec_method(LlamaModel& target, const SpecRequest& req, const std::vector<int32_t>& prompt,
                            int64_t max_new_tokens, const SamplingParams& sp, const std::vector<int64_t>& stops) {
  TF_CHECK(req.method == "spec", "--method " << req.method
                                             << ": not available yet (it needs the retrieval/StreamingLLM caches); "
                                                "use ar or spec");
  TF_CHECK(req.gamma1 >= 1, "--gamma1: expected at least 1, got " << req.gamma1);
  const ModelConfig& tc = target.config();
  const int64_t capacity = int64_t(prompt.size()) + max_new_tokens + req.gamma1 + 8;

  std::unique_ptr<LlamaModel> draft_model;
  std::unique_ptr<spec::Drafter> drafter;
  if (req.draft.empty() || starts_with(req.draft, "layerskip:")) {
    const int64_t k = req.draft.empty() ? std::max<int64_t>(1, tc.num_layers / 4) : parse_suffix_int(req.draft, "layerskip:");
    TF_CHECK(k < tc.num_layers, "--draft layerskip:" << k << ": the target has only " << tc.num_layers << " layers");
    drafter = std::make_unique<spec::LayerSkipDrafter>(target, k, capacity);
  } else if (starts_with(req.draft, "ngram:")) {
    drafter = std::make_unique<spec::NgramDrafter>(tc.vocab_size, parse_suffix_int(req.draft, "ngram:"));
  } else {
    Checkpoint ck = open_checkpoint(req.draft);
    TF_CHECK(ck.config.vocab_size == tc.vocab_size, "--draft " << req.draft << ": vocabulary of "
                                                               << ck.config.vocab_size << " tokens, the target has "
                                                               << tc.vocab_size);
    draft_model = std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config));
    drafter = std::make_unique<spec::ModelDrafter>(*draft_model, capacity);
  }

  spec::ChainOptions opt;
  opt.gamma = {req.gamma1};
  opt.max_context = capacity;
  spec::SpecChain chain(*drafter, {&target}, opt);
  spec::ChainResult r = chain.generate(prompt, max_new_tokens, sp, stops);

  SpecOutcome out;
  out.gen = r.gen;
  out.levels = nlohmann::json::array();
  for (size_t l = 1; l < r.levels.size(); ++l) {
    const auto& m = r.levels[l];
    nlohmann::json j;
    j["level"] = l;
    j["steps"] = m.steps;
    j["drafted"] = m.drafted;
    j["accepted"] = m.accepted;
    j["alpha"] = m.alpha();
    j["tau"] = m.tau();
    j["accepted_hist"] = m.accepted_hist;
    // The reference's avg_tokens: tokens committed per verification step.
    j["avg_tokens"] = m.steps ? double(r.gen.tokens.size()) / double(m.steps) : 0.0;
    out.levels.push_back(j);
  }
  return out;
}

}  // namespace tf::cli
