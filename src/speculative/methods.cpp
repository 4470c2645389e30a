#include "speculative/methods.h"

#include "model/shared_embedding.h"
#include "speculative/default_draft.h"

#include "model/weights_device.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/check.h"
#include "parallel/target_levels.h"
#include "gen/autoregressive.h"
#include "model/cpu_f16_linears.h"
#include "model/checkpoint.h"
#include "speculative/reretrieval.h"
#include "speculative/retrieval_runner.h"
#include "speculative/simulate.h"
#include "speculative/streaming_drafter.h"
#include "speculative/streaming_runner.h"

namespace tf::speculative {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// A positive integer, or a one-line error naming the option and the text.
int64_t positive(const std::string& num, const std::string& what) {
  char* end = nullptr;
  const long long v = std::strtoll(num.c_str(), &end, 10);
  TF_CHECK(!num.empty() && end && *end == '\0' && v > 0, what << ": expected a positive integer, got '" << num << "'");
  return v;
}
int64_t non_negative(const std::string& num, const std::string& what) {
  if (num == "0") return 0;
  return positive(num, what);
}

// "A/B" -> (A, B)
std::pair<int64_t, int64_t> pair_of(const std::string& s, const std::string& what, bool first_may_be_zero) {
  const size_t slash = s.find('/');
  TF_CHECK(slash != std::string::npos, what << ": expected two numbers A/B, got '" << s << "'");
  const std::string a = s.substr(0, slash), b = s.substr(slash + 1);
  return {first_may_be_zero ? non_negative(a, what) : positive(a, what), positive(b, what)};
}

LevelSpec parse_level(const std::string& text, const std::string& where) {
  LevelSpec l;
  std::string src = text, cache;
  const size_t at = text.rfind('@');
  if (at != std::string::npos) {
    src = trim(text.substr(0, at));
    cache = trim(text.substr(at + 1));
    TF_CHECK(!cache.empty(), where << ": nothing after '@' (expected full, streaming[:S/W] or retrieval[:B/C])");
  }
  if (src == "target") {
    l.source = LevelSpec::Source::target;
  } else if (starts_with(src, "ngram:")) {
    l.source = LevelSpec::Source::ngram;
    l.n = positive(src.substr(6), where + " ngram:N");
    l.cache = LevelSpec::Cache::none;
  } else if (starts_with(src, "layerskip:")) {
    l.source = LevelSpec::Source::layerskip;
    l.n = positive(src.substr(10), where + " layerskip:K");
  } else if (starts_with(src, "model:")) {
    l.source = LevelSpec::Source::model;
    l.path = src.substr(6);
    TF_CHECK(!l.path.empty(), where << ": model: needs a checkpoint path");
  } else {
    TF_FAIL(where << ": '" << src << "' is not a level; expected ngram:N, layerskip:K, model:PATH or target");
  }
  if (cache.empty()) return l;
  TF_CHECK(l.source != LevelSpec::Source::ngram, where << ": an n-gram drafter has no KV cache (drop '@" << cache << "')");
  if (cache == "full") {
    l.cache = LevelSpec::Cache::full;
  } else if (cache == "streaming" || starts_with(cache, "streaming:")) {
    l.cache = LevelSpec::Cache::streaming;
    if (cache != "streaming") std::tie(l.sink, l.window) = pair_of(cache.substr(10), where + " streaming:S/W", true);
  } else if (cache == "retrieval" || starts_with(cache, "retrieval:")) {
    l.cache = LevelSpec::Cache::retrieval;
    if (cache != "retrieval") std::tie(l.budget, l.chunk) = pair_of(cache.substr(10), where + " retrieval:B/C", false);
  } else {
    TF_FAIL(where << ": cache '" << cache << "' is not one of full, streaming[:S/W], retrieval[:B/C]");
  }
  return l;
}

}  // namespace

std::string LevelSpec::str() const {
  std::ostringstream os;
  switch (source) {
    case Source::ngram: os << "ngram:" << n; break;
    case Source::layerskip: os << "layerskip:" << n; break;
    case Source::model: os << "model:" << path; break;
    case Source::target: os << "target"; break;
  }
  if (cache == Cache::streaming) {
    os << "@streaming";
    if (sink >= 0) os << ":" << sink << "/" << window;
  } else if (cache == Cache::retrieval) {
    os << "@retrieval";
    if (budget >= 0) os << ":" << budget << "/" << chunk;
  }
  return os.str();
}

std::string ChainSpec::str() const {
  std::string s;
  for (const auto& l : levels) s += (s.empty() ? "" : " > ") + l.str();
  return s;
}

ChainSpec ChainSpec::parse(const std::string& spec, const std::string& option) {
  ChainSpec c;
  const std::string head = option + " '" + spec + "'";
  size_t from = 0;
  while (true) {
    const size_t gt = spec.find('>', from);
    const std::string part = trim(spec.substr(from, gt == std::string::npos ? std::string::npos : gt - from));
    const std::string where = head + ": level " + std::to_string(c.levels.size() + 1);
    TF_CHECK(!part.empty(), where << " is empty (levels are separated by '>')");
    c.levels.push_back(parse_level(part, where));
    if (gt == std::string::npos) break;
    from = gt + 1;
  }
  TF_CHECK(c.levels.size() >= 2, head << ": expected at least a drafter and the target, e.g. 'ngram:3 > target'");
  const LevelSpec& top = c.levels.back();
  TF_CHECK(top.source == LevelSpec::Source::target && top.cache == LevelSpec::Cache::full,
           head << ": the last level must be the target on its full cache ('target'), got '" << top.str() << "'");
  for (size_t i = 1; i < c.levels.size(); ++i)
    TF_CHECK(c.levels[i].source != LevelSpec::Source::ngram,
             head << ": level " << i + 1 << ": an n-gram drafter can only be the bottom level");
  return c;
}

// ---- defaults ----

namespace {

LevelSpec draft_level(const LlamaModel& target, const std::string& draft, std::string* choice) {
  LevelSpec l;
  *choice = "given";
  if (draft.empty()) {
    const DefaultDraft d = default_draft(target);
    *choice = d.choice;
    if (d.choice == "layerskip") return parse_level(d.draft, "the default draft");
    l.source = LevelSpec::Source::model;
    l.path = d.draft;
    return l;
  }
  if (starts_with(draft, "ngram:") || starts_with(draft, "layerskip:") || starts_with(draft, "model:"))
    return parse_level(draft, "--draft " + draft);
  l.source = LevelSpec::Source::model;
  l.path = draft;
  return l;
}

}  // namespace

namespace {
constexpr int64_t kDraftCacheSlots = 256;  // the paper's draft cache: sinks + window + γ_top
}  // namespace

ResolvedMethod resolve(const LlamaModel& target, const MethodRequest& req, int64_t prompt_len) {
  ResolvedMethod r;
  const std::string& m = req.method;
  TF_CHECK(req.chunk >= 1, "--chunk-size: expected at least 1, got " << req.chunk);
  TF_CHECK(req.budget >= 0, "--budget: expected a positive multiple of the chunk size, got " << req.budget);
  TF_CHECK(req.sink >= 0, "--sink: expected at least 0, got " << req.sink);
  TF_CHECK(req.window >= 0, "--window: expected at least 1, got " << req.window);
  TF_CHECK(req.max_new_tokens >= 1, "--max-new-tokens: expected at least 1, got " << req.max_new_tokens);
  r.chunk = req.chunk;
  r.sink = req.sink;
  if (req.budget > 0) {
    TF_CHECK(req.budget % req.chunk == 0, "--budget " << req.budget << " / --chunk-size " << req.chunk
                                                      << ": expected a budget that is a multiple of the chunk size");
    r.budget = req.budget;
  } else {
    const int64_t chunks = std::clamp<int64_t>((prompt_len - 1) / (4 * req.chunk), 1, std::max<int64_t>(1, 4096 / req.chunk));
    r.budget = chunks * req.chunk;
  }
  const bool drafts = !(m == "chain" || m == "ar" || m == "retrieval" || (m == "ngram-triforce" && req.draft.empty()));
  const LevelSpec D = drafts ? draft_level(target, req.draft, &r.draft_choice) : LevelSpec{};
  auto level = [](const std::string& s) { return parse_level(s, "method"); };
  const bool d_ngram = D.source == LevelSpec::Source::ngram;
  if (m == "ar") {
    TF_CHECK(req.gammas.empty(), "--gammas: method ar does not draft");
  } else if (m == "spec") {
    r.chain.levels = {D, level("target")};
  } else if (m == "retrieval") {
    TF_CHECK(req.draft.empty(), "--draft " << req.draft << ": method retrieval drafts with the target itself");
    r.chain.levels = {level("target@retrieval"), level("target")};
  } else if (m == "streaming-hier" || m == "triforce") {
    LevelSpec d = D;
    if (!d_ngram && d.cache == LevelSpec::Cache::full) d.cache = LevelSpec::Cache::streaming;
    r.chain.levels = {d, level(m == "triforce" ? "target@retrieval" : "target@streaming"), level("target")};
  } else if (m == "ngram-triforce") {
    TF_CHECK(req.draft.empty() || d_ngram, "--draft " << req.draft << ": ngram-triforce drafts with ngram:N");
    r.chain.levels = {req.draft.empty() ? level("ngram:3") : D, level("target@retrieval"), level("target")};
  } else if (m == "chain") {
    TF_CHECK(!req.chain.empty(), "--method chain: give the chain with --chain");
    r.chain = ChainSpec::parse(req.chain);
  } else {
    TF_FAIL("--method " << m << ": expected ar, spec, retrieval, streaming-hier, triforce, ngram-triforce or chain");
  }
  const size_t drafting = r.chain.levels.empty() ? 0 : r.chain.levels.size() - 1;
  if (req.gammas.empty()) {
    if (m == "spec") r.gammas = {4};
    else if (m == "retrieval") r.gammas = {6};
    else if (drafting > 0) {
      r.gammas.assign(drafting, 6);
      r.gammas[0] = drafting == 1 ? 4 : 2;
    }
  } else {
    TF_CHECK(req.gammas.size() == drafting, "--gammas: the chain '" << r.chain.str() << "' needs " << drafting
                                                                   << " value(s), one per drafting level; "
                                                                   << req.gammas.size() << " given");
    for (int64_t g : req.gammas) TF_CHECK(g >= 1, "--gammas: every value must be at least 1, got " << g);
    r.gammas = req.gammas;
  }
  const int64_t g_top = r.gammas.empty() ? 0 : r.gammas.back();
  // The paper's 256-slot draft cache whatever the budget (see the header).
  r.window = req.window > 0 ? req.window : std::max<int64_t>(req.chunk, kDraftCacheSlots - req.sink - g_top);
  // Fill each level's cache parameters: the bottom's streaming cache is the
  // draft's (--sink/--window); a higher one gets the retrieval budget.
  for (size_t i = 0; i < r.chain.levels.size(); ++i) {
    LevelSpec& l = r.chain.levels[i];
    const std::string where = (m == "chain" ? "--chain level " + std::to_string(i + 1) : "--method " + m);
    if (l.cache == LevelSpec::Cache::streaming && l.sink < 0) {
      // A higher level's streaming cache holds as many tokens as the retrieval budget.
      l.sink = i == 0 ? r.sink : std::min(r.sink, r.budget / 2);
      l.window = i == 0 ? r.window : r.budget - l.sink;
    }
    if (l.cache == LevelSpec::Cache::retrieval && l.budget < 0) {
      l.budget = r.budget;
      l.chunk = r.chunk;
    }
    if (l.cache == LevelSpec::Cache::retrieval)
      TF_CHECK(l.budget % l.chunk == 0, where << ": retrieval:" << l.budget << "/" << l.chunk
                                              << ": the budget must be a multiple of the chunk size");
    if (l.source == LevelSpec::Source::layerskip)
      TF_CHECK(l.n < target.config().num_layers, where << ": layerskip:" << l.n << ": the target has only "
                                                       << target.config().num_layers << " layers");
  }
  if (!req.full_hierarchy && req.simulate_acceptance.empty() && r.chain.levels.size() >= 3) {
    const bool rebuilds = ReretrievePolicy::parse(req.reretrieve).kind != ReretrievePolicy::Kind::never;
    const int64_t seen = prompt_len - 1 + (rebuilds ? req.max_new_tokens : 0);
    for (size_t i = r.chain.levels.size() - 1; i-- > 1;) {  // middle levels, top down (erasing keeps lower indices)
      const LevelSpec& l = r.chain.levels[i];
      if (l.source != LevelSpec::Source::target || l.cache != LevelSpec::Cache::retrieval ||
          !retrieval_covers(l.budget, l.chunk, seen))
        continue;
      r.collapsed_levels.insert(r.collapsed_levels.begin(), l.str());
      r.chain.levels.erase(r.chain.levels.begin() + int64_t(i));
      r.gammas.erase(r.gammas.begin() + int64_t(i));  // level i's own block; level i - 1 keeps its γ
    }
  }
  return r;
}

bool retrieval_covers(int64_t budget, int64_t chunk, int64_t n) { return n / chunk <= budget / chunk; }

// ---- drafts ----

LlamaModel& DraftModels::get(const std::string& path, const LlamaModel& target) {
  auto it = models_.find(path);
  if (it != models_.end()) {
    TF_CHECK(it->second->config().vocab_size == target.config().vocab_size,
             "--draft " << path << ": vocabulary of " << it->second->config().vocab_size << " tokens, the target has "
                        << target.config().vocab_size);
    return *it->second;
  }
  if (is_synthetic_path(path)) {
    const std::vector<std::string> names = synthetic_model_names();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    TF_CHECK(std::find(names.begin(), names.end(), path) != names.end(),
             "--draft " << path << ": unknown synthetic model; expected one of " << list);
    const ModelConfig c = synthetic_config(path);
    TF_CHECK(c.vocab_size == target.config().vocab_size,
             "--draft " << path << ": vocabulary of " << c.vocab_size << " tokens, the target has "
                        << target.config().vocab_size);
    // A seed of its own: a synthetic draft of the target's shape is not a copy of it.
    auto m = std::make_unique<LlamaModel>(c, synthetic_weights(c, target.device(), target.dtype(), kSyntheticDraftSeed),
                                          target.max_chunk());
    return *(models_[path] = std::move(m));
  }
  Checkpoint ck = open_checkpoint(path);
  TF_CHECK(ck.config.vocab_size == target.config().vocab_size,
           "--draft " << path << ": vocabulary of " << ck.config.vocab_size << " tokens, the target has "
                      << target.config().vocab_size);
  if (ck.config.shared_embedding.enabled) {  // fail before reading the layers
    const std::string why = shared_embedding_mismatch(ck.config, path, target.config(), target.weights());
    TF_CHECK(why.empty(), "--" << why);  // "--draft PATH: ..."
  }
  LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
  // The draft runs where the target runs, in the target's dtype.
  if (target.device() != Device::CPU) w = upload_weights(w, target.device(), target.dtype());
  if (ck.config.shared_embedding.enabled)
    borrow_target_embedding(w, ck.config, path, target.config(), target.weights());
  // A CPU step is its weight bytes; the draft's need not be the target's dtype (its distributions only propose).
  if (target.device() == Device::CPU && cpu_draft_f16_enabled()) cpu_f16_linears(w);
  auto m = std::make_unique<LlamaModel>(ck.config, std::move(w), target.max_chunk());
  return *(models_[path] = std::move(m));
}

// ---- running ----

namespace {

struct RetrievalLevelRef {
  int level = 0;                          // chain level
  parallel::TargetLevel* target = nullptr;    // the target on a retrieval cache (rebuilt from the top level)
  RetrievalRunner* other = nullptr;       // another model on one (rebuilt by its own prefill)
};

struct BuiltChain {
  std::vector<std::unique_ptr<LlamaModel>> owned_models;
  std::unique_ptr<Drafter> drafter;
  StreamingDrafter* streaming_drafter = nullptr;     // drafter, when it absorbs the prompt itself
  std::vector<std::unique_ptr<Verifier>> verifiers;  // levels 1..N-1
  parallel::TargetLevel* top = nullptr;                  // verifiers.back()
  std::vector<RetrievalLevelRef> retrieval;
};

double ms(int64_t ns) { return double(ns) / 1e6; }

// MethodOutcome::graph_steps: each model's step-graph counts across the decode.
class GraphStepsProbe {
 public:
  explicit GraphStepsProbe(MethodOutcome& out) : out_(&out) {}
  void add(const std::string& name, const LlamaModel& m) {
    models_.push_back(&m);
    before_.push_back(counts(name, m));
  }
  // The counts from now on (after a warm-up).
  void rebase() {
    for (size_t i = 0; i < models_.size(); ++i) before_[i] = counts(before_[i].model, *models_[i]);
  }
  void finish() {
    for (size_t i = 0; i < models_.size(); ++i) {
      MethodOutcome::GraphSteps g = counts(before_[i].model, *models_[i]);
      g.captures -= before_[i].captures, g.replays -= before_[i].replays, g.eager -= before_[i].eager;
      out_->graph_steps.push_back(g);
    }
  }

 private:
  static MethodOutcome::GraphSteps counts(const std::string& name, const LlamaModel& m) {
    MethodOutcome::GraphSteps g;
    g.model = name;
    g.captures = m.graph_captures(), g.replays = m.graph_replays(), g.eager = m.graph_eager_runs();
    g.attention_split_slots = m.device() == Device::CUDA ? m.attention_split_slots() : 0;
    return g;
  }
  MethodOutcome* out_;
  std::vector<const LlamaModel*> models_;
  std::vector<MethodOutcome::GraphSteps> before_;
};

}  // namespace

namespace {

// Slots the top level's cache needs beyond the prompt (the chain's speculation room).
// It also bounds a StreamingLLM drafter's tail: the middle levels' uncommitted
// tokens (at most Σ(γ_l − 1) over them), the last committed token and γ1 − 1
// forwarded proposals, i.e. at most Σγ.
int64_t spec_room_of(const ResolvedMethod& rm) {
  int64_t room = 8;
  for (int64_t g : rm.gammas) room += g;
  return room;
}

// consumable: a snapshot whose cache the top level (or ar) may adopt instead
// of copying; only an offloaded target does, where the copy is tens of GB of
// pinned memory (a device cache keeps the copy path every test checks).
MethodOutcome run_method_impl(LlamaModel& target, const MethodRequest& req, const std::vector<int32_t>& prompt,
                              const PrefillSnapshot* snapshot, PrefillSnapshot* consumable, DraftModels* drafts) {
  TF_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  const PhaseClock clock(req.device_sync);
  MethodOutcome out;
  out.method = req.method;
  out.resolved = resolve(target, req, int64_t(prompt.size()));
  const ResolvedMethod& rm = out.resolved;
  check_simulated_acceptance(req.simulate_acceptance, req.method, rm);
  out.simulated_acceptance = req.simulate_acceptance;
  const ReretrievePolicy policy = ReretrievePolicy::parse(req.reretrieve);
  const int64_t P = int64_t(prompt.size());
  const int64_t max_new = req.max_new_tokens;
  const SamplingParams& sp = req.sampling;
  const int64_t V = target.config().vocab_size;
  // Every level on the target comes from here: local levels, or (rank 0 of a
  // driven tensor-parallel job) levels whose mirrors the workers run.
  parallel::TargetLevels levels(target);
  const bool driven = levels.driven();

  const bool offloaded = target.kv_offload().enabled;
  std::unique_ptr<PrefillSnapshot> own_snapshot;
  if (snapshot) {
    TF_CHECK(snapshot->prompt() == prompt && snapshot->fits(target),
             "prefill snapshot: taken for another prompt or model than this run's");
    TF_CHECK(!driven || snapshot->mirror_id() >= 0,
             "prefill snapshot: taken on rank 0 alone, but the workers of this driven tensor-parallel run need "
             "theirs (take it with parallel::TargetLevels::snapshot)");
    out.prefill_reused = true;
  } else {
    const int64_t room = offloaded ? P + max_new + (rm.chain.levels.empty() ? 0 : spec_room_of(rm)) : 0;
    own_snapshot = levels.snapshot(prompt, clock, room);
    snapshot = own_snapshot.get();
    consumable = own_snapshot.get();
  }
  // Whether the snapshot's cache can become the cache of `capacity` slots.
  // Driven by rank 0, every level copies (the workers' mirrors have no take-over op).
  auto adoptable = [&](int64_t capacity) {
    return offloaded && !driven && consumable && !consumable->cache_taken() &&
           consumable->cache().capacity() >= capacity;
  };
  out.times.prefill = snapshot->prefill_ns();
  const int64_t head = P - 1;  // what a cache holds before the first step

  if (rm.chain.levels.empty()) {  // ar
    TF_CHECK(policy.kind == ReretrievePolicy::Kind::never,
             "--reretrieve " << req.reretrieve << ": only methods with a retrieval level re-retrieve");
    // Like every speculative top level, ar keeps the prefill's first P - 1
    // tokens and computes the last prompt token as a one-token step: the
    // speculative levels verify from that token, so its KV and logits must
    // come from the decode path there as here (the prefill rounds differently,
    // and a bf16 near-tie then splits ar from every other method).
    std::unique_ptr<parallel::TargetLevel> top;
    if (adoptable(P + max_new)) {
      top = levels.full_adopting(consumable->take_cache(), std::vector<int32_t>(prompt.begin(), prompt.begin() + head));
    } else {
      top = levels.full(P + max_new);
      ScopedPhase t(clock, out.times.setup);
      top->seed(*snapshot, head);
    }
    // The prompt is committed: each step then compares only what follows it (TokenMirror).
    top->sync(prompt);
    std::vector<int32_t> seq = prompt;
    seq.reserve(prompt.size() + size_t(max_new));
    Tensor lg;
    if (warm_step_graphs_default()) {
      // ar's one step shape, recorded as the chains' are (ChainOptions::warm_step_graphs),
      // so that neither side of a comparison pays its captures inside the decode.
      ScopedPhase t(clock, out.times.graph_warmup);
      for (int rep = 0; rep < 2; ++rep) {
        if (sp.greedy()) {
          std::vector<int32_t> id;
          top->greedy_ids(seq, 1, id);
        } else if (top->distributions_on_device()) {
          DeviceSampler rows;
          rows.reserve(1, V);
          Tensor row = rows.view(0, 1);
          top->device_distributions(seq, 1, sp, row);
        } else {
          (void)top->logits(seq, 1);
        }
      }
      top->sync(prompt);
    }
    out.times.setup += out.times.graph_warmup;
    GraphStepsProbe probe(out);
    probe.add("target", target);
    const int64_t t0 = clock.now_ns();
    GenerateResult g;
    if (sp.greedy()) {  // ids only: on the device where the model takes them there, as every level's T = 0 decisions
      std::vector<int32_t> id;
      top->greedy_ids(seq, 1, id);
      g = decode_greedy_ids(id[0], max_new, req.stop_ids, [&](int32_t tok) {
        seq.push_back(tok);
        top->greedy_ids(seq, 1, id);
        return id[0];
      });
    } else if (top->distributions_on_device()) {
      // T > 0 where the logits are (the speculative levels' rule, device_sampler.h):
      // token i is the draw with number i of the seed's stream, as on the host.
      DeviceSampler rows;
      rows.reserve(1, V);
      Tensor row = rows.view(0, 1);
      uint64_t i = 0;
      auto draw_next = [&] {
        top->device_distributions(seq, 1, sp, row);
        return rows.draw(row, sp.seed, i++);
      };
      g = decode_greedy_ids(draw_next(), max_new, req.stop_ids, [&](int32_t tok) {
        seq.push_back(tok);
        return draw_next();
      });
      out.device_sampling = true;
    } else {
      const Tensor first = top->logits(seq, 1);
      g = decode_autoregressive(first.ptr<float>(), V, max_new, sp, req.stop_ids, [&](int32_t tok) {
        seq.push_back(tok);
        lg = top->logits(seq, 1);
        return lg.ptr<float>();
      });
    }
    out.times.decode = clock.now_ns() - t0;
    probe.finish();
    out.times.verify = out.times.decode;
    out.tokens = g.tokens;
    out.stopped_at_eos = g.stopped_at_eos;
  } else {
    const auto& L = rm.chain.levels;
    const int64_t spec_room = spec_room_of(rm);
    const int64_t capacity = P + max_new + spec_room;
    DraftModels local_drafts;
    DraftModels& dm = drafts ? *drafts : local_drafts;
    BuiltChain bc;
    std::vector<std::pair<std::string, LlamaModel*>> used_models;  // the draft models, for graph_steps
    auto model_of = [&](const LevelSpec& l) -> LlamaModel& {
      if (l.source == LevelSpec::Source::target) return target;
      if (l.source == LevelSpec::Source::model) return dm.get(l.path, target);
      if (driven) {  // rank 0 alone runs it: the first K layers whole, read once and kept
        const std::string key = "layerskip:" + std::to_string(l.n);
        if (!dm.find(key)) dm.put(key, levels.layer_skip_draft(req.target_path, l.n));
        return *dm.find(key);
      }
      bc.owned_models.push_back(std::make_unique<LlamaModel>(make_layer_skip_model(target, l.n)));
      return *bc.owned_models.back();
    };
    for (size_t i = 0; i < L.size(); ++i) {
      const LevelSpec& l = L[i];
      const std::string where = (req.method == "chain" ? "--chain level " : "--method " + req.method + ": level ") +
                                std::to_string(i + 1) + " (" + l.str() + ")";
      if (l.source == LevelSpec::Source::ngram) {
        bc.drafter = std::make_unique<NgramDrafter>(V, l.n);
        continue;
      }
      LlamaModel& model = model_of(l);
      const bool on_target = l.source == LevelSpec::Source::target;
      if (!on_target && std::none_of(used_models.begin(), used_models.end(),
                                     [&](const auto& u) { return u.second == &model; }))
        used_models.emplace_back(l.str(), &model);
      std::unique_ptr<Verifier> v;
      parallel::TargetLevel* tl = nullptr;
      if (on_target && l.cache == LevelSpec::Cache::streaming && i == 0) {
        // The StreamingLLM drafter samples between its forwards; the step protocol mirrors verifier calls only.
        TF_CHECK(!driven, where << ": the target as the StreamingLLM drafter cannot be driven by rank 0; run it with "
                                << "--tp-mode lockstep, or draft with layerskip:K@streaming (rank 0 alone)");
        bc.drafter = std::make_unique<StreamingDrafter>(model, l.sink, l.window, spec_room);
        bc.streaming_drafter = static_cast<StreamingDrafter*>(bc.drafter.get());
        continue;
      }
      if (on_target) {
        std::unique_ptr<parallel::TargetLevel> t;
        if (l.cache == LevelSpec::Cache::full && i + 1 == L.size() && adoptable(capacity)) {
          // The top level, built last: every other level has already read the snapshot.
          t = levels.full_adopting(consumable->take_cache(), std::vector<int32_t>(prompt.begin(), prompt.begin() + head));
        } else if (l.cache == LevelSpec::Cache::full) {
          t = levels.full(capacity);
          ScopedPhase ph(clock, out.times.setup);
          t->seed(*snapshot, head);
        } else if (l.cache == LevelSpec::Cache::retrieval) {
          RetrievalOptions ro;
          ro.budget = l.budget;
          ro.chunk = l.chunk;
          t = levels.retrieval(ro, max_new + spec_room);
          ScopedPhase ph(clock, out.times.retrieval_build);
          t->seed(*snapshot, P);
        } else {
          t = levels.streaming(l.sink, l.window, spec_room + 2);
          ScopedPhase ph(clock, out.times.setup);
          t->seed(*snapshot, head);
        }
        tl = t.get();
        if (l.cache == LevelSpec::Cache::retrieval) bc.retrieval.push_back({int(i), tl, nullptr});
        v = std::move(t);
      } else if (l.cache == LevelSpec::Cache::full) {
        auto r = std::make_unique<ModelRunner>(model, capacity);
        if (l.source == LevelSpec::Source::layerskip && !driven) {
          // The target's first K layers on the same inputs: their K/V is the snapshot's.
          ScopedPhase t(clock, out.times.setup);
          r->load_prefix(snapshot->cache(), std::vector<int32_t>(prompt.begin(), prompt.begin() + head));
        } else if (head > 0) {
          // Another model's own prefill of the prompt, as its own phase (as the StreamingLLM drafter's): left
          // to the first proposal, it was charged to the decode and grew its ms/token with the context.
          ScopedPhase t(clock, out.times.draft_prefill);
          r->absorb(std::vector<int32_t>(prompt.begin(), prompt.begin() + head));
        }
        v = std::move(r);
      } else if (l.cache == LevelSpec::Cache::retrieval) {
        RetrievalOptions ro;
        ro.budget = l.budget;
        ro.chunk = l.chunk;
        auto r = std::make_unique<RetrievalRunner>(model, ro, max_new + spec_room);
        {
          ScopedPhase t(clock, out.times.retrieval_build);
          r->begin(prompt);
        }
        bc.retrieval.push_back({int(i), nullptr, r.get()});
        v = std::move(r);
      } else if (i == 0) {  // the draft's StreamingLLM cache absorbs the prompt itself, as the reference's does
        bc.drafter = std::make_unique<StreamingDrafter>(model, l.sink, l.window, spec_room);
        bc.streaming_drafter = static_cast<StreamingDrafter*>(bc.drafter.get());
        continue;
      } else {
        v = std::make_unique<StreamingRunner>(model, l.sink, l.window, spec_room + 2);
      }
      if (i + 1 == L.size()) bc.top = tl;  // the last level is always the target on its full cache
      if (i == 0)
        bc.drafter = std::make_unique<VerifierDrafter>(std::move(v));
      else
        bc.verifiers.push_back(std::move(v));
    }
    TF_CHECK(bc.top, "run_method: the top level must be the target on its full cache");
    TF_CHECK(policy.kind == ReretrievePolicy::Kind::never || !bc.retrieval.empty() || !rm.collapsed_levels.empty(),
             "--reretrieve " << req.reretrieve << ": only methods with a retrieval level re-retrieve");

    std::vector<Verifier*> vs;
    for (auto& v : bc.verifiers) vs.push_back(v.get());
    ChainOptions opt;
    opt.gamma = rm.gammas;
    opt.max_context = capacity;
    opt.middle_mode = req.middle_mode;
    opt.clock = &clock;
    opt.simulate_acceptance = req.simulate_acceptance;
    opt.warm_step_graphs = warm_step_graphs_default();
    SpecChain chain(vs, *bc.drafter, opt);
    std::vector<ReretrieveMonitor> monitors(bc.retrieval.size(), ReretrieveMonitor(policy));
    std::string kinds;
    chain.on_step = [&](const SpecChain& c, const std::vector<int32_t>& ctx, const VerifyResult& vr) {
      kinds.append(size_t(vr.accepted), 'a');
      if (int64_t(vr.tokens.size()) > vr.accepted) kinds.push_back(vr.bonus ? 'b' : 'r');
      for (size_t k = 0; k < bc.retrieval.size(); ++k) {
        const RetrievalLevelRef& rl = bc.retrieval[k];
        const auto& above = c.metrics()[size_t(rl.level + 1)];
        if (!monitors[k].after_step(int64_t(ctx.size()) - P, above.drafted, above.accepted)) continue;
        ScopedPhase t(clock, out.times.retrieval_rebuild);
        if (rl.target)  // from the top level's cache: it holds the committed context but its last token
          rl.target->rebuild_from(ctx, *bc.top);
        else  // another model's K/V is not the target's: its own prefill of the context
          rl.other->rebuild(ctx);
      }
    };
    if (bc.streaming_drafter) {
      // Its own phase: the chain's begin() then keeps what this absorbed.
      ScopedPhase t(clock, out.times.draft_prefill);
      bc.streaming_drafter->begin(prompt);
    }
    GraphStepsProbe probe(out);
    probe.add("target", target);
    for (const auto& [name, m] : used_models) probe.add(name, *m);
    chain.on_first_step = [&] { probe.rebase(); };
    const int64_t t0 = clock.now_ns();
    ChainResult r = chain.generate(prompt, max_new, sp, req.stop_ids);
    out.times.decode = clock.now_ns() - t0 - r.warmup_ns;
    out.times.graph_warmup = r.warmup_ns;
    out.times.setup += r.warmup_ns;
    probe.finish();
    out.tokens = r.gen.tokens;
    out.stopped_at_eos = r.gen.stopped_at_eos;
    out.steps = r.steps;
    out.device_sampling = r.device_sampling;
    // A stop token or the token budget can cut the last step short.
    out.token_kinds = kinds.substr(0, std::min(kinds.size(), r.gen.tokens.size()));
    for (const auto& m : monitors) out.retrieval_rebuilds += m.rebuilds();
    out.times.draft = r.levels[0].ns;
    for (size_t l = 1; l < r.levels.size(); ++l) {
      const LevelMetrics& m = r.levels[l];
      LevelOutcome lo;
      lo.level = int(l);
      lo.spec = L[l].str();
      lo.gamma = rm.gammas[l - 1];
      lo.steps = m.steps;
      lo.drafted = m.drafted;
      lo.accepted = m.accepted;
      lo.rejected = m.rejected;
      lo.alpha = m.alpha();
      lo.tau = m.tau();
      lo.accepted_hist = m.accepted_hist;
      lo.ns = m.ns;
      if (l + 1 == r.levels.size()) {
        lo.avg_tokens = m.steps ? double(r.gen.tokens.size()) / double(m.steps) : 0.0;
        out.times.verify = m.ns;
      } else {
        out.times.middle += m.ns;
      }
      out.levels.push_back(lo);
    }
  }
  out.times.total =
      out.times.prefill + out.times.setup + out.times.retrieval_build + out.times.draft_prefill + out.times.decode;
  const double n = double(std::max<size_t>(1, out.tokens.size()));
  out.decode_ms_per_token = ms(out.times.decode) / n;
  out.e2e_ms_per_token = ms(out.times.total) / n;
  return out;
}

}  // namespace

MethodOutcome run_method(LlamaModel& target, const MethodRequest& req, const std::vector<int32_t>& prompt,
                         const PrefillSnapshot* snapshot, DraftModels* drafts) {
  return run_method_impl(target, req, prompt, snapshot, nullptr, drafts);
}

MethodOutcome run_method_consuming(LlamaModel& target, const MethodRequest& req, const std::vector<int32_t>& prompt,
                                   PrefillSnapshot& snapshot, DraftModels* drafts) {
  return run_method_impl(target, req, prompt, &snapshot, &snapshot, drafts);
}

nlohmann::json MethodOutcome::to_json() const {
  nlohmann::json j;
  j["method"] = method;
  j["chain"] = resolved.chain.str();
  j["draft_choice"] = resolved.draft_choice;
  j["collapsed_levels"] = resolved.collapsed_levels;
  j["gammas"] = resolved.gammas;
  j["budget"] = resolved.budget;
  j["chunk"] = resolved.chunk;
  j["sink"] = resolved.sink;
  j["window"] = resolved.window;
  j["tokens"] = tokens;
  j["n_generated"] = tokens.size();
  j["stopped_at_eos"] = stopped_at_eos;
  nlohmann::json lv = nlohmann::json::array();
  for (const auto& l : levels) {
    nlohmann::json x;
    x["level"] = l.level;
    x["spec"] = l.spec;
    x["gamma"] = l.gamma;
    x["steps"] = l.steps;
    x["drafted"] = l.drafted;
    x["accepted"] = l.accepted;
    x["rejected"] = l.rejected;
    x["alpha"] = l.alpha;
    x["tau"] = l.tau;
    x["accepted_hist"] = l.accepted_hist;
    if (l.level == int(levels.size())) x["avg_tokens"] = l.avg_tokens;
    x["ms"] = ms(l.ns);
    lv.push_back(x);
  }
  j["levels"] = lv;
  nlohmann::json st = nlohmann::json::array();
  for (const auto& s : steps) {
    // Levels 1..N-1 (index 0 of StepRecord is the drafter, never a verifier).
    st.push_back({{"generated", s.generated},
                  {"drafted", std::vector<int64_t>(s.drafted.begin() + 1, s.drafted.end())},
                  {"accepted", std::vector<int64_t>(s.accepted.begin() + 1, s.accepted.end())},
                  {"ns", s.ns}});
  }
  j["steps"] = st;
  j["times_ms"] = {{"prefill", ms(times.prefill)},
                   {"setup", ms(times.setup)},
                   {"graph_warmup", ms(times.graph_warmup)},
                   {"retrieval_build", ms(times.retrieval_build)},
                   {"draft_prefill", ms(times.draft_prefill)},
                   {"draft", ms(times.draft)},
                   {"middle", ms(times.middle)},
                   {"verify", ms(times.verify)},
                   {"retrieval_rebuild", ms(times.retrieval_rebuild)},
                   {"decode", ms(times.decode)},
                   {"total", ms(times.total)}};
  j["prefill_reused"] = prefill_reused;
  j["device_sampling"] = device_sampling;
  nlohmann::json gs = nlohmann::json::array();
  for (const auto& g : graph_steps)
    gs.push_back({{"model", g.model}, {"captures", g.captures}, {"replays", g.replays}, {"eager", g.eager},
                  {"attention_split_slots", g.attention_split_slots}});
  j["graph_steps"] = gs;
  j["prefill_ms"] = ms(times.prefill);
  j["decode_ms_per_token"] = decode_ms_per_token;
  j["tokens_per_s"] = decode_ms_per_token > 0 ? 1000.0 / decode_ms_per_token : 0.0;
  j["e2e_ms_per_token"] = e2e_ms_per_token;
  j["retrieval_rebuilds"] = retrieval_rebuilds;
  j["token_kinds"] = token_kinds;
  j["simulated_acceptance"] = simulated_acceptance.empty() ? nlohmann::json(false) : nlohmann::json(simulated_acceptance);
  return j;
}

}  // namespace tf::speculative
