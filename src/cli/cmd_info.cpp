// triforce info: config, parameter count, bytes, and memory at --context N.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "core/device.h"
#include "model/checkpoint.h"
#include "model/memory_plan.h"
#include "model/weights_device.h"
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
      "context", po::value<int64_t>()->default_value(4096), "context length for the memory estimate")(
      "device", po::value<std::string>()->default_value("cuda"), "device of the memory plan: cpu | cuda")(
      "dtype", po::value<std::string>()->default_value("bf16"), "CUDA storage dtype: f16 | bf16")(
      "method", po::value<std::string>()->default_value("ar"),
      "method whose caches the plan includes (ar | spec | retrieval | streaming-hier | triforce | ngram-triforce)")(
      "budget", po::value<int64_t>()->default_value(4096), "retrieval budget for the plan")(
      "chunk-size", po::value<int64_t>()->default_value(8), "retrieval chunk size for the plan")(
      "max-chunk", po::value<int64_t>()->default_value(0), "prefill chunk (0: 512 on CPU, 8192 on CUDA)")(
      "tp", po::value<int64_t>()->default_value(1), "tensor-parallel ranks (per-rank plan)");
  add_offload_options(desc);
  po::variables_map vm;
  if (!parse("info", args, desc, vm)) return 0;
  const std::string path = vm.count("model") ? vm["model"].as<std::string>() : default_model_path();
  const int64_t context = vm["context"].as<int64_t>();
  TF_CHECK(context > 0, "--context: expected a positive token count, got " << context);

  const bool synthetic = is_synthetic_path(path);
  const ModelConfig c = peek_config(path);
  std::cout << "model: " << path
            << (synthetic ? " (synthetic)" : path.size() > 5 && path.substr(path.size() - 5) == ".gguf" ? " (GGUF)"
                                                                                                       : " (HF safetensors)")
            << "\n";
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
  const std::string dev = vm["device"].as<std::string>(), dt = vm["dtype"].as<std::string>();
  TF_CHECK(dev == "cpu" || dev == "cuda", "--device: expected cpu or cuda, got '" << dev << "'");
  TF_CHECK(dt == "f16" || dt == "bf16", "--dtype: expected f16 or bf16, got '" << dt << "'");
  PlanRequest pr;
  pr.device = dev == "cuda" ? Device::CUDA : Device::CPU;
  pr.dtype = pr.device == Device::CPU ? DType::F32 : dt == "f16" ? DType::F16 : DType::BF16;
  pr.context = context;
  const int64_t mc = vm["max-chunk"].as<int64_t>();
  const bool offload = vm["offload-kv"].as<bool>();
  const int64_t on_chip = vm["on-chip-layers"].as<int64_t>();
  TF_CHECK(!offload || pr.device == Device::CUDA, "--offload-kv: needs --device cuda (a CPU cache already lives in host memory)");
  TF_CHECK(on_chip >= 0 && on_chip <= c.num_layers && (offload || on_chip == 0),
           "--on-chip-layers: " << on_chip << " needs --offload-kv and a value in [0, " << c.num_layers << "]");
  pr.offload_kv = offload;
  pr.on_chip_layers = on_chip;
  pr.max_chunk = mc > 0 ? mc : offload ? kOffloadPrefillChunk : (pr.device == Device::CUDA ? kCudaPrefillChunk : 512);
  const std::string method = vm["method"].as<std::string>();
  pr.retrieval = method == "triforce" || method == "retrieval" || method == "ngram-triforce";
  pr.budget = vm["budget"].as<int64_t>();
  pr.chunk = vm["chunk-size"].as<int64_t>();
  pr.tp = vm["tp"].as<int64_t>();
  TF_CHECK(pr.tp >= 1 && c.num_kv_heads >= pr.tp,
           "--tp " << pr.tp << ": " << path << " has " << c.num_kv_heads << " KV heads; the plan needs a TP size no larger");
  const MemoryPlan plan = plan_memory(c, pr);
  std::cout << "memory plan (" << dev << ", " << dtype_name(pr.dtype) << ", --method " << method << ", context "
            << context << (pr.tp > 1 ? ", per rank of --tp " + std::to_string(pr.tp) : std::string()) << "):\n"
            << plan.describe();
#ifdef TRIFORCE_HAVE_CUDA
  std::cout << tf::cuda::device_summary();
  if (pr.device == Device::CUDA && cuda_available()) {
    size_t free_b = 0, total_b = 0;
    device_memory(free_b, total_b);
    std::printf("fits on this GPU: %s (%.2f GiB free)\n", plan.total() <= double(free_b) ? "yes" : "no",
                double(free_b) / (1024.0 * 1024.0 * 1024.0));
  }
#else
  std::cout << "CUDA: not built\n";
#endif
  if (plan.host_total() > 0) {
    const double avail = kv_offload::host_available_bytes();
    std::printf("fits in host memory: %s (%.2f GiB available)\n", plan.host_total() <= avail ? "yes" : "no",
                avail / (1024.0 * 1024.0 * 1024.0));
  }
  return 0;
}

}  // namespace tf::cli
