// What a subcommand needs to run a model: the opened checkpoint (or a
// synthetic model), the model built from it on the requested device, a KV
// cache sized for the request, and the tokenizer.
#pragma once
#include <memory>
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
};

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
