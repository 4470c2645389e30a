// triforce generate: autoregressive generation; prints the text and tokens/s,
// and with --json one JSON object as the last line.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "cli/spec_methods.h"
#include "gen/autoregressive.h"

namespace tf::cli {

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
      "method", po::value<std::string>()->default_value("ar"), "ar | spec | triforce | ngram-triforce")(
      "draft", po::value<std::string>()->default_value(""), "spec drafter: PATH | layerskip:K | ngram:N")(
      "gamma1", po::value<int64_t>()->default_value(4), "tokens the drafter proposes per step")(
      "gamma2", po::value<int64_t>()->default_value(6), "tokens the middle level proposes per step")(
      "budget", po::value<int64_t>()->default_value(4096), "retrieval cache budget (tokens per layer and KV head)")(
      "chunk-size", po::value<int64_t>()->default_value(8), "retrieval chunk size")(
      "sink", po::value<int64_t>()->default_value(16), "draft StreamingLLM sink tokens")(
      "window", po::value<int64_t>()->default_value(234), "draft StreamingLLM recent window")(
      "reretrieve", po::value<std::string>()->default_value("never"), "never | every:N | below:A")(
      "verbose", po::bool_switch(), "color tokens: accepted draft green, resampled yellow, bonus blue")(
      "ignore-eos", po::bool_switch(), "do not stop at the end-of-sequence token")(
      "json", po::bool_switch(), "print one JSON object with the result as the last line");
  po::variables_map vm;
  if (!parse("generate", args, desc, vm)) return 0;

  const int64_t n_prompt_sources = vm.count("prompt") + vm.count("prompt-file") + vm.count("prompt-tokens");
  TF_CHECK(n_prompt_sources == 1, "generate: give exactly one of --prompt, --prompt-file and --prompt-tokens");
  const int64_t max_new = vm["max-new-tokens"].as<int64_t>();
  TF_CHECK(max_new >= 1, "--max-new-tokens: expected at least 1, got " << max_new);
  SamplingParams sp;
  sp.temperature = vm["temperature"].as<float>();
  sp.top_p = vm["top-p"].as<float>();
  sp.seed = vm["seed"].as<uint64_t>();
  TF_CHECK(sp.temperature >= 0.0f, "--temperature: expected >= 0, got " << sp.temperature);
  TF_CHECK(sp.top_p > 0.0f && sp.top_p <= 1.0f, "--top-p: expected a value in (0, 1], got " << sp.top_p);
  const std::string device = vm["device"].as<std::string>();
  TF_CHECK(device == "cpu" || device == "cuda", "--device: expected cpu or cuda, got '" << device << "'");
#ifndef TRIFORCE_HAVE_CUDA
  TF_CHECK(device == "cpu", "--device cuda: this build has no CUDA backend (configure with nvcc present)");
#endif
  TF_CHECK(device == "cpu", "--device cuda: the CUDA forward is not implemented yet; use --device cpu");

  const std::string path = vm.count("target") ? vm["target"].as<std::string>() : default_model_path();
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

  // Size the cache for this request only: the static buffers never grow.
  // A pre-tokenized prompt needs no tokenizer; the text is then decoded only
  // when the checkpoint has one.
  Session s = open_session(path, /*kv_capacity=*/0, /*with_tokenizer=*/prompt.empty());
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
  s.cache = std::make_unique<FullKVCache>(s.config().num_layers, s.config().num_kv_heads, s.config().head_dim,
                                          int64_t(prompt.size()) + max_new);
  std::vector<int64_t> stops;
  if (!vm["ignore-eos"].as<bool>()) stops = s.config().eos_token_ids;

  const std::string method = vm["method"].as<std::string>();
  GenerateResult r;
  nlohmann::json levels = nlohmann::json::array();
  int64_t rebuilds = 0;
  std::string kinds;
  if (method == "ar") {
    r = generate_autoregressive(*s.model, *s.cache, prompt, max_new, sp, stops);
  } else {
    SpecRequest req;
    req.method = method;
    req.draft = vm["draft"].as<std::string>();
    req.gamma1 = vm["gamma1"].as<int64_t>();
    req.gamma2 = vm["gamma2"].as<int64_t>();
    req.budget = vm["budget"].as<int64_t>();
    req.chunk = vm["chunk-size"].as<int64_t>();
    req.sink = vm["sink"].as<int64_t>();
    req.window = vm["window"].as<int64_t>();
    req.reretrieve = vm["reretrieve"].as<std::string>();
    s.cache.reset();  // each chain level owns its cache
    SpecOutcome o = run_spec_method(*s.model, req, prompt, max_new, sp, stops);
    r = o.gen;
    levels = o.levels;
    rebuilds = o.retrieval_rebuilds;
    kinds = o.token_kinds;
  }
  std::string text;
  if (s.tokenizer) {
    text = s.tokenizer->decode(r.tokens, true);
  } else {
    for (auto t : r.tokens) text += (text.empty() ? "" : " ") + std::to_string(t);
  }
  const int64_t n = int64_t(r.tokens.size());
  const double decode_ms_per_token = n > 1 ? r.decode_ms / double(n - 1) : r.prefill_ms;
  const double e2e_ms = r.prefill_ms + r.decode_ms;

  if (vm["verbose"].as<bool>() && s.tokenizer && !kinds.empty()) {
    // Decode token by token so each one can carry its color.
    std::cout << prompt_text;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const char k = i < kinds.size() ? kinds[i] : ' ';
      const char* color = k == 'a' ? "\033[32m" : k == 'r' ? "\033[33m" : k == 'b' ? "\033[34m" : "";
      std::cout << color << s.tokenizer->decode({r.tokens[i]}, true) << (*color ? "\033[0m" : "");
    }
    std::cout << "\n";
    std::fprintf(stderr, "colors: \033[32maccepted draft\033[0m, \033[33mresampled\033[0m, \033[34mbonus\033[0m\n");
  } else {
    std::cout << prompt_text << text << "\n";
  }
  for (const auto& l : levels)
    std::fprintf(stderr, "[level %d] alpha %.3f, tau %.2f over %lld steps\n", l["level"].get<int>(),
                 l["alpha"].get<double>(), l["tau"].get<double>(), (long long)l["steps"].get<int64_t>());
  std::fprintf(stderr, "[%lld prompt tokens, %lld generated] prefill %.1f ms, decode %.2f ms/token (%.1f tokens/s)\n",
               (long long)prompt.size(), (long long)n, r.prefill_ms, decode_ms_per_token,
               1000.0 / decode_ms_per_token);
  if (vm["json"].as<bool>()) {
    nlohmann::json j;
    j["method"] = method;
    j["levels"] = levels;
    j["reretrieve"] = vm["reretrieve"].as<std::string>();
    j["retrieval_rebuilds"] = rebuilds;
    j["token_kinds"] = kinds;
    j["model"] = path;
    j["device"] = device;
    j["n_prompt"] = prompt.size();
    j["tokens"] = r.tokens;
    j["text"] = text;
    j["n_generated"] = n;
    j["stopped_at_eos"] = r.stopped_at_eos;
    j["prefill_ms"] = r.prefill_ms;
    j["decode_ms_per_token"] = decode_ms_per_token;
    j["tokens_per_s"] = 1000.0 / decode_ms_per_token;
    j["e2e_ms_per_token"] = e2e_ms / double(n);
    j["temperature"] = sp.temperature;
    j["top_p"] = sp.top_p;
    j["seed"] = sp.seed;
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace tf::cli
