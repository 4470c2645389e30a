// HF config.json -> ModelConfig (required keys, types, rope_scaling /
// rope_parameters, validation), then what `triforce info` prints of it.
#include "fuzz_input.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tf::ModelConfig c =
        tf::config_from_hf_json_text(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    c.describe();
    c.param_count();
  } catch (const tf::Error&) {
  }
  return 0;
}
