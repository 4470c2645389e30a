// ModelConfig: everything the forward needs to know about a Llama-family model,
// filled from HF config.json (io/hf_config) or GGUF metadata (io/gguf).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
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

// A draft that stores no embedding and borrows its target's (config.json key
// triforce_shared_embedding, io/hf_config.cpp): the target's
// model.embed_tokens.weight is its embedding and, tied, its lm_head. `target`
// holds the config fields of the model it was trained for; the fingerprint
// (L2 norms of a few embedding rows) tells that model from another of the same
// shapes. Checked against the target in model/shared_embedding.
struct SharedEmbedding {
  bool enabled = false;
  std::vector<std::pair<std::string, double>> target;  // e.g. {"num_hidden_layers", 30}
  std::vector<int64_t> fingerprint_rows;
  std::vector<double> fingerprint_norms;
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
  SharedEmbedding shared_embedding;  // enabled: the embedding is the target's (a draft)

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t param_count() const;
  // The value of a numeric config.json field by its HF name (vocab_size,
  // hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
  // num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps,
  // rope_theta); false for any other name.
  bool hf_number(const std::string& key, double& value) const;
  void validate(const std::string& source) const;  // throws naming `source`
  std::string describe() const;
};

}  // namespace tf
