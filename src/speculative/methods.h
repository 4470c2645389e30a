// Every decoding method behind one entry point, run_method(): `ar` and every
// speculative chain, so a CLI call and a sweep grid point run the same code.
//
// A method is a chain of levels, bottom (the drafter) first, the full target
// last. The named methods are fixed chains (D is --draft, default
// layerskip:<a quarter of the layers>):
//   ar               the target alone, token by token
//   spec             D > target
//   retrieval        target@retrieval:B/C > target
//   streaming-hier   D@streaming:S/W > target@streaming:16/<B-16> > target (B tokens, see resolve)
//   triforce         D@streaming:S/W > target@retrieval:B/C > target
//   ngram-triforce   ngram:3 > target@retrieval:B/C > target
//   chain            MethodRequest::chain, any depth (ChainSpec::parse)
//
// Prefill: the target's prompt prefill is a PrefillSnapshot. run_method takes
// one itself when none is given; a sweep takes it once per (prompt, context
// length) and passes it to every grid point, which copy from it (the top
// level, a target@full level, the retrieval cache's chunk selection, a
// target@streaming middle level, a layerskip@full level's first K layers).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gen/sampling.h"
#include "model/llama.h"
#include "speculative/chain.h"
#include "speculative/prefill.h"
#include "speculative/reretrieval.h"
#include "speculative/verify.h"

namespace tf::speculative {

// ---- chain specs ----
// chain  := level ( '>' level )*        bottom first; the last level must be `target` (full cache)
// level  := source [ '@' cache ]
// source := ngram:N | layerskip:K | model:PATH | target
// cache  := full | streaming[:S/W] | retrieval[:B/C]   (no parameters: the scaled defaults)
// ngram takes no cache; the others default to full.
struct LevelSpec {
  enum class Source { ngram, layerskip, model, target };
  enum class Cache { none, full, streaming, retrieval };
  Source source = Source::target;
  int64_t n = 0;     // ngram: N; layerskip: K
  std::string path;  // model: checkpoint
  Cache cache = Cache::full;
  int64_t sink = -1, window = -1;  // streaming; -1: default
  int64_t budget = -1, chunk = -1;  // retrieval; -1: default
  std::string str() const;
};

struct ChainSpec {
  std::vector<LevelSpec> levels;  // bottom first
  // A one-line error naming `option` (e.g. --chain) on a bad spec.
  static ChainSpec parse(const std::string& spec, const std::string& option = "--chain");
  std::string str() const;
};

// ---- request ----
struct MethodRequest {
  std::string method = "ar";  // see above
  std::string chain;          // method "chain": the spec string
  std::string draft;          // D of the named methods: PATH | layerskip:K | ngram:N; "" = default_draft()
  // Tokens each drafting level proposes per call, bottom-up: {γ1} for 2-level
  // chains, {γ1, γ2} for 3-level ones, ...; empty = defaults (see resolve()).
  std::vector<int64_t> gammas;
  int64_t budget = 0;  // retrieval budget (and the streaming-hier middle cache); 0 = scaled default
  int64_t chunk = 8;   // retrieval chunk size
  int64_t sink = 16;   // draft StreamingLLM sinks
  int64_t window = 0;  // draft StreamingLLM window; 0 = scaled default
  std::string reretrieve = "never";  // never | every:N | below:A (every retrieval level)
  SamplingParams sampling;
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_ids;
  ResampleMode middle_mode = ResampleMode::residual;  // tests: ResampleMode::reference_bug
  std::function<void()> device_sync;                   // called before every clock read (a GPU backend)
  // The target's checkpoint. Under --tp-mode driven rank 0 reads a layerskip:K
  // level's first K layers whole from it (the draft runs on rank 0 alone).
  std::string target_path;
  // --simulate-acceptance (speculative/simulate.h): one accept probability per
  // verifying level, bottom first; empty = a real run.
  std::vector<double> simulate_acceptance;
  // --full-hierarchy: keep a middle target@retrieval level even when its budget
  // covers the whole context (see resolve: by default such a level is dropped).
  bool full_hierarchy = false;
};

// The request with every default filled in for this target and prompt length:
//   budget  = chunk * clamp(floor((P - 1) / (4 * chunk)), 1, 4096 / chunk): a quarter of
//             the prompt, at most the paper's 4096, at least one chunk
//   window  = max(chunk, min(256, budget) - sink - γ_top), the paper's 256-slot draft
//             cache (16 + 234 at γ2 = 6), never larger than the retrieval budget
//   a higher level's streaming cache (streaming-hier's middle) = budget tokens:
//             sink min(sink, budget / 2), window budget - that
//   gammas  = spec {4}, retrieval {6}, 3-level {2, 6}; chain: 2 at the bottom, 6 above
//   draft   = the trained draft when the target is the model it was trained for
//             (speculative/default_draft.h), else layerskip:max(1, L/4)
// A draft's StreamingLLM window is not scaled down with the budget: a small
// prompt's budget (8 tokens at an 8-token prompt) starved the draft to 8
// recent tokens (α 0.11 on the README's command); its cache is cheap.
// Collapse: a middle level `target@retrieval:B/C` whose selection keeps every
// token it could see computes the target's own distribution at the target's
// own cost, so it can only lose; it is removed (with its γ; the level below
// then drafts for the level above with its own γ), unless full_hierarchy or
// simulate_acceptance (rates name the levels) is set. "Covers": the retrieval
// keeps chunk 0, the best budget/C - 1 others and always the trailing partial
// chunk, and the tail never evicts, so it holds every token iff the n tokens
// it retrieves from have floor(n / C) <= B / C full chunks; n = P - 1 (the
// prompt but its last token), or P - 1 + max_new_tokens when re-retrieval may
// rebuild it from a longer committed context.
struct ResolvedMethod {
  ChainSpec chain;  // empty for ar
  std::vector<int64_t> gammas;
  int64_t budget = 0, chunk = 0, sink = 0, window = 0;
  // How the bottom draft of a named method was chosen: "given" (--draft),
  // "trained" (the default model's trained draft, speculative/default_draft.h),
  // "layerskip" (the default for any other target); "" when the method has none.
  std::string draft_choice;
  // The middle levels removed because their retrieval budget covers the whole
  // context (their specs as in the requested chain); empty when none was.
  std::vector<std::string> collapsed_levels;
};
// Whether a retrieval cache of `budget`/`chunk` retrieving from n tokens keeps all of them.
bool retrieval_covers(int64_t budget, int64_t chunk, int64_t n);
ResolvedMethod resolve(const LlamaModel& target, const MethodRequest& req, int64_t prompt_len);

// ---- outcome ----
struct LevelOutcome {
  int level = 0;        // 1 .. N-1: this level verified the proposals of level - 1
  std::string spec;     // e.g. "target@retrieval:64/8"
  int64_t gamma = 0;    // what the level below proposed per call
  int64_t steps = 0, drafted = 0, accepted = 0;
  int64_t rejected = 0;  // steps ending in a rejection; accepted / (accepted + rejected) = per-token α
  double alpha = 0, tau = 0;
  std::vector<int64_t> accepted_hist;  // [n] = steps that accepted exactly n
  double avg_tokens = 0;  // top level only: generated / steps (the reference's avg_tokens)
  int64_t ns = 0;         // this level's forwards + verification
};

struct PhaseTimes {  // nanoseconds
  int64_t prefill = 0;            // the target's prompt prefill (the snapshot's, when reused)
  int64_t setup = 0;              // copies from the snapshot into the method's caches, and graph_warmup
  int64_t graph_warmup = 0;       // ChainOptions::warm_step_graphs (counted in setup, not in decode)
  int64_t retrieval_build = 0;    // chunk scoring and gathering of every retrieval level
  int64_t draft_prefill = 0;      // the StreamingLLM draft absorbing the prompt (StreamingDrafter::begin)
  int64_t draft = 0;              // the bottom level proposing
  int64_t middle = 0;             // levels between the drafter and the top
  int64_t verify = 0;             // the top level (for ar: every decode forward)
  int64_t retrieval_rebuild = 0;  // re-retrievals
  int64_t decode = 0;             // the whole generation loop (draft + middle + verify + rebuilds + bookkeeping)
  int64_t total = 0;              // prefill + setup + retrieval_build + draft_prefill + decode
};

struct MethodOutcome {
  std::string method;
  ResolvedMethod resolved;
  std::vector<int32_t> tokens;
  bool stopped_at_eos = false;
  std::vector<LevelOutcome> levels;  // empty for ar
  std::vector<StepRecord> steps;     // per top step; empty for ar
  PhaseTimes times;
  bool prefill_reused = false;   // the snapshot was given by the caller
  double decode_ms_per_token = 0;  // times.decode / tokens
  double e2e_ms_per_token = 0;     // times.total / tokens
  int64_t retrieval_rebuilds = 0;
  // Per generated token, how the top level committed it: 'a' accepted draft,
  // 'r' resampled after a rejection, 'b' bonus; empty for ar.
  std::string token_kinds;
  // The request's simulated acceptance rates; empty for a real run. In --json
  // "simulated_acceptance": [A1, ...], or false for a real run.
  std::vector<double> simulated_acceptance;
  // T > 0 only: the rows and draws stayed on the device (speculative/device_sampler.h)
  // rather than coming to the host as logits.
  bool device_sampling = false;
  // How each model's steps ran during the decode (this rank's, on CUDA; zeros
  // on the CPU): "target" and each draft model by its level spec. Step
  // benchmarks replay graphs; a run's captures and eager first uses are what
  // its mean step time pays beyond them.
  struct GraphSteps {
    std::string model;
    int64_t captures = 0, replays = 0, eager = 0;
    int64_t attention_split_slots = 0;
  };
  std::vector<GraphSteps> graph_steps;
  // Every field above (times in ms as *_ms), plus the CLI's summary keys.
  nlohmann::json to_json() const;
};

// Draft checkpoints (model:PATH levels) loaded once and kept for later calls.
class DraftModels {
 public:
  // Loads PATH (HF folder or GGUF) on first use, or makes a synthetic:NAME
  // model on the target's device and dtype (seeded apart from a synthetic
  // target); refuses a vocabulary other than the target's.
  LlamaModel& get(const std::string& path, const LlamaModel& target);
  // A model already in memory, used for model:NAME levels (tests, preloaded sweeps).
  void put(const std::string& name, std::unique_ptr<LlamaModel> m) { models_[name] = std::move(m); }
  // A model put or loaded under this name, or nullptr.
  LlamaModel* find(const std::string& name) const {
    auto it = models_.find(name);
    return it == models_.end() ? nullptr : it->second.get();
  }

 private:
  std::map<std::string, std::unique_ptr<LlamaModel>> models_;
};

// Runs one method on one prompt. snapshot: the target's prefill of exactly
// this prompt (nullptr: run_method takes its own); under a driven
// tensor-parallel job it must come from parallel::TargetLevels::snapshot (the
// workers hold its mirror). drafts: where model:PATH drafts (and, driven,
// layer-skip drafts) are cached (nullptr: loaded for this call only). Every
// level on the target is made through parallel::TargetLevels, so on rank 0 of a
// driven job the workers mirror it; drafts on other models run here alone.
// Bad requests fail with one line naming the option (--method, --chain,
// --gammas, --budget, ...).
MethodOutcome run_method(LlamaModel& target, const MethodRequest& req, const std::vector<int32_t>& prompt,
                         const PrefillSnapshot* snapshot = nullptr, DraftModels* drafts = nullptr);
// The same on a snapshot used for this call only: with an offloaded target
// (--offload-kv) the top level (or ar) adopts the snapshot's cache instead of
// copying it, when its capacity suffices (take it with PrefillSnapshot's
// capacity argument = prompt + max_new_tokens + 64). Without offload it is run_method.
MethodOutcome run_method_consuming(LlamaModel& target, const MethodRequest& req, const std::vector<int32_t>& prompt,
                                   PrefillSnapshot& snapshot, DraftModels* drafts = nullptr);

}  // namespace tf::speculative
