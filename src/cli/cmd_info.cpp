// triforce info: config, parameter count, bytes, and memory at --context N.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/checkpoint.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "device_info.cuh"
#endif

namespace tf::cli {

namespace {
double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }
}  // namespace

int cmd_info(const std::vector<std::string>& args) {
  po::options_description desc("info options");
  desc.add_options()("model", po::value<std::string>(), "HF checkpoint folder or .gguf (default: the embedded model)")(
      "context", po::value<int64_t>()->default_value(4096), "context length for the memory estimate");
  po::variables_map vm;
  if (!parse("info", args, desc, vm)) return 0;
  const std::string path = vm.count("model") ? vm["model"].as<std::string>() : default_model_path();
  const int64_t context = vm["context"].as<int64_t>();
  TF_CHECK(context > 0, "--context: expected a positive token count, got " << context);

  Checkpoint ck = open_checkpoint(path);
  const ModelConfig& c = ck.config;
  std::cout << "model: " << path << (ck.is_gguf ? " (GGUF)" : " (HF safetensors)") << "\n";
  std::cout << c.describe();
  const double params = double(c.param_count());
  std::printf("parameters: %.0f (%.1f M)\n", params, params / 1e6);
  const double kv_per_token_elems = 2.0 * c.num_layers * c.kv_dim();
  std::printf("weights: %.3f GiB as f32 (CPU reference), %.3f GiB as f16/bf16 (GPU)\n", gib(params * 4),
              gib(params * 2));
  std::printf("KV cache at context %lld: %.3f GiB as f32, %.3f GiB as f16 (%.0f bytes/token in f16)\n",
              (long long)context, gib(kv_per_token_elems * context * 4), gib(kv_per_token_elems * context * 2),
              kv_per_token_elems * 2);
  std::printf("total at context %lld: %.3f GiB on CPU (f32), %.3f GiB on GPU (f16)\n", (long long)context,
              gib(params * 4 + kv_per_token_elems * context * 4), gib(params * 2 + kv_per_token_elems * context * 2));
  if (context > c.max_position_embeddings)
    std::printf("note: context %lld exceeds max_position_embeddings %lld\n", (long long)context,
                (long long)c.max_position_embeddings);
#ifdef TRIFORCE_HAVE_CUDA
  std::cout << tf::cuda::device_summary();
#else
  std::cout << "CUDA: not built\n";
#endif
  return 0;
}

}  // namespace tf::cli
