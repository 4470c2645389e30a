#include "model/config.h"

#include <sstream>
#include <utility>

#include "core/check.h"

namespace tf {

int64_t ModelConfig::param_count() const {
  const int64_t h = hidden_size;
  const int64_t per_layer = h * q_dim()          // q_proj
                            + 2 * h * kv_dim()   // k_proj, v_proj
                            + q_dim() * h        // o_proj
                            + 3 * h * intermediate_size  // gate, up, down
                            + 2 * h;             // two RMSNorm weights
  int64_t n = num_layers * per_layer + h;
  if (!shared_embedding.enabled) n += vocab_size * h;  // a borrowed embedding is the target's memory
  if (!tie_word_embeddings) n += vocab_size * h;
  return n;
}

bool ModelConfig::hf_number(const std::string& key, double& value) const {
  const std::pair<const char*, double> fields[] = {
      {"vocab_size", double(vocab_size)},
      {"hidden_size", double(hidden_size)},
      {"intermediate_size", double(intermediate_size)},
      {"num_hidden_layers", double(num_layers)},
      {"num_attention_heads", double(num_heads)},
      {"num_key_value_heads", double(num_kv_heads)},
      {"head_dim", double(head_dim)},
      {"max_position_embeddings", double(max_position_embeddings)},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta}};
  for (const auto& [k, v] : fields)
    if (key == k) {
      value = v;
      return true;
    }
  return false;
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](const char* what, int64_t v) {
    TF_CHECK(v > 0, source << ": invalid config: " << what << " must be positive, got " << v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_layers);
  positive("num_attention_heads", num_heads);
  positive("num_key_value_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  // Sizes are used as int in places and multiplied everywhere: bound them before anything computes with them.
  for (auto [what, v] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
                         {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_layers},
                         {"num_attention_heads", num_heads}, {"num_key_value_heads", num_kv_heads},
                         {"head_dim", head_dim}, {"max_position_embeddings", max_position_embeddings}})
    TF_CHECK(v <= (int64_t(1) << 31), source << ": invalid config: " << what << " " << v << " is too large");
  {
    const double h = double(hidden_size), q = double(num_heads) * double(head_dim), kv = double(num_kv_heads) * double(head_dim);
    const double params = 2 * double(vocab_size) * h + double(num_layers) * (2 * h * q + 2 * h * kv + 3 * h * double(intermediate_size));
    TF_CHECK(params < double(int64_t(1) << 50), source << ": invalid config: about " << params
                                                        << " parameters, beyond any model this program can hold");
  }
  TF_CHECK(num_heads % num_kv_heads == 0, source << ": invalid config: num_attention_heads " << num_heads
                                                 << " is not a multiple of num_key_value_heads " << num_kv_heads);
  TF_CHECK(head_dim % 2 == 0, source << ": invalid config: head_dim " << head_dim << " must be even for RoPE");
  TF_CHECK(rms_norm_eps > 0, source << ": invalid config: rms_norm_eps must be positive, got " << rms_norm_eps);
  TF_CHECK(rope_theta > 0, source << ": invalid config: rope_theta must be positive, got " << rope_theta);
  const std::string& t = rope_scaling.type;
  TF_CHECK(t == "none" || t == "linear" || t == "dynamic" || t == "yarn" || t == "llama3",
           source << ": invalid config: unknown rope scaling type '" << t << "'");
  if (t != "none")
    TF_CHECK(rope_scaling.factor > 0,
             source << ": invalid config: rope scaling factor must be positive, got " << rope_scaling.factor);
  if (t == "llama3")
    TF_CHECK(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
             source << ": invalid config: llama3 rope scaling needs high_freq_factor > low_freq_factor, got "
                    << rope_scaling.high_freq_factor << " <= " << rope_scaling.low_freq_factor);
  if (bos_token_id >= 0)
    TF_CHECK(bos_token_id < vocab_size,
             source << ": invalid config: bos_token_id " << bos_token_id << " >= vocab_size " << vocab_size);
  for (auto e : eos_token_ids)
    TF_CHECK(e >= 0 && e < vocab_size,
             source << ": invalid config: eos_token_id " << e << " outside [0, " << vocab_size << ")");
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << "architecture: " << architecture << "\n";
  os << "layers: " << num_layers << ", hidden: " << hidden_size << ", intermediate: " << intermediate_size << "\n";
  os << "attention: " << num_heads << " heads, " << num_kv_heads << " kv heads, head_dim " << head_dim;
  if (num_kv_heads > 0 && num_heads != num_kv_heads) os << " (GQA group " << num_heads / num_kv_heads << ")";
  os << "\n";
  os << "vocab: " << vocab_size << ", tied embeddings: " << (tie_word_embeddings ? "yes" : "no")
     << (shared_embedding.enabled ? ", embedding borrowed from the target (a draft)" : "") << "\n";
  os << "max positions: " << max_position_embeddings << ", rms_norm_eps: " << rms_norm_eps << "\n";
  os << "rope: theta " << rope_theta;
  const RopeScaling& r = rope_scaling;
  if (r.type != "none") {
    os << ", scaling " << r.type << " factor " << r.factor;
    if (r.original_max_position_embeddings > 0) os << " original_max_positions " << r.original_max_position_embeddings;
    if (r.type == "yarn") {
      os << " beta_fast " << r.beta_fast << " beta_slow " << r.beta_slow;
      if (r.attention_factor > 0) os << " attention_factor " << r.attention_factor;
      if (r.mscale > 0) os << " mscale " << r.mscale;
      if (r.mscale_all_dim > 0) os << " mscale_all_dim " << r.mscale_all_dim;
      if (!r.truncate) os << " truncate false";
    } else if (r.type == "llama3") {
      os << " low_freq_factor " << r.low_freq_factor << " high_freq_factor " << r.high_freq_factor;
    }
  }
  os << "\n";
  os << "bos: " << bos_token_id << ", eos:";
  if (eos_token_ids.empty()) os << " none";
  for (size_t i = 0; i < eos_token_ids.size(); ++i) os << (i ? ", " : " ") << eos_token_ids[i];
  os << "\n";
  os << "dtype: " << torch_dtype << "\n";
  return os.str();
}

}  // namespace tf
