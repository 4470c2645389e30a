#include "model/checkpoint.h"

#include "model/draft_vocab.h"

#include <filesystem>
#include <set>

#include "core/check.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace tf {

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_expected_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> v;
  if (!c.shared_embedding.enabled) v.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    v.push_back({p + "input_layernorm.weight", {h}});
    v.push_back({p + "self_attn.q_proj.weight", {q, h}});
    v.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    v.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    v.push_back({p + "self_attn.o_proj.weight", {h, q}});
    v.push_back({p + "post_attention_layernorm.weight", {h}});
    v.push_back({p + "mlp.gate_proj.weight", {i, h}});
    v.push_back({p + "mlp.up_proj.weight", {i, h}});
    v.push_back({p + "mlp.down_proj.weight", {h, i}});
  }
  v.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) v.push_back({"lm_head.weight", {c.vocab_size, h}});
  return v;
}

void check_llama_weights(const WeightSource& w, const ModelConfig& c, const std::string& source) {
  const auto expected = llama_expected_tensors(c);
  if (c.shared_embedding.enabled)
    TF_CHECK(!w.has("model.embed_tokens.weight"),
             w.info("model.embed_tokens.weight").file
                 << ": tensor model.embed_tokens.weight is present but config.json says the embedding is borrowed from "
                    "the target (triforce_shared_embedding); refusing to choose between them");
  for (const auto& [name, shape] : expected) {
    TF_CHECK(w.has(name) || name != "model.embed_tokens.weight",
             source << ": missing tensor model.embed_tokens.weight (expected shape " << shape_str(shape)
                    << "); a draft that borrows its target's embedding says so with triforce_shared_embedding in "
                       "config.json");
    TF_CHECK(w.has(name), source << ": missing tensor " << name << " (expected shape " << shape_str(shape) << ")");
    const TensorInfo i = w.info(name);
    TF_CHECK(i.shape == shape, i.file << ": tensor " << name << " has shape " << shape_str(i.shape) << ", expected "
                                      << shape_str(shape));
  }
  // A tensor the forward would not read is a weight of math we do not run
  // (a bias, a q/k norm, another architecture's layer) or a head the config
  // says to tie away: refused, never dropped. HF's rotary inv_freq buffers are
  // recomputed from the config, so they are the one kind we skip.
  std::set<std::string> used;
  for (const auto& e : expected) used.insert(e.first);
  const auto ends_with = [](const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (const auto& name : w.names()) {
    if (used.count(name) || ends_with(name, ".rotary_emb.inv_freq")) continue;
    if (name == kDraftVocabTensor) continue;  // a draft's reduced vocabulary, validated by LlamaWeights::load
    const std::string file = w.info(name).file;
    TF_CHECK(!(name == "lm_head.weight" && c.tie_word_embeddings),
             file << ": tensor lm_head.weight is present but the config ties the output head to the embedding "
                     "(tie_word_embeddings); refusing to ignore it");
    TF_FAIL(file << ": unexpected tensor " << name
                 << " (the Llama forward does not use it: a bias, a q/k norm or another architecture's weight)");
  }
}

Checkpoint open_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Checkpoint ck;
  ck.path = path;
  if (fs::is_directory(path, ec)) {
    const fs::path cfg = fs::path(path) / "config.json";
    TF_CHECK(fs::exists(cfg, ec), path << ": not a checkpoint folder (no config.json)");
    ck.config = config_from_hf_json(cfg.string());  // refuses other model types
    ck.weights = open_safetensors(path);
  } else if (fs::path(path).extension() == ".gguf") {
    TF_CHECK(fs::exists(path, ec), path << ": no such file");
    ck.is_gguf = true;
    ck.gguf = std::make_shared<GgufFile>(path);
    ck.config = config_from_gguf(*ck.gguf);
    ck.weights = make_gguf_weights(ck.gguf, ck.config);
  } else if (!fs::exists(path, ec)) {
    TF_FAIL(path << ": no such file or folder");
  } else {
    TF_FAIL(path << ": not a checkpoint (expected an HF folder with config.json or a .gguf file)");
  }
  check_llama_weights(*ck.weights, ck.config, path);
  return ck;
}

}  // namespace tf
