// HF config.json -> ModelConfig (Llama family), with rope scaling from both
// `rope_scaling` (transformers <= 4.x) and `rope_parameters` (transformers 5.x).
#pragma once
#include <string>

#include "model/config.h"

namespace tf {

// Throws tf::Error naming the file on a missing/ill-typed key or unsupported
// rope type. The result is validated (ModelConfig::validate).
ModelConfig config_from_hf_json(const std::string& path_to_config_json);

// Same, from JSON text already read; `source` names it in error messages.
ModelConfig config_from_hf_json_text(const std::string& json_text, const std::string& source);

}  // namespace tf
