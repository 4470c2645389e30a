#include "cli/sweep_options.h"

#include "core/check.h"
#include "speculative/reretrieval.h"

namespace tf::cli {

void add_sweep_options(po::options_description& desc) {
  desc.add_options()("target", po::value<std::string>(), "HF checkpoint folder or .gguf (default: the embedded model)")(
      "device", po::value<std::string>()->default_value("cpu"), "cpu | cuda")(
      "dtype", po::value<std::string>()->default_value("bf16"), "CUDA storage dtype: f16 | bf16")(
      "no-cuda-graphs", po::bool_switch(), "CUDA: run every step eagerly instead of replaying CUDA graphs")(
      "name", po::value<std::string>()->default_value("sweep"), "a name for the sweep (root attribute)")(
      "method", po::value<std::string>()->default_value("triforce"),
      "methods: ar, spec, retrieval, streaming-hier, triforce, ngram-triforce (ar always runs as the baseline)")(
      "draft", po::value<std::string>()->default_value(""), "drafts: PATH | synthetic:NAME | layerskip:K | ngram:N (empty: default)")(
      "context", po::value<std::string>(), "context lengths: each prompt is cut to its first N tokens")(
      "max-new-tokens", po::value<std::string>()->default_value("64"), "tokens generated per run")(
      "budget", po::value<std::string>()->default_value(""), "retrieval budgets (empty: the method's default)")(
      "chunk-size", po::value<std::string>()->default_value(""), "retrieval chunk sizes (empty: 8)")(
      "gamma1", po::value<std::string>()->default_value(""), "the drafter's tokens per call (empty: default)")(
      "gamma2", po::value<std::string>()->default_value(""), "the middle level's block (empty: default 6)")(
      "sink", po::value<std::string>()->default_value(""), "draft StreamingLLM sinks (empty: 16)")(
      "window", po::value<std::string>()->default_value(""), "draft StreamingLLM windows (empty: default)")(
      "reretrieve", po::value<std::string>()->default_value(""), "re-retrieval policies: never | every:N | below:A")(
      "simulate-acceptance", po::value<std::string>(),
      "simulated acceptance (systems studies; docs/RESULTS.md): entries 'none' (a real run) or one rate per "
      "verifying level, bottom first, separated by '/', a|b|c for alternatives (cross product), e.g. "
      "'0.2|0.5|0.8/0.8|0.9|0.98, none'. A tuple goes to the methods with that many verifying levels; ar is never "
      "simulated. Absent: real runs only")(
      "temperature", po::value<std::string>()->default_value("0"), "sampling temperatures")(
      "top-p", po::value<std::string>()->default_value("1"), "nucleus masses")(
      "seed", po::value<std::string>()->default_value("0"), "seeds")(
      "repetitions", po::value<std::string>()->default_value("1"), "runs of every point (timing spread)")(
      "ignore-eos", po::value<bool>()->default_value(true), "generate max-new-tokens even past EOS")(
      "prompt", po::value<std::vector<std::string>>(), "a prompt text (repeatable)")(
      "prompt-file", po::value<std::string>(), "text files, tokenized with the target's tokenizer")(
      "prompt-tokens", po::value<std::string>(), "token arrays: FILE.npy or FILE.h5:/dataset (2-D: a prompt per row)")(
      "prompt-set", po::value<std::string>(),
      "documents of the prompt folder: default (all) or name prefixes, e.g. kjv,devils")(
      "prompt-tokenizer", po::value<std::string>()->default_value(""),
      "a checkpoint or .gguf whose tokenizer encodes text prompts (default: the target's; ids must fit its vocabulary)")(
      "prompt-dir", po::value<std::string>()->default_value(""),
      "the prompt folder (default $TRIFORCE_CACHE/prompts, filled by experiments/prompts/make_default_prompts.sh)")(
      "out", po::value<std::string>(), "the HDF5 results file (resumed when it exists)")(
      "shard", po::value<std::string>()->default_value("0/1"), "run shard I of N of the grid (I/N)")(
      "dry-run", po::bool_switch(), "print the grid, the memory plan and a time estimate; run nothing")(
      "quiet", po::bool_switch(), "no progress lines")(
      "full-hierarchy", po::bool_switch(),
      "keep a middle target@retrieval level even when its budget covers the whole context (each run records "
      "collapsed_levels)")(
      "est-gflops", po::value<double>(), "--dry-run: sustained FLOP/s in GFLOP/s (default cpu 20, cuda 400000)")(
      "est-gbps", po::value<double>(), "--dry-run: memory bandwidth in GB/s (default cpu 5, cuda 3000)")(
      "tp-mode", po::value<std::string>()->default_value("driven"),
      "under mpirun -np N (N > 1): driven = rank 0 runs every point (and holds the drafts), the workers serve its "
      "target steps; lockstep = every rank runs every point on its shard");
}

std::vector<std::string> list_or_empty(const po::variables_map& vm, const std::string& k) {
  if (!vm.count(k)) return {};
  const auto s = vm[k].as<std::string>();
  if (s.find_first_not_of(" \t") == std::string::npos) return {};
  return sweep::parse_string_list(k, s);
}

namespace {

std::vector<int64_t> ints_or_empty(const po::variables_map& vm, const std::string& k) {
  if (!vm.count(k)) return {};
  const auto s = vm[k].as<std::string>();
  if (s.find_first_not_of(" \t") == std::string::npos) return {};
  return sweep::parse_int_list(k, s);
}

}  // namespace

sweep::GridSpec grid_from_options(const po::variables_map& vm) {
  sweep::GridSpec g;
  g.methods = list_or_empty(vm, "method");
  for (const auto& m : g.methods)
    TF_CHECK(m == "ar" || m == "spec" || m == "retrieval" || m == "streaming-hier" || m == "triforce" ||
                 m == "ngram-triforce",
             "--method " << m << ": expected ar, spec, retrieval, streaming-hier, triforce or ngram-triforce");
  g.drafts = list_or_empty(vm, "draft");
  g.contexts = ints_or_empty(vm, "context");
  g.max_new = ints_or_empty(vm, "max-new-tokens");
  g.budgets = ints_or_empty(vm, "budget");
  g.chunks = ints_or_empty(vm, "chunk-size");
  g.gamma1 = ints_or_empty(vm, "gamma1");
  g.gamma2 = ints_or_empty(vm, "gamma2");
  g.sinks = ints_or_empty(vm, "sink");
  g.windows = ints_or_empty(vm, "window");
  g.reretrieve = list_or_empty(vm, "reretrieve");
  for (const auto& r : g.reretrieve) speculative::ReretrievePolicy::parse(r);
  if (vm.count("simulate-acceptance"))
    g.simulate_acceptance = sweep::parse_simulate_list("simulate-acceptance", vm["simulate-acceptance"].as<std::string>());
  g.temperatures = sweep::parse_real_list("temperature", vm["temperature"].as<std::string>());
  g.top_ps = sweep::parse_real_list("top-p", vm["top-p"].as<std::string>());
  for (auto s : sweep::parse_int_list("seed", vm["seed"].as<std::string>())) {
    TF_CHECK(s >= 0, "--seed: expected non-negative seeds, got " << s);
    g.seeds.push_back(uint64_t(s));
  }
  const auto reps = sweep::parse_int_list("repetitions", vm["repetitions"].as<std::string>());
  TF_CHECK(reps.size() == 1, "--repetitions: expected one number");
  g.repetitions = reps[0];
  return g;
}

}  // namespace tf::cli
