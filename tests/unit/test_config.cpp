// config.json parsing (transformers 4.x and 5.x rope keys), ModelConfig
// validation, parameter count and description.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/hf_config.h"
#include "model/config.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tf;

namespace {

// SmolLM2-135M-Instruct's config.json (abridged to the keys we read).
const char* kSmol = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 576, "intermediate_size": 1536,
  "max_position_embeddings": 8192, "num_attention_heads": 9, "num_hidden_layers": 30,
  "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 100000,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 49152
})";

// base with the keys of `extra` ("k": v, ...) added or replaced (a repeated key
// would be refused as a duplicate).
std::string with(const std::string& base, const std::string& extra) {
  nlohmann::json j = nlohmann::json::parse(base);
  j.update(nlohmann::json::parse("{" + extra + "}"));
  return j.dump();
}

const char* kBase = R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
  "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32})";

void expect_error(const std::string& text, const std::string& src, const std::string& also) {
  try {
    config_from_hf_json_text(text, src);
    FAIL() << "expected tf::Error";
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(src), std::string::npos) << m;
    EXPECT_NE(m.find(also), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace

TEST(HfConfig, SmolLM2) {
  const fs::path d = tf::testing::tmp_dir("tf_cfg_test");
  tf::testing::write_bytes(d / "config.json", kSmol);
  ModelConfig c = config_from_hf_json((d / "config.json").string());
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.rope_scaling.type, "none");
  // HF reports 134515008 parameters for SmolLM2-135M (tied).
  EXPECT_EQ(c.param_count(), 134515008);
  c.tie_word_embeddings = false;
  EXPECT_EQ(c.param_count(), 134515008 + 49152 * 576);
  const std::string desc = c.describe();
  EXPECT_NE(desc.find("30"), std::string::npos);
  EXPECT_NE(desc.find("576"), std::string::npos);
  EXPECT_NE(desc.find('\n'), std::string::npos);
  try {
    config_from_hf_json((d / "nope.json").string());
    FAIL();
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json"), std::string::npos);
  }
}

TEST(HfConfig, Defaults) {
  ModelConfig c = config_from_hf_json_text(kBase, "config.json");
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  c = config_from_hf_json_text(with(kBase, R"("vocab_size": 128256, "head_dim": 64, "eos_token_id": [128001, 128008, 128009],
                                              "dtype": "float16")"),
                               "config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "float16");
}

TEST(HfConfig, RopeScalingOld) {
  ModelConfig c = config_from_hf_json_text(
      with(kBase, R"("vocab_size": 128256, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0)"),
      "config.json");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);

  c = config_from_hf_json_text(with(kBase, R"("rope_scaling": {"type": "linear", "factor": 2.0})"), "config.json");
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  c = config_from_hf_json_text(with(kBase, R"("rope_scaling": {"type": "dynamic", "factor": 4.0})"), "config.json");
  EXPECT_EQ(c.rope_scaling.type, "dynamic");
  c = config_from_hf_json_text(
      with(kBase, R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.2, "mscale": 0.7, "mscale_all_dim": 0.5, "truncate": false})"),
      "config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 2);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.2);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.7);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.5);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  c = config_from_hf_json_text(with(kBase, R"("rope_scaling": {"rope_type": "default"})"), "config.json");
  EXPECT_EQ(c.rope_scaling.type, "none");
}

TEST(HfConfig, RopeParametersTransformers5) {
  ModelConfig c = config_from_hf_json_text(
      with(kBase, R"("rope_parameters": {"rope_type": "default", "rope_theta": 100000.0})"), "config.json");
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  c = config_from_hf_json_text(
      with(kBase, R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
      "config.json");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  c = config_from_hf_json_text(
      with(kBase, R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
        "original_max_position_embeddings": 4096})"),
      "config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST(HfConfig, Errors) {
  expect_error(with(kBase, R"("rope_scaling": {"rope_type": "longrope", "factor": 2})"), "some/config.json",
               "longrope");
  expect_error(with(kBase, R"("rope_parameters": {"type": "su", "factor": 2})"), "config.json", "su");
  expect_error("{\"vocab_size\": ", "config.json", "JSON");
  expect_error(R"({"vocab_size": 10})", "config.json", "hidden_size");
  expect_error(with(kBase, R"("num_key_value_heads": 5)"), "config.json", "num_key_value_heads");
  expect_error(with(kBase, R"("hidden_size": "big")"), "config.json", "hidden_size");
  expect_error(with(kBase, R"("eos_token_id": "x")"), "config.json", "eos_token_id");
  expect_error(with(kBase, R"("rope_scaling": {"rope_type": "linear"})"), "config.json", "factor");
  expect_error(with(kBase, R"("hidden_act": "gelu")"), "config.json", "gelu");
  expect_error(with(kBase, R"("attention_bias": true)"), "config.json", "attention_bias");
}

TEST(ModelConfig, Validate) {
  ModelConfig c = config_from_hf_json_text(kBase, "config.json");
  EXPECT_NO_THROW(c.validate("x"));
  auto bad = [&](auto mutate, const std::string& word) {
    ModelConfig b = c;
    mutate(b);
    try {
      b.validate("model.gguf");
      FAIL() << word;
    } catch (const tf::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("model.gguf"), std::string::npos) << m;
      EXPECT_NE(m.find(word), std::string::npos) << m;
    }
  };
  bad([](ModelConfig& b) { b.hidden_size = 0; }, "hidden_size");
  bad([](ModelConfig& b) { b.num_kv_heads = 3; }, "num_key_value_heads");
  bad([](ModelConfig& b) { b.head_dim = 0; }, "head_dim");
  bad([](ModelConfig& b) { b.head_dim = 7; }, "head_dim");
  bad([](ModelConfig& b) { b.rms_norm_eps = 0; }, "rms_norm_eps");
  bad([](ModelConfig& b) { b.rope_scaling.type = "weird"; }, "weird");
  bad([](ModelConfig& b) { b.eos_token_ids = {40000}; }, "eos_token_id");
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 4096);
}
