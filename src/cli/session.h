// What a subcommand needs to run a model: the opened checkpoint (or a
// synthetic model), the model built from it on the requested device, a KV
// cache sized for the request, and the tokenizer.
#pragma once
#include <memory>
#include <boost/program_options.hpp>
#include <string>

#include "kv/full_cache.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/memory_plan.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

struct DeviceChoice {
  Device device = Device::CPU;
  DType dtype = DType::F32;  // f32 on the CPU; f16 or bf16 on CUDA
  int64_t max_chunk = 0;     // prefill chunk; 0: 512 on the CPU, 2048 on CUDA
  int64_t plan_context = 0;  // tokens the memory plan reserves (0: kv capacity, else 4096)
  PlanRequest plan;          // method-specific parts of the plan (retrieval, draft)
  KVOffloadOptions offload;  // --offload-kv / --on-chip-layers: the target's full caches
};

// The prefill chunk of an offloaded run: each chunk streams the whole prefix
// through the staging slots once, so large chunks move the KV few times.
constexpr int64_t kOffloadPrefillChunk = 8192;
// The prefill chunk on the GPU: at 7B/131,072 tokens on the H200, 8192 beats 2048 with either attention
// backend (cuDNN 10.79 vs 11.06 s, ours 13.91 vs 14.16 s) and builds a quarter of cuDNN's graphs
// (results/h200/prefill).
constexpr int64_t kCudaPrefillChunk = 8192;

// Adds --offload-kv and --on-chip-layers to a subcommand's options.
void add_offload_options(boost::program_options::options_description& desc);
// Reads them into dev.offload; a one-line error on the CPU device or a bad K.
void apply_offload_options(const boost::program_options::variables_map& vm, int64_t num_layers, DeviceChoice& dev);

// --device cpu|cuda and --dtype f16|bf16 (ignored on the CPU) as a DeviceChoice.
DeviceChoice parse_device(const std::string& device, const std::string& dtype);

struct Session {
  std::string path;
  DeviceChoice dev;
  MemoryPlan plan;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<FullKVCache> cache;
  std::unique_ptr<Tokenizer> tokenizer;
  const ModelConfig& config() const { return model->config(); }
};

// On CUDA the memory plan is checked against the free device memory before
// any weight is read or buffer allocated.
Session open_session(const std::string& path, int64_t kv_capacity, bool with_tokenizer,
                     const DeviceChoice& dev = {});

// Config of a path without reading weights (checkpoints and synthetic:NAME).
ModelConfig peek_config(const std::string& path);

}  // namespace tf::cli
