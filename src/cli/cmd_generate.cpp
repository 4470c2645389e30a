// triforce generate: one decoding method (ar or a speculative chain, all
// through speculative::run_method) on one prompt; prints the text, per-level α/τ and
// ms/token, and with --json one JSON object as the last line. --compare M runs
// a second method on the same prefill and checks that the tokens agree.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "core/device.h"
#include "parallel/launch.h"
#include "parallel/step_driver.h"
#include "parallel/target_levels.h"
#include "parallel/tensor_parallel.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "parallel/gpu_comm.h"
#endif
#include "speculative/methods.h"
#include "speculative/reretrieval.h"
#include "speculative/simulate.h"

namespace tf::cli {

namespace {

const char* kChainHelp =
    "a chain of any depth, bottom (drafter) first, levels separated by '>':\n"
    "  level  := source[@cache]\n"
    "  source := ngram:N | layerskip:K | model:PATH | target\n"
    "  cache  := full | streaming[:S/W] | retrieval[:B/C]\n"
    "the last level must be 'target' (full cache); ngram only at the bottom; e.g.\n"
    "'ngram:3 > layerskip:4@streaming:16/234 > target@retrieval:4096/8 > target'";

const char* kMethodHelp =
    "ar | spec | retrieval | streaming-hier | triforce | ngram-triforce | chain\n"
    "  spec            D > target\n"
    "  retrieval       target@retrieval:B/C > target\n"
    "  streaming-hier  D@streaming:S/W > target@streaming:16/(B-16) > target\n"
    "                  (the middle cache holds B tokens: sink min(16, B/2))\n"
    "  triforce        D@streaming:S/W > target@retrieval:B/C > target\n"
    "  ngram-triforce  ngram:3 > target@retrieval:B/C > target\n"
    "  chain           --chain SPEC\n"
    "(D = --draft)";

const char* kBudgetHelp =
    "retrieval budget B (tokens per layer and KV head; also the streaming-hier middle cache). "
    "Default: the paper's 4096 scaled to the prompt: chunk * clamp(floor((P-1) / (4 * chunk)), 1, 4096 / chunk), "
    "i.e. a quarter of the prompt, at most 4096, at least one chunk";

const char* kWindowHelp =
    "draft StreamingLLM recent window W. Default: the paper's 256-slot draft cache (16 + 234 at gamma2 = 6) "
    "at any prompt length: max(chunk, 256 - sink - gamma_top)";

const char* kSimulateHelp =
    "systems studies: accept each drafted token with probability A (a Philox stream of its own per level), "
    "whatever the distributions say, one rate per verifying level, bottom first (triforce: A1 = draft -> "
    "retrieval level, A2 = retrieval level -> target), e.g. 0.35,0.9137. Forwards, rollbacks and re-retrieval "
    "run for real; a rejection emits what a real rejection would. The tokens are NOT the target's; every output "
    "says SIMULATED. Refused for ar";

const char* kTpModeHelp =
    "how the ranks of mpirun -np N (N > 1) work together: driven = rank 0 holds the draft and runs the method, "
    "the workers serve the target steps it broadcasts (prefill, forwards on the full/retrieval/streaming cache, "
    "rollback, re-retrieval); lockstep = every rank runs the method (and its draft) on its shard. A layerskip:K "
    "draft under driven is the target's first K layers read whole by rank 0";

// The "tp" object of --json: per rank, tokens forwarded by every model of the
// process and by the target (driven: the workers forward only the target's
// steps, so a draft shows up on rank 0 alone), and the step protocol's traffic.
nlohmann::json tp_json(const LlamaModel& target) {
  const std::vector<int64_t> c = parallel::rank_counters(target);
  nlohmann::json j;
  j["size"] = parallel::world().size;
  j["mode"] = !parallel::tp_active() ? "none" : parallel::tp_driven() ? "driven" : "lockstep";
#ifdef TRIFORCE_HAVE_CUDA
  if (parallel::tp_active() && target.device() == Device::CUDA) j["comm"] = parallel::gpu_communicator_kind();  // nccl | host-staged
#endif
  std::vector<int64_t> all, tgt, ops;
  for (size_t r = 0; r + 2 < c.size(); r += 3) {
    all.push_back(c[r]);
    tgt.push_back(c[r + 1]);
    ops.push_back(c[r + 2]);
  }
  j["forwarded_tokens"] = all;
  j["target_forwarded_tokens"] = tgt;
  if (parallel::tp_driven()) {
    const parallel::ChannelStats& st = parallel::step_driver().stats();
    j["ops"] = ops;
    j["batches"] = st.batches;
    j["bytes"] = st.bytes;
    j["bcast_ms"] = st.bcast_s * 1e3;
  }
  return j;
}

std::vector<int64_t> parse_gammas(const std::string& csv) {
  std::vector<int64_t> g;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    TF_CHECK(!item.empty() && end && *end == '\0' && v >= 1,
             "--gammas " << csv << ": expected comma-separated integers >= 1, bottom level first (e.g. 2,6)");
    g.push_back(v);
  }
  TF_CHECK(!g.empty(), "--gammas: expected comma-separated integers >= 1, bottom level first (e.g. 2,6)");
  return g;
}

void print_levels(const speculative::MethodOutcome& o) {
  if (!o.resolved.draft_choice.empty() && !o.resolved.chain.levels.empty())
    std::fprintf(stderr, "  [%s] draft: %s (%s)\n", o.method.c_str(), o.resolved.chain.levels[0].str().c_str(),
                 o.resolved.draft_choice == "trained"     ? "the trained default draft for this target"
                 : o.resolved.draft_choice == "layerskip" ? "default: no trained draft for this target"
                                                          : "--draft");
  for (const auto& c : o.resolved.collapsed_levels)
    std::fprintf(stderr,
                 "  [%s] level %s dropped: its budget covers the whole context, so it would compute the target's "
                 "own distribution at the target's cost (--full-hierarchy keeps it)\n",
                 o.method.c_str(), c.c_str());
  for (const auto& l : o.levels) {
    std::fprintf(stderr, "  [%s level %d: %s, gamma %lld] alpha %.3f, tau %.2f over %lld steps", o.method.c_str(),
                 l.level, l.spec.c_str(), (long long)l.gamma, l.alpha, l.tau, (long long)l.steps);
    // Simulated: the rate each decision was drawn with against what the decisions gave.
    if (!o.simulated_acceptance.empty() && l.accepted + l.rejected > 0)
      std::fprintf(stderr, "; SIMULATED at %g: %.3f per decision", o.simulated_acceptance[size_t(l.level - 1)],
                   double(l.accepted) / double(l.accepted + l.rejected));
    std::fprintf(stderr, "\n");
  }
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  po::options_description desc("generate options");
  desc.add_options()("target", po::value<std::string>(), "HF checkpoint folder or .gguf (default: the embedded model)")(
      "prompt", po::value<std::string>(), "prompt text")("prompt-file", po::value<std::string>(), "prompt text file")(
      "prompt-tokens", po::value<std::string>(), "pre-tokenized prompt: one id per line, or .npy int32")(
      "max-new-tokens", po::value<int64_t>()->default_value(128), "tokens to generate")(
      "temperature", po::value<float>()->default_value(0.0f), "sampling temperature; 0 = greedy")(
      "top-p", po::value<float>()->default_value(1.0f), "nucleus sampling mass (1 = off)")(
      "seed", po::value<uint64_t>()->default_value(0), "Philox seed of the sampling stream")(
      "device", po::value<std::string>()->default_value("cpu"), "cpu | cuda")(
      "dtype", po::value<std::string>()->default_value("bf16"), "CUDA weights, activations and KV: f16 | bf16")(
      "method", po::value<std::string>()->default_value("ar"), kMethodHelp)(
      "chain", po::value<std::string>(), kChainHelp)(
      "compare", po::value<std::string>(),
      "also run this method (e.g. ar) on the same prefill; print both and whether the tokens are identical")(
      "draft", po::value<std::string>()->default_value(""),
      "D: PATH (a checkpoint sharing the target's vocabulary) | synthetic:NAME | layerskip:K | ngram:N; "
      "default: the trained draft when the target is the model it was trained for (SmolLM2-135M-Instruct: "
      "experiments/draft/smollm2-135m-draft, or $TRIFORCE_DEFAULT_DRAFT; none turns it off), else "
      "layerskip:<a quarter of the target's layers>")(
      "gammas", po::value<std::string>(),
      "tokens each drafting level proposes per call, bottom first (e.g. 2,6). Default: spec 4, retrieval 6, "
      "3-level methods 2,6 (the paper's gamma1 = 2, gamma2 = 6); chain: 2 at the bottom, 6 above")(
      "gamma1", po::value<int64_t>(), "the bottom level's gamma (the first of --gammas)")(
      "gamma2", po::value<int64_t>(), "the second level's gamma (3+ level chains)")(
      "budget", po::value<int64_t>()->default_value(0), kBudgetHelp)(
      "chunk-size", po::value<int64_t>()->default_value(8), "retrieval chunk size")(
      "sink", po::value<int64_t>()->default_value(16), "StreamingLLM sink tokens (draft and streaming-hier middle)")(
      "window", po::value<int64_t>()->default_value(0), kWindowHelp)(
      "reretrieve", po::value<std::string>()->default_value("never"),
      "when a retrieval level rebuilds its cache: never | every:N (generated tokens) | below:A (rolling acceptance)")(
      "simulate-acceptance", po::value<std::string>(), kSimulateHelp)(
      "full-hierarchy", po::bool_switch(),
      "keep a middle target@retrieval level even when its budget covers the whole context (by default it is "
      "dropped: it would compute the target's own distribution at the target's cost)")(
      "verbose", po::bool_switch(), "color tokens: accepted draft green, resampled yellow, bonus blue")(
      "ignore-eos", po::bool_switch(), "do not stop at the end-of-sequence token")(
      "json", po::bool_switch(), "print one JSON object with the result as the last line")(
      "tp-mode", po::value<std::string>()->default_value("driven"), kTpModeHelp)(
      "no-cuda-graphs", po::bool_switch(), "CUDA: run every step eagerly instead of replaying CUDA graphs (for comparison)");
  add_offload_options(desc);
  po::variables_map vm;
  if (!parse("generate", args, desc, vm)) return 0;
  parallel::set_tp_mode(parallel::parse_tp_mode(vm["tp-mode"].as<std::string>()));
  set_cuda_graphs_default(!vm["no-cuda-graphs"].as<bool>());  // before any model exists

  const int64_t n_prompt_sources = vm.count("prompt") + vm.count("prompt-file") + vm.count("prompt-tokens");
  TF_CHECK(n_prompt_sources == 1, "generate: give exactly one of --prompt, --prompt-file and --prompt-tokens");
  speculative::MethodRequest req;
  req.max_new_tokens = vm["max-new-tokens"].as<int64_t>();
  TF_CHECK(req.max_new_tokens >= 1, "--max-new-tokens: expected at least 1, got " << req.max_new_tokens);
  SamplingParams& sp = req.sampling;
  sp.temperature = vm["temperature"].as<float>();
  sp.top_p = vm["top-p"].as<float>();
  sp.seed = vm["seed"].as<uint64_t>();
  TF_CHECK(sp.temperature >= 0.0f, "--temperature: expected >= 0, got " << sp.temperature);
  TF_CHECK(sp.top_p > 0.0f && sp.top_p <= 1.0f, "--top-p: expected a value in (0, 1], got " << sp.top_p);
  const std::string device = vm["device"].as<std::string>();
  DeviceChoice dev = parse_device(device, vm["dtype"].as<std::string>());
  // Phase clocks read after the device finishes (the forward's logits copy
  // already waits; this covers the caches' device copies too).
  if (dev.device == Device::CUDA) req.device_sync = [] { device_synchronize(); };
  const std::string path = vm.count("target") ? vm["target"].as<std::string>() : default_model_path();
  apply_offload_options(vm, peek_config(path).num_layers, dev);
  // --compare with --offload-kv: the first method copies the snapshot's
  // pinned cache, the second adopts it, so two full caches are pinned at once.
  if (dev.offload.enabled && vm.count("compare")) dev.plan.kv_copies = 2;

  req.method = vm["method"].as<std::string>();
  if (vm.count("chain")) {
    TF_CHECK(req.method == "ar" || req.method == "chain",
             "--chain: composes its own chain; drop --method " << req.method << " (or use --method chain)");
    req.method = "chain";
    req.chain = vm["chain"].as<std::string>();
    speculative::ChainSpec::parse(req.chain);  // a bad spec fails before the model is read
  }
  req.draft = vm["draft"].as<std::string>();
  req.budget = vm["budget"].as<int64_t>();
  req.chunk = vm["chunk-size"].as<int64_t>();
  req.sink = vm["sink"].as<int64_t>();
  req.window = vm["window"].as<int64_t>();
  req.reretrieve = vm["reretrieve"].as<std::string>();
  speculative::ReretrievePolicy::parse(req.reretrieve);
  req.full_hierarchy = vm["full-hierarchy"].as<bool>();
  TF_CHECK(req.budget >= 0, "--budget: expected a positive multiple of --chunk-size (0 = default), got " << req.budget);
  TF_CHECK(req.window >= 0, "--window: expected at least 1 (0 = default), got " << req.window);
  if (vm.count("gammas")) req.gammas = parse_gammas(vm["gammas"].as<std::string>());
  if (vm.count("simulate-acceptance")) {
    req.simulate_acceptance =
        speculative::parse_acceptance_rates(vm["simulate-acceptance"].as<std::string>(), "--simulate-acceptance");
    TF_CHECK(req.method != "ar", "--simulate-acceptance: method ar verifies nothing (ar is the real baseline); "
                                 "simulate a speculative method (e.g. --method triforce)");
  }

  std::vector<int32_t> prompt;
  std::string prompt_text;
  if (vm.count("prompt-tokens")) {
    prompt = read_token_file(vm["prompt-tokens"].as<std::string>());
  } else if (vm.count("prompt-file")) {
    const auto f = vm["prompt-file"].as<std::string>();
    std::ifstream in(f, std::ios::binary);
    TF_CHECK(in, "--prompt-file " << f << ": cannot open file");
    std::stringstream ss;
    ss << in.rdbuf();
    prompt_text = ss.str();
  } else {
    prompt_text = vm["prompt"].as<std::string>();
  }

  // A pre-tokenized prompt needs no tokenizer; the text is then decoded only
  // when the checkpoint has one. Each method sizes its own caches.
  // The memory plan reserves the full cache of this request (a text prompt is
  // counted once tokenized; until then the plan assumes 4096 tokens of it).
  dev.plan_context = (prompt.empty() ? 4096 : int64_t(prompt.size())) + req.max_new_tokens + 64;
  Session s = open_session(path, /*kv_capacity=*/0, /*with_tokenizer=*/prompt.empty(), dev);
  if (parallel::tp_driven() && parallel::is_worker()) {
    parallel::serve_steps(*s.model);  // rank 0 decides everything from here on; shutdown ends it
    return 0;
  }
  if (!s.tokenizer) {
    try {
      s.tokenizer = load_tokenizer(path);
    } catch (const tf::Error&) {
    }
  }
  if (prompt.empty()) prompt = s.tokenizer->encode(prompt_text, true);
  TF_CHECK(!prompt.empty(), "generate: the prompt encodes to no tokens");
  for (auto t : prompt)
    TF_CHECK(t >= 0 && t < s.config().vocab_size, "--prompt-tokens: id " << t << " is outside the vocabulary of "
                                                                           << s.config().vocab_size);
  if (!vm["ignore-eos"].as<bool>()) req.stop_ids = s.config().eos_token_ids;

  if (vm.count("gamma1") || vm.count("gamma2")) {
    if (req.gammas.empty()) req.gammas = speculative::resolve(*s.model, req, int64_t(prompt.size())).gammas;
    TF_CHECK(!req.gammas.empty(), "--gamma1/--gamma2: method " << req.method << " does not draft");
    if (vm.count("gamma1")) req.gammas[0] = vm["gamma1"].as<int64_t>();
    if (vm.count("gamma2")) {
      TF_CHECK(req.gammas.size() >= 2, "--gamma2: method " << req.method << " has no middle level (use --gamma1)");
      req.gammas[1] = vm["gamma2"].as<int64_t>();
    }
    for (int64_t g : req.gammas) TF_CHECK(g >= 1, "--gamma1/--gamma2: expected at least 1, got " << g);
  }

  // A wrong rate count fails before the prefill.
  if (!req.simulate_acceptance.empty())
    speculative::check_simulated_acceptance(req.simulate_acceptance, req.method,
                                            speculative::resolve(*s.model, req, int64_t(prompt.size())));

  // One prefill serves both methods of a --compare.
  speculative::DraftModels drafts;
  req.target_path = path;
  // Offloaded, the snapshot has room for the generation: the last method run
  // on it adopts its pinned cache instead of copying it.
  std::unique_ptr<speculative::PrefillSnapshot> snap = parallel::TargetLevels(*s.model).snapshot(
      prompt, speculative::PhaseClock(), dev.offload.enabled ? int64_t(prompt.size()) + req.max_new_tokens + 64 : 0);
  speculative::MethodOutcome o = vm.count("compare") ? speculative::run_method(*s.model, req, prompt, snap.get(), &drafts)
                                              : speculative::run_method_consuming(*s.model, req, prompt, *snap, &drafts);
  o.prefill_reused = false;  // this run's own prefill
  std::unique_ptr<speculative::MethodOutcome> cmp;
  if (vm.count("compare")) {
    speculative::MethodRequest other;
    other.method = vm["compare"].as<std::string>();
    other.sampling = req.sampling;
    other.max_new_tokens = req.max_new_tokens;
    other.device_sync = req.device_sync;
    other.stop_ids = req.stop_ids;
    other.chunk = req.chunk;
    other.sink = req.sink;
    other.target_path = path;
    cmp = std::make_unique<speculative::MethodOutcome>(speculative::run_method_consuming(*s.model, other, prompt, *snap, &drafts));
  }

  auto text_of = [&](const std::vector<int32_t>& toks) {
    if (s.tokenizer) return s.tokenizer->decode(toks, true);
    std::string t;
    for (auto x : toks) t += (t.empty() ? "" : " ") + std::to_string(x);
    return t;
  };
  const std::string text = text_of(o.tokens);
  if (cmp) std::cout << "=== " << o.method << ": " << (o.resolved.chain.levels.empty() ? "target" : o.resolved.chain.str())
                     << " ===\n";
  if (vm["verbose"].as<bool>() && s.tokenizer && !o.token_kinds.empty()) {
    // Decode token by token so each one can carry its color.
    std::cout << prompt_text;
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      const char k = i < o.token_kinds.size() ? o.token_kinds[i] : ' ';
      const char* color = k == 'a' ? "\033[32m" : k == 'r' ? "\033[33m" : k == 'b' ? "\033[34m" : "";
      std::cout << color << s.tokenizer->decode({o.tokens[i]}, true) << (*color ? "\033[0m" : "");
    }
    std::cout << "\n";
    std::fprintf(stderr, "colors: \033[32maccepted draft\033[0m, \033[33mresampled\033[0m, \033[34mbonus\033[0m\n");
  } else {
    std::cout << prompt_text << text << "\n";
  }
  auto summary = [&](const speculative::MethodOutcome& x) {
    std::fprintf(stderr,
                 "  [%s] %lld prompt tokens, %lld generated: prefill %.1f ms, decode %.2f ms/token (%.1f tokens/s), "
                 "end to end %.2f ms/token\n",
                 x.method.c_str(), (long long)prompt.size(), (long long)x.tokens.size(), x.times.prefill / 1e6,
                 x.decode_ms_per_token, x.decode_ms_per_token > 0 ? 1000.0 / x.decode_ms_per_token : 0.0,
                 x.e2e_ms_per_token);
  };
  bool identical = true;
  const bool simulated = !o.simulated_acceptance.empty();
  const std::string sim_note = "SIMULATED acceptance " + speculative::acceptance_str(o.simulated_acceptance) +
                               " (--simulate-acceptance: accept/reject decisions drawn, not verified; the tokens are "
                               "not the target's)";
  if (cmp) {
    std::cout << "=== " << cmp->method << ": "
              << (cmp->resolved.chain.levels.empty() ? "target" : cmp->resolved.chain.str()) << " ===\n"
              << prompt_text << text_of(cmp->tokens) << "\n";
    identical = cmp->tokens == o.tokens;
    size_t same = 0;
    while (same < o.tokens.size() && same < cmp->tokens.size() && o.tokens[same] == cmp->tokens[same]) ++same;
    if (simulated)
      std::cout << "identical tokens: not checked: " << o.method << " ran with SIMULATED acceptance "
                << speculative::acceptance_str(o.simulated_acceptance)
                << ", so its tokens differ from " << cmp->method << "'s by design\n";
    else
      std::cout << "identical tokens: " << (identical ? "yes" : "no") << " (" << same << " of " << o.tokens.size()
                << " agree" << (sp.greedy() ? "" : "; sampled at T > 0, so they need not") << ")\n";
  }
  if (simulated) std::fprintf(stderr, "  [%s] %s\n", o.method.c_str(), sim_note.c_str());
  print_levels(o);
  summary(o);
  if (cmp) {
    print_levels(*cmp);
    summary(*cmp);
    if (o.decode_ms_per_token > 0)
      std::fprintf(stderr, "  decode speedup of %s over %s: %.2fx\n", o.method.c_str(), cmp->method.c_str(),
                   cmp->decode_ms_per_token / o.decode_ms_per_token);
  }
  // Lockstep: every rank reaches this point (the counters are a collective).
  const nlohmann::json tp = vm["json"].as<bool>() ? tp_json(*s.model) : nlohmann::json();
  if (vm["json"].as<bool>()) {
    nlohmann::json j = o.to_json();
    j["tp"] = tp;
    j["reretrieve"] = req.reretrieve;
    j["model"] = path;
    j["device"] = device;
    j["cuda_graphs"] = s.model->cuda_graphs();  // false also where the collectives cannot be captured
    j["n_prompt"] = prompt.size();
    j["text"] = text;
    j["temperature"] = sp.temperature;
    j["top_p"] = sp.top_p;
    j["seed"] = sp.seed;
    if (cmp) {
      j["compare"] = cmp->to_json();
      j["identical_to_compare"] = simulated ? nlohmann::json(nullptr) : nlohmann::json(identical);  // null: not checked
    }
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace tf::cli
