#include "io/hf_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"

namespace tf {

namespace {

using json = nlohmann::json;

const json* get(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t req_int(const json& j, const char* key, const std::string& src) {
  const json* v = get(j, key);
  TF_CHECK(v, src << ": missing key '" << key << "'");
  TF_CHECK(v->is_number_integer(), src << ": key '" << key << "' must be an integer, got " << v->dump());
  return v->get<int64_t>();
}

int64_t opt_int(const json& j, const char* key, int64_t dflt, const std::string& src) {
  const json* v = get(j, key);
  if (!v) return dflt;
  TF_CHECK(v->is_number_integer(), src << ": key '" << key << "' must be an integer, got " << v->dump());
  return v->get<int64_t>();
}

double opt_num(const json& j, const char* key, double dflt, const std::string& src) {
  const json* v = get(j, key);
  if (!v) return dflt;
  TF_CHECK(v->is_number(), src << ": key '" << key << "' must be a number, got " << v->dump());
  return v->get<double>();
}

bool opt_bool(const json& j, const char* key, bool dflt, const std::string& src) {
  const json* v = get(j, key);
  if (!v) return dflt;
  TF_CHECK(v->is_boolean(), src << ": key '" << key << "' must be true or false, got " << v->dump());
  return v->get<bool>();
}

void parse_rope(const json& r, const char* where, ModelConfig& c, const std::string& src) {
  TF_CHECK(r.is_object(), src << ": '" << where << "' must be an object, got " << r.dump());
  std::string type;
  if (const json* t = get(r, "rope_type")) type = t->is_string() ? t->get<std::string>() : "";
  else if (const json* t2 = get(r, "type")) type = t2->is_string() ? t2->get<std::string>() : "";
  else type = "default";
  TF_CHECK(!type.empty(), src << ": '" << where << "' has a non-string rope type");
  // transformers 5 keeps rope_theta inside rope_parameters.
  if (get(r, "rope_theta")) c.rope_theta = opt_num(r, "rope_theta", c.rope_theta, src);
  RopeScaling& s = c.rope_scaling;
  if (type == "default" || type == "none") {
    s.type = "none";
    return;
  }
  if (type != "linear" && type != "dynamic" && type != "yarn" && type != "llama3")
    TF_FAIL(src << ": unsupported rope type '" << type << "' in '" << where
                << "' (supported: default, linear, dynamic, yarn, llama3)");
  s.type = type;
  const json* f = get(r, "factor");
  TF_CHECK(f, src << ": '" << where << "' of type " << type << " needs 'factor'");
  s.factor = opt_num(r, "factor", 1.0, src);
  s.original_max_position_embeddings = opt_int(r, "original_max_position_embeddings", 0, src);
  if (type == "yarn") {
    s.beta_fast = opt_num(r, "beta_fast", s.beta_fast, src);
    s.beta_slow = opt_num(r, "beta_slow", s.beta_slow, src);
    s.attention_factor = opt_num(r, "attention_factor", s.attention_factor, src);
    s.mscale = opt_num(r, "mscale", s.mscale, src);
    s.mscale_all_dim = opt_num(r, "mscale_all_dim", s.mscale_all_dim, src);
    s.truncate = opt_bool(r, "truncate", s.truncate, src);
  } else if (type == "llama3") {
    s.low_freq_factor = opt_num(r, "low_freq_factor", s.low_freq_factor, src);
    s.high_freq_factor = opt_num(r, "high_freq_factor", s.high_freq_factor, src);
    TF_CHECK(s.original_max_position_embeddings > 0,
             src << ": '" << where << "' of type llama3 needs 'original_max_position_embeddings'");
  }
}

}  // namespace

ModelConfig config_from_hf_json_text(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    for (auto& ch : what)
      if (ch == '\n') ch = ' ';
    TF_FAIL(src << ": invalid JSON: " << what);
  }
  TF_CHECK(j.is_object(), src << ": expected a JSON object at top level");
  ModelConfig c;
  if (const json* mt = get(j, "model_type")) {
    TF_CHECK(mt->is_string(), src << ": key 'model_type' must be a string");
    c.architecture = mt->get<std::string>();
  }
  c.vocab_size = req_int(j, "vocab_size", src);
  c.hidden_size = req_int(j, "hidden_size", src);
  c.intermediate_size = req_int(j, "intermediate_size", src);
  c.num_layers = req_int(j, "num_hidden_layers", src);
  c.num_heads = req_int(j, "num_attention_heads", src);
  c.num_kv_heads = opt_int(j, "num_key_value_heads", c.num_heads, src);
  TF_CHECK(c.num_heads > 0, src << ": num_attention_heads must be positive, got " << c.num_heads);
  c.head_dim = opt_int(j, "head_dim", c.hidden_size / c.num_heads, src);
  c.max_position_embeddings = opt_int(j, "max_position_embeddings", c.max_position_embeddings, src);
  c.rms_norm_eps = opt_num(j, "rms_norm_eps", c.rms_norm_eps, src);
  c.rope_theta = opt_num(j, "rope_theta", c.rope_theta, src);
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false, src);
  c.bos_token_id = opt_int(j, "bos_token_id", -1, src);
  if (const json* e = get(j, "eos_token_id")) {
    if (e->is_number_integer()) {
      c.eos_token_ids.push_back(e->get<int64_t>());
    } else {
      TF_CHECK(e->is_array(), src << ": key 'eos_token_id' must be an integer or a list, got " << e->dump());
      for (const auto& x : *e) {
        TF_CHECK(x.is_number_integer(), src << ": key 'eos_token_id' holds a non-integer " << x.dump());
        c.eos_token_ids.push_back(x.get<int64_t>());
      }
    }
  }
  if (const json* d = get(j, "torch_dtype")) {
    if (d->is_string()) c.torch_dtype = d->get<std::string>();
  } else if (const json* d2 = get(j, "dtype")) {
    if (d2->is_string()) c.torch_dtype = d2->get<std::string>();
  }
  if (const json* act = get(j, "hidden_act")) {
    TF_CHECK(act->is_string() && (act->get<std::string>() == "silu" || act->get<std::string>() == "swish"),
             src << ": unsupported hidden_act " << act->dump() << " (only silu)");
  }
  TF_CHECK(!opt_bool(j, "attention_bias", false, src), src << ": attention_bias=true is not supported");
  TF_CHECK(!opt_bool(j, "mlp_bias", false, src), src << ": mlp_bias=true is not supported");
  // rope_parameters (transformers 5) takes precedence over rope_scaling.
  if (const json* rp = get(j, "rope_parameters")) {
    parse_rope(*rp, "rope_parameters", c, src);
  } else if (const json* rs = get(j, "rope_scaling")) {
    parse_rope(*rs, "rope_scaling", c, src);
  }
  c.validate(src);
  return c;
}

ModelConfig config_from_hf_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TF_CHECK(in, path << ": cannot open config");
  std::ostringstream ss;
  ss << in.rdbuf();
  return config_from_hf_json_text(ss.str(), path);
}

}  // namespace tf
