#include "cli/spec_methods.h"

#include <memory>

#include "core/check.h"
#include "model/checkpoint.h"
#include "spec/chain.h"
#include "spec/drafter.h"
#include "spec/reretrieval.h"
#include "spec/retrieval_runner.h"
#include "spec/streaming_drafter.h"

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

// The draft model of a chain: a checkpoint sharing the target's vocabulary,
// or the target's first K layers (the default: a quarter of them).
std::unique_ptr<LlamaModel> load_draft_model(const LlamaModel& target, const std::string& draft) {
  const ModelConfig& tc = target.config();
  if (draft.empty() || starts_with(draft, "layerskip:")) {
    const int64_t k = draft.empty() ? std::max<int64_t>(1, tc.num_layers / 4) : parse_suffix_int(draft, "layerskip:");
    TF_CHECK(k < tc.num_layers, "--draft layerskip:" << k << ": the target has only " << tc.num_layers << " layers");
    return std::make_unique<LlamaModel>(spec::make_layer_skip_model(target, k));
  }
  Checkpoint ck = open_checkpoint(draft);
  TF_CHECK(ck.config.vocab_size == tc.vocab_size, "--draft " << draft << ": vocabulary of " << ck.config.vocab_size
                                                             << " tokens, the target has " << tc.vocab_size);
  return std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config));
}

}  // namespace

SpecOutcome run_spec_method(LlamaModel& target, const SpecRequest& req, const std::vector<int32_t>& prompt,
                            int64_t max_new_tokens, const SamplingParams& sp, const std::vector<int64_t>& stops) {
  const bool hier = req.method == "triforce" || req.method == "ngram-triforce";
  TF_CHECK(req.method == "spec" || hier, "--method " << req.method
                                                     << ": not available yet; use ar, spec, triforce or ngram-triforce");
  TF_CHECK(req.gamma1 >= 1, "--gamma1: expected at least 1, got " << req.gamma1);
  TF_CHECK(!hier || req.gamma2 >= 1, "--gamma2: expected at least 1, got " << req.gamma2);
  const ModelConfig& tc = target.config();
  const int64_t spec_room = req.gamma1 + (hier ? req.gamma2 : 0) + 8;
  const int64_t capacity = int64_t(prompt.size()) + max_new_tokens + spec_room;

  std::unique_ptr<LlamaModel> draft_model;
  std::unique_ptr<spec::Drafter> drafter;
  const bool ngram = starts_with(req.draft, "ngram:") || req.method == "ngram-triforce";
  if (ngram) {
    drafter = std::make_unique<spec::NgramDrafter>(
        tc.vocab_size, starts_with(req.draft, "ngram:") ? parse_suffix_int(req.draft, "ngram:") : 3);
  } else {
    draft_model = load_draft_model(target, req.draft);
    if (hier) {
      TF_CHECK(req.sink >= 0 && req.window >= 1, "--sink/--window: expected sink >= 0 and window >= 1");
      drafter = std::make_unique<spec::StreamingDrafter>(*draft_model, req.sink, req.window, spec_room);
    } else {
      drafter = std::make_unique<spec::ModelDrafter>(*draft_model, capacity);
    }
  }

  const spec::ReretrievePolicy policy = spec::ReretrievePolicy::parse(req.reretrieve);
  TF_CHECK(hier || policy.kind == spec::ReretrievePolicy::Kind::never,
           "--reretrieve " << req.reretrieve << ": only methods with a retrieval level re-retrieve");
  spec::ReretrieveMonitor monitor(policy);
  std::string kinds;
  auto record = [&](const spec::VerifyResult& vr) {
    kinds.append(size_t(vr.accepted), 'a');
    if (int64_t(vr.tokens.size()) > vr.accepted) kinds.push_back(vr.bonus ? 'b' : 'r');
  };
  spec::ChainOptions opt;
  opt.max_context = capacity;
  spec::ChainResult r;
  if (!hier) {
    opt.gamma = {req.gamma1};
    spec::SpecChain chain(*drafter, {&target}, opt);
    chain.on_step = [&](const spec::SpecChain&, const std::vector<int32_t>&, const spec::VerifyResult& vr) {
      record(vr);
    };
    r = chain.generate(prompt, max_new_tokens, sp, stops);
  } else {
    TF_CHECK(req.chunk >= 1 && req.budget >= req.chunk && req.budget % req.chunk == 0,
             "--budget " << req.budget << " / --chunk-size " << req.chunk
                         << ": expected a budget that is a positive multiple of the chunk size");
    RetrievalOptions ro;
    ro.budget = req.budget;
    ro.chunk = req.chunk;
    spec::RetrievalRunner middle(target, ro, max_new_tokens + spec_room);
    spec::ModelRunner top(target, capacity);
    opt.gamma = {req.gamma1, req.gamma2};
    spec::SpecChain chain({&middle, &top}, *drafter, opt);
    chain.on_step = [&](const spec::SpecChain& c, const std::vector<int32_t>& ctx, const spec::VerifyResult& vr) {
      record(vr);
      const auto& topm = c.metrics().back();
      if (monitor.after_step(int64_t(ctx.size() - prompt.size()), topm.drafted, topm.accepted)) middle.rebuild(ctx);
    };
    r = chain.generate(prompt, max_new_tokens, sp, stops);
  }

  SpecOutcome out;
  out.gen = r.gen;
  out.retrieval_rebuilds = monitor.rebuilds();
  // A stop token or the token budget can cut the last step short.
  out.token_kinds = kinds.substr(0, std::min(kinds.size(), r.gen.tokens.size()));
  out.levels = nlohmann::json::array();
  const size_t top_level = r.levels.size() - 1;
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
    if (l == top_level) j["avg_tokens"] = m.steps ? double(r.gen.tokens.size()) / double(m.steps) : 0.0;
    out.levels.push_back(j);
  }
  return out;
}

}  // namespace tf::cli
