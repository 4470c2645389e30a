// config.json -> ModelConfig. A checkpoint we did not write must never load as
// a different model, so every field that changes the math is either used or
// refused; none is silently ignored.
//
// transformers' Llama and Mistral forwards read only the fields marked "used"
// or "refused" below; every other key is stored by the config class and never
// read by the model, so ignoring it (as the reference does) cannot change the
// output. Keys of other architectures are refused when set, since their
// presence means the checkpoint is not a plain Llama.
//
// | field                                                    | handling                                       |
// |----------------------------------------------------------|------------------------------------------------|
// | vocab_size, hidden_size, intermediate_size,              | used (required)                                |
// |   num_hidden_layers, num_attention_heads                 |                                                |
// | num_key_value_heads, head_dim, max_position_embeddings,  | used                                           |
// |   rms_norm_eps, rope_theta, bos/eos_token_id             |                                                |
// | tie_word_embeddings                                      | used; with a separate lm_head.weight in the    |
// |                                                          |   weights refused (model/checkpoint.cpp)       |
// | rope_scaling / rope_parameters                           | used; a type other than default, linear,       |
// |                                                          |   dynamic, yarn, llama3 refused                |
// | partial_rotary_factor (top level or in the rope dict)    | refused unless 1                               |
// | head_dim absent, hidden_size % num_attention_heads != 0  | refused (the implied head_dim is not whole)    |
// | hidden_act                                               | refused unless silu (swish)                    |
// | attention_bias, mlp_bias                                 | refused when true                              |
// | pretraining_tp                                           | refused when > 1 (transformers <= 4.3x splits  |
// |                                                          |   the projections: other rounding)             |
// | sliding_window, use_sliding_window                       | refused: use_sliding_window true, or a         |
// |                                                          |   sliding_window not turned off by             |
// |                                                          |   use_sliding_window false                     |
// | layer_types                                              | refused unless every layer is full_attention   |
// | model_type, architectures                                | refused unless llama/mistral, LlamaForCausalLM/ |
// |                                                          |   MistralForCausalLM (LlamaModel, MistralModel) |
// | quantization_config                                      | refused (weights not stored as plain floats)   |
// | qk_layernorm, use_qk_norm, qk_norm, rope_interleaved,    | refused when true                              |
// |   use_bias, alibi                                        |                                                |
// | attn_logit_softcapping, final_logit_softcapping,         | refused when set (not null)                    |
// |   query_pre_attn_scalar, clip_qkv, attention_multiplier  |                                                |
// | logit_scale, logits_scaling, embedding_multiplier,       | refused unless 1                               |
// |   residual_multiplier                                    |                                                |
// | num_local_experts, num_experts, n_routed_experts         | refused when > 1                               |
// | torch_dtype / dtype                                      | recorded (the storage dtype, not the math)     |
// | triforce_shared_embedding (ours: a draft that stores no  | used: {"tensor": "model.embed_tokens.weight",  |
// |   embedding and borrows its target's)                    |   "target": {config fields}, "fingerprint_rows",|
// |                                                          |   "fingerprint_norms"}; needs tie_word_embeddings|
// |                                                          |   true; any other key or value refused         |
// | attention_dropout, initializer_range, use_cache,         | ignored: training-only or bookkeeping          |
// |   pad_token_id, transformers_version, _name_or_path,     |                                                |
// |   auto_map, generation defaults, any other key           |                                                |
#include "io/hf_config.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "io/json_strict.h"

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
  if (const json* prf = get(r, "partial_rotary_factor"))
    TF_CHECK(prf->is_number() && prf->get<double>() == 1.0,
             src << ": '" << where << "' has partial_rotary_factor " << prf->dump()
                 << " (only full rotary embeddings, 1.0, are implemented)");
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

// The table at the top of this file, for the fields that are refused rather
// than used. `neutral` says whether a present value leaves the Llama math alone.
struct RefusedField {
  const char* key;
  std::function<bool(const json&)> neutral;
  const char* why;
};

bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_one(const json& v) { return v.is_number() && v.get<double>() == 1.0; }
bool at_most_one(const json& v) { return v.is_number_integer() && v.get<int64_t>() <= 1; }
bool never(const json&) { return false; }

void refuse_math_we_do_not_implement(const json& j, const std::string& src) {
  static const RefusedField kRefused[] = {
      {"attention_bias", is_false, "biased q/k/v/o projections are not implemented"},
      {"mlp_bias", is_false, "biased MLP projections are not implemented"},
      {"pretraining_tp", at_most_one, "transformers splits the projections into slices (other rounding)"},
      {"use_sliding_window", is_false, "sliding-window attention is not implemented"},
      {"partial_rotary_factor", is_one, "only full rotary embeddings are implemented"},
      {"quantization_config", never, "quantized safetensors weights are not implemented; use a GGUF or a float checkpoint"},
      {"qk_layernorm", is_false, "q/k normalisation is not implemented"},
      {"use_qk_norm", is_false, "q/k normalisation is not implemented"},
      {"qk_norm", is_false, "q/k normalisation is not implemented"},
      {"rope_interleaved", is_false, "interleaved rotary pairs are not implemented (HF Llama rotates halves)"},
      {"use_bias", is_false, "biased projections are not implemented"},
      {"alibi", is_false, "ALiBi attention is not implemented"},
      {"attn_logit_softcapping", never, "attention logit soft-capping is not implemented"},
      {"final_logit_softcapping", never, "final logit soft-capping is not implemented"},
      {"query_pre_attn_scalar", never, "a custom attention scale is not implemented"},
      {"attention_multiplier", never, "a custom attention scale is not implemented"},
      {"clip_qkv", never, "q/k/v clipping is not implemented"},
      {"logit_scale", is_one, "scaled logits are not implemented"},
      {"logits_scaling", is_one, "scaled logits are not implemented"},
      {"embedding_multiplier", is_one, "scaled embeddings are not implemented"},
      {"residual_multiplier", is_one, "scaled residuals are not implemented"},
      {"num_local_experts", at_most_one, "mixture-of-experts MLPs are not implemented"},
      {"num_experts", at_most_one, "mixture-of-experts MLPs are not implemented"},
      {"n_routed_experts", at_most_one, "mixture-of-experts MLPs are not implemented"},
  };
  for (const auto& f : kRefused)
    if (const json* v = get(j, f.key))
      TF_CHECK(f.neutral(*v), src << ": " << f.key << " = " << v->dump().substr(0, 80) << " is refused: " << f.why);
  // Mistral sets sliding_window with no switch; Qwen2-style configs turn it off
  // with use_sliding_window false. Only the latter is full attention.
  if (const json* sw = get(j, "sliding_window")) {
    const json* use = get(j, "use_sliding_window");
    TF_CHECK(use && is_false(*use),
             src << ": sliding_window = " << sw->dump() << " is refused: sliding-window attention is not implemented "
                 << "(every layer here attends to the whole context)");
  }
  if (const json* lt = get(j, "layer_types")) {
    TF_CHECK(lt->is_array(), src << ": key 'layer_types' must be a list, got " << lt->dump().substr(0, 80));
    for (size_t l = 0; l < lt->size(); ++l)
      TF_CHECK((*lt)[l] == "full_attention", src << ": layer_types[" << l << "] = " << (*lt)[l].dump()
                                                  << " is refused: only full_attention layers are implemented");
  }
}

// The draft marker (model/config.h SharedEmbedding). Every key is required and
// no other is allowed: a marker we half understand must not load.
void parse_shared_embedding(const json& m, ModelConfig& c, const std::string& src) {
  const std::string k = "triforce_shared_embedding";
  TF_CHECK(m.is_object(), src << ": '" << k << "' must be an object, got " << m.dump().substr(0, 80));
  for (auto it = m.begin(); it != m.end(); ++it)
    TF_CHECK(it.key() == "tensor" || it.key() == "target" || it.key() == "fingerprint_rows" ||
                 it.key() == "fingerprint_norms",
             src << ": '" << k << "' has an unknown key '" << it.key()
                 << "' (expected tensor, target, fingerprint_rows, fingerprint_norms)");
  const json* t = get(m, "tensor");
  TF_CHECK(t && t->is_string() && t->get<std::string>() == "model.embed_tokens.weight",
           src << ": '" << k << "'.tensor must be \"model.embed_tokens.weight\" (the target's embedding), got "
               << (t ? t->dump() : "nothing"));
  const json* tg = get(m, "target");
  TF_CHECK(tg && tg->is_object() && !tg->empty(),
           src << ": '" << k << "'.target must be an object of the target's config fields (e.g. \"vocab_size\": 49152)");
  for (auto it = tg->begin(); it != tg->end(); ++it) {
    double unused = 0;
    TF_CHECK(c.hf_number(it.key(), unused),
             src << ": '" << k << "'.target has an unknown field '" << it.key()
                 << "' (expected config fields such as vocab_size, hidden_size, num_hidden_layers)");
    TF_CHECK(it.value().is_number(),
             src << ": '" << k << "'.target." << it.key() << " must be a number, got " << it.value().dump());
    c.shared_embedding.target.push_back({it.key(), it.value().get<double>()});
  }
  const json* rows = get(m, "fingerprint_rows");
  const json* norms = get(m, "fingerprint_norms");
  TF_CHECK(rows && norms && rows->is_array() && norms->is_array() && !rows->empty() && rows->size() == norms->size(),
           src << ": '" << k << "' needs fingerprint_rows and fingerprint_norms, two non-empty lists of one length");
  for (size_t i = 0; i < rows->size(); ++i) {
    const json& r = (*rows)[i];
    const json& n = (*norms)[i];
    TF_CHECK(r.is_number_integer() && r.get<int64_t>() >= 0,
             src << ": '" << k << "'.fingerprint_rows[" << i << "] must be a token id, got " << r.dump());
    TF_CHECK(n.is_number() && std::isfinite(n.get<double>()) && n.get<double>() > 0,
             src << ": '" << k << "'.fingerprint_norms[" << i << "] must be a positive number, got " << n.dump());
    c.shared_embedding.fingerprint_rows.push_back(r.get<int64_t>());
    c.shared_embedding.fingerprint_norms.push_back(n.get<double>());
  }
  c.shared_embedding.enabled = true;
}

}  // namespace

ModelConfig config_from_hf_json_text(const std::string& text, const std::string& src) {
  const json j = parse_json_strict(text, src, "the config");
  TF_CHECK(j.is_object(), src << ": expected a JSON object at top level");
  ModelConfig c;
  if (const json* mt = get(j, "model_type")) {
    TF_CHECK(mt->is_string(), src << ": key 'model_type' must be a string");
    c.architecture = mt->get<std::string>();
    TF_CHECK(c.architecture == "llama" || c.architecture == "mistral",
             src << ": unsupported model_type '" << c.architecture << "' (only llama, mistral)");
  }
  if (const json* ar = get(j, "architectures")) {
    TF_CHECK(ar->is_array(), src << ": key 'architectures' must be a list, got " << ar->dump());
    for (const auto& a : *ar) {
      const std::string name = a.is_string() ? a.get<std::string>() : a.dump();
      TF_CHECK(name == "LlamaForCausalLM" || name == "MistralForCausalLM" || name == "LlamaModel" ||
                   name == "MistralModel",
               src << ": unsupported architectures entry " << name << " (only LlamaForCausalLM, MistralForCausalLM)");
    }
  }
  refuse_math_we_do_not_implement(j, src);
  c.vocab_size = req_int(j, "vocab_size", src);
  c.hidden_size = req_int(j, "hidden_size", src);
  c.intermediate_size = req_int(j, "intermediate_size", src);
  c.num_layers = req_int(j, "num_hidden_layers", src);
  c.num_heads = req_int(j, "num_attention_heads", src);
  c.num_kv_heads = opt_int(j, "num_key_value_heads", c.num_heads, src);
  TF_CHECK(c.num_heads > 0, src << ": num_attention_heads must be positive, got " << c.num_heads);
  if (!get(j, "head_dim"))
    TF_CHECK(c.hidden_size % c.num_heads == 0,
             src << ": head_dim is absent and hidden_size " << c.hidden_size << " is not a multiple of num_attention_heads "
                 << c.num_heads << " (the implied head_dim would be truncated)");
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
  // rope_parameters (transformers 5) takes precedence over rope_scaling.
  if (const json* rp = get(j, "rope_parameters")) {
    parse_rope(*rp, "rope_parameters", c, src);
  } else if (const json* rs = get(j, "rope_scaling")) {
    parse_rope(*rs, "rope_scaling", c, src);
  }
  if (const json* se = get(j, "triforce_shared_embedding")) {
    parse_shared_embedding(*se, c, src);
    TF_CHECK(c.tie_word_embeddings, src << ": triforce_shared_embedding needs tie_word_embeddings true (the borrowed "
                                           "embedding is also the output head)");
    for (int64_t r : c.shared_embedding.fingerprint_rows)
      TF_CHECK(r < c.vocab_size, src << ": triforce_shared_embedding.fingerprint_rows holds " << r
                                     << ", outside the vocabulary of " << c.vocab_size);
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
