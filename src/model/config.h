// ModelConfig: everything the forward needs to know about a Llama-family model,
// filled from HF config.json (io/hf_config) or GGUF metadata (io/gguf).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tf {

struct RopeScaling {
  std::string type = "none";  // none | linear | dynamic | yarn | llama3
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // 0: use max_position_embeddings
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derive as transformers does
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

struct ModelConfig {
  std::string architecture = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype = "float32";

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t param_count() const;
  void validate(const std::string& source) const;  // throws naming `source`
  std::string describe() const;
};

}  // namespace tf
