// Checkpoint validation (docs/RELIABILITY.md, "Checkpoints and configs"): each
// case damages one thing in a valid file (a byte-level edit of a fixture, or a
// tiny hand-built file) and expects the one-line error naming the file and the
// rule; the valid fixtures must still load.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tf;
using tf::testing::expect_throws_naming;
using tf::testing::write_bytes;

namespace {

const std::string kFixtures = TF_FIXTURES;
fs::path tmp() { return tf::testing::tmp_dir("tf_validation_test"); }

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- safetensors: a fixture split into header JSON and data, edited, rejoined ----

struct StFile {
  std::string header;  // raw JSON text
  std::vector<uint8_t> data;
};

StFile split_st(const fs::path& p) {
  const auto b = read_all(p);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  return {std::string(b.begin() + 8, b.begin() + 8 + long(n)), std::vector<uint8_t>(b.begin() + 8 + long(n), b.end())};
}

std::vector<uint8_t> join_st(const std::string& header, const std::vector<uint8_t>& data) {
  std::string h = header;
  while (h.size() % 8) h.push_back(' ');
  const uint64_t n = h.size();
  std::vector<uint8_t> b(8 + h.size() + data.size());
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, h.data(), h.size());
  if (!data.empty()) std::memcpy(b.data() + 8 + h.size(), data.data(), data.size());
  return b;
}

const fs::path kMha = fs::path(kFixtures) / "hf" / "mha_f32";

// mha_f32's model.safetensors with its header edited by `edit`, written to <name>.safetensors.
template <class F> std::string st_with(const std::string& name, F&& edit) {
  StFile f = split_st(kMha / "model.safetensors");
  json h = json::parse(f.header);
  edit(h, f.data);
  return write_bytes(tmp() / (name + ".safetensors"), join_st(h.dump(), f.data));
}

void expect_st_error(const std::string& path, const std::string& rule) {
  expect_throws_naming([&] { SafetensorsFile f(path); }, path, rule);
}

const char* kNorm0 = "model.layers.0.input_layernorm.weight";
const char* kNorm1 = "model.layers.1.input_layernorm.weight";

}  // namespace

TEST(SafetensorsValidation, FixtureLoads) {
  SafetensorsFile f((kMha / "model.safetensors").string());
  EXPECT_EQ(f.entries().size(), 21u);
  const auto same = st_with("same", [](json&, std::vector<uint8_t>&) {});
  EXPECT_NO_THROW(SafetensorsFile g(same));
}

TEST(SafetensorsValidation, HeaderLength) {
  auto b = read_all(kMha / "model.safetensors");
  uint64_t n = 200'000'000;
  std::memcpy(b.data(), &n, 8);
  expect_st_error(write_bytes(tmp() / "huge_header.safetensors", b), "100000000-byte limit");
  n = b.size();
  std::memcpy(b.data(), &n, 8);
  expect_st_error(write_bytes(tmp() / "past_end.safetensors", b), "goes beyond the end of the file");
  expect_st_error(write_bytes(tmp() / "seven.safetensors", std::vector<uint8_t>(7, 0)), "not even a header length");
}

TEST(SafetensorsValidation, HeaderJson) {
  const auto data = split_st(kMha / "model.safetensors").data;
  expect_st_error(write_bytes(tmp() / "array.safetensors", join_st("[1, 2]", data)), "starting with '{'");
  expect_st_error(write_bytes(tmp() / "broken.safetensors", join_st("{\"a\": ", data)), "invalid JSON in the header");
  // The same tensor twice: nlohmann would keep one and drop the other silently.
  const std::string dup = std::string("{\"") + kNorm0 + R"(":{"dtype":"F32","shape":[64],"data_offsets":[0,256]},")" +
                          kNorm0 + R"(":{"dtype":"F32","shape":[64],"data_offsets":[256,512]}})";
  expect_st_error(write_bytes(tmp() / "dup.safetensors", join_st(dup, std::vector<uint8_t>(512))),
                  std::string("duplicate key \"") + kNorm0 + "\"");
  expect_st_error(st_with("meta", [](json& h, auto&) { h["__metadata__"]["format"] = 1; }),
                  "__metadata__ key format");
  expect_st_error(st_with("meta_obj", [](json& h, auto&) { h["__metadata__"] = "pt"; }), "__metadata__ is not an object");
}

TEST(SafetensorsValidation, EntryFields) {
  expect_st_error(st_with("no_dtype", [](json& h, auto&) { h[kNorm0].erase("dtype"); }), "missing dtype");
  expect_st_error(st_with("dtype_Q7", [](json& h, auto&) { h[kNorm0]["dtype"] = "Q7"; }), "unsupported dtype Q7");
  expect_st_error(st_with("neg_dim", [](json& h, auto&) { h[kNorm0]["shape"] = {-64}; }), "bad shape");
  expect_st_error(st_with("float_dim", [](json& h, auto&) { h[kNorm0]["shape"] = {64.0}; }), "bad shape");
  expect_st_error(st_with("no_shape", [](json& h, auto&) { h[kNorm0].erase("shape"); }), "missing shape");
  expect_st_error(st_with("three_offsets", [](json& h, auto&) { h[kNorm0]["data_offsets"].push_back(1); }),
                  "bad data_offsets");
  expect_st_error(st_with("neg_offset", [](json& h, auto&) { h[kNorm0]["data_offsets"][0] = -1; }),
                  "bad data_offsets");
  expect_st_error(st_with("not_obj", [](json& h, auto&) { h[kNorm0] = 3; }), "header entry is not an object");
}

TEST(SafetensorsValidation, SizesAndRanges) {
  expect_st_error(st_with("span", [](json& h, auto&) { h[kNorm0]["shape"] = {32}; }),
                  "is 128 bytes but data_offsets span 256");
  // 2^62 x 2^62 elements: the product overflows before any comparison could catch it.
  expect_st_error(st_with("overflow", [](json& h, auto&) { h[kNorm0]["shape"] = {uint64_t(1) << 62, uint64_t(1) << 62}; }),
                  "overflows 64 bits");
  expect_st_error(st_with("past_data", [](json& h, auto&) { h["model.norm.weight"]["data_offsets"] = {459776, 460288}; }),
                  "out of range");
  expect_st_error(st_with("reversed", [](json& h, auto&) { h[kNorm0]["data_offsets"] = {131328, 131072}; }),
                  "out of range");
}

TEST(SafetensorsValidation, Layout) {
  // Layer 1's norm pointed at layer 0's bytes: two tensors share data.
  expect_st_error(st_with("overlap", [](json& h, auto&) { h[kNorm1]["data_offsets"] = h[kNorm0]["data_offsets"]; }),
                  "overlap tensor");
  // The first tensor dropped from the header: its bytes belong to no tensor.
  expect_st_error(st_with("gap", [](json& h, auto&) { h.erase("lm_head.weight"); }), "leave bytes 0..65536");
  expect_st_error(st_with("tail", [](json&, std::vector<uint8_t>& d) { d.resize(d.size() + 8); }),
                  "belong to no tensor");
}

namespace {

// A copy of the sharded fixture whose index is edited by `edit`.
template <class F> fs::path sharded_with(const std::string& name, F&& edit) {
  const fs::path d = tmp() / name;
  fs::remove_all(d);
  fs::copy(fs::path(kFixtures) / "hf" / "sharded_f32", d);
  std::ifstream in(d / "model.safetensors.index.json");
  json idx = json::parse(in);
  in.close();
  std::string text = idx.dump();
  edit(idx, text);
  std::ofstream(d / "model.safetensors.index.json") << text;
  return d;
}

std::unique_ptr<WeightSource> open_folder(const fs::path& d) { return open_safetensors(d.string()); }

}  // namespace

TEST(SafetensorsValidation, ShardedIndex) {
  EXPECT_NO_THROW(open_folder(fs::path(kFixtures) / "hf" / "sharded_f32"));
  auto unlisted = sharded_with("unlisted", [](json& idx, std::string& t) {
    idx["weight_map"].erase("model.norm.weight");
    t = idx.dump();
  });
  expect_throws_naming([&] { open_folder(unlisted); }, "model.safetensors.index.json",
                       "tensor model.norm.weight is in shard model-00004-of-00005.safetensors but not in the weight_map");
  auto absent = sharded_with("absent", [](json& idx, std::string& t) {
    idx["weight_map"]["model.extra.weight"] = "model-00001-of-00005.safetensors";
    t = idx.dump();
  });
  expect_throws_naming([&] { open_folder(absent); }, "model.safetensors.index.json", "model.extra.weight is listed");
  auto missing = sharded_with("missing", [](json& idx, std::string& t) {
    idx["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
    t = idx.dump();
  });
  expect_throws_naming([&] { open_folder(missing); }, "model.safetensors.index.json", "is missing");
  auto dup = sharded_with("dup", [](json&, std::string& t) {
    const std::string key = "\"model.norm.weight\":";
    const size_t at = t.find(key);
    t.insert(at, key + "\"model-00004-of-00005.safetensors\",");
  });
  expect_throws_naming([&] { open_folder(dup); }, "model.safetensors.index.json",
                       "duplicate key \"weight_map\".\"model.norm.weight\"");
}

// ---- checkpoint: weights the config does not account for ----

namespace {

fs::path mha_copy(const std::string& name) {
  const fs::path d = tmp() / name;
  fs::remove_all(d);
  fs::copy(kMha, d);
  return d;
}

}  // namespace

TEST(CheckpointValidation, TiedConfigWithSeparateHead) {
  const fs::path d = mha_copy("tied_with_head");
  std::ifstream in(d / "config.json");
  json cfg = json::parse(in);
  in.close();
  cfg["tie_word_embeddings"] = true;
  std::ofstream(d / "config.json") << cfg.dump(2);
  expect_throws_naming([&] { open_checkpoint(d.string()); }, "model.safetensors",
                       "tensor lm_head.weight is present but the config ties");
}

TEST(CheckpointValidation, UnexpectedTensor) {
  const fs::path d = mha_copy("with_bias");
  StFile f = split_st(d / "model.safetensors");
  json h = json::parse(f.header);
  const uint64_t end = f.data.size();
  h["model.layers.0.self_attn.q_proj.bias"] = {{"dtype", "F32"}, {"shape", {64}}, {"data_offsets", {end, end + 256}}};
  f.data.resize(end + 256);
  write_bytes(d / "model.safetensors", join_st(h.dump(), f.data));
  expect_throws_naming([&] { open_checkpoint(d.string()); }, "model.safetensors",
                       "unexpected tensor model.layers.0.self_attn.q_proj.bias");
}

TEST(CheckpointValidation, EveryFixtureLoads) {
  for (const auto& de : fs::directory_iterator(fs::path(kFixtures) / "hf"))
    if (de.is_directory()) EXPECT_NO_THROW(open_checkpoint(de.path().string())) << de.path();
}

// ---- GGUF: byte edits of quants.gguf, and tiny hand-built headers ----

namespace {

const fs::path kQuants = fs::path(kFixtures) / "io" / "quants.gguf";

// Byte positions of one tensor info record in a GGUF file (found by its name).
struct TensorInfoAt {
  size_t rank, ne0, type, offset;
};

TensorInfoAt tensor_info_at(const std::vector<uint8_t>& b, const std::string& name) {
  std::string len(8, '\0');
  const uint64_t n = name.size();
  std::memcpy(len.data(), &n, 8);
  const std::string needle = len + name;
  const std::string s(b.begin(), b.end());
  const size_t at = s.find(needle);
  EXPECT_NE(at, std::string::npos) << name;
  TensorInfoAt t;
  t.rank = at + needle.size();
  uint32_t rank;
  std::memcpy(&rank, &b[t.rank], 4);
  t.ne0 = t.rank + 4;
  t.type = t.ne0 + 8 * rank;
  t.offset = t.type + 4;
  return t;
}

template <class T> void put(std::vector<uint8_t>& b, size_t at, T v) { std::memcpy(&b[at], &v, sizeof v); }

// quants.gguf with `edit` applied, written to <name>.gguf.
template <class F> std::string gguf_with(const std::string& name, F&& edit) {
  auto b = read_all(kQuants);
  edit(b);
  return write_bytes(tmp() / (name + ".gguf"), b);
}

void expect_gguf_error(const std::string& path, const std::string& rule) {
  expect_throws_naming([&] { GgufFile f(path); }, path, rule);
}

// A GGUF v3 header with no tensors and the given metadata records.
struct GgufBuilder {
  std::vector<uint8_t> b;
  uint64_t n_kv = 0;
  void u32(uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); }
  void u64(uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); }
  void str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> file(uint64_t n_tensors = 0) const {
    GgufBuilder h;
    h.u32(0x46554747u);
    h.u32(3);
    h.u64(n_tensors);
    h.u64(n_kv);
    h.b.insert(h.b.end(), b.begin(), b.end());
    h.b.resize(h.b.size() + 64);  // room so that no count is refused for the file's size alone
    return h.b;
  }
};

}  // namespace

TEST(GgufValidation, FixtureLoads) {
  GgufFile f(kQuants.string());
  EXPECT_EQ(f.tensors().size(), 16u);
  const auto same = gguf_with("same", [](std::vector<uint8_t>&) {});
  EXPECT_NO_THROW(GgufFile g(same));
}

TEST(GgufValidation, Counts) {
  // Counts the file cannot hold are refused before anything is reserved for them.
  expect_gguf_error(gguf_with("tensors_2e60", [](auto& b) { put<uint64_t>(b, 8, uint64_t(1) << 60); }),
                    "tensor count 1152921504606846976 is impossible");
  expect_gguf_error(gguf_with("kv_2e60", [](auto& b) { put<uint64_t>(b, 16, uint64_t(1) << 60); }),
                    "metadata count 1152921504606846976 is impossible");
  GgufBuilder strs;
  strs.str("tokenizer.ggml.tokens");
  strs.u32(9);  // array
  strs.u32(8);  // of strings
  strs.u64(uint64_t(1) << 40);
  strs.n_kv = 1;
  expect_gguf_error(write_bytes(tmp() / "strings_2e40.gguf", strs.file()), "array length 1099511627776");
  GgufBuilder deep;
  deep.str("nested");
  deep.u32(9);
  for (int i = 0; i < 40; ++i) {
    deep.u32(9);  // array of arrays ...
    deep.u64(1);
  }
  deep.n_kv = 1;
  expect_gguf_error(write_bytes(tmp() / "deep.gguf", deep.file()), "nests arrays deeper than");
  GgufBuilder longstr;
  longstr.str("general.name");
  longstr.u32(8);
  longstr.u64(uint64_t(1) << 50);
  longstr.n_kv = 1;
  expect_gguf_error(write_bytes(tmp() / "longstr.gguf", longstr.file()), "beyond the end of the file");
}

TEST(GgufValidation, Alignment) {
  GgufBuilder a;
  a.str("general.alignment");
  a.u32(4);  // u32
  a.u32(48);
  a.n_kv = 1;
  expect_gguf_error(write_bytes(tmp() / "align48.gguf", a.file()), "general.alignment 48 is not a power of two");
  expect_gguf_error(gguf_with("misaligned", [](auto& b) { put<uint64_t>(b, tensor_info_at(b, "q.Q4_1").offset, 2336 + 4); }),
                    "offset 2340 is not a multiple of the alignment 32");
}

TEST(GgufValidation, TensorRecords) {
  expect_gguf_error(gguf_with("type999", [](auto& b) { put<uint32_t>(b, tensor_info_at(b, "q.Q4_1").type, 999); }),
                    "unsupported ggml type 999 for tensor q.Q4_1");
  // A Q4_1 row of 48 elements is one and a half blocks of 32.
  expect_gguf_error(gguf_with("block", [](auto& b) { put<uint64_t>(b, tensor_info_at(b, "q.Q4_1").ne0, 48); }),
                    "not a multiple of the block size 32");
  expect_gguf_error(gguf_with("zero_dim", [](auto& b) { put<uint64_t>(b, tensor_info_at(b, "q.Q4_1").ne0, 0); }),
                    "tensor q.Q4_1 dimension 0 is 0");
  expect_gguf_error(gguf_with("rank9", [](auto& b) { put<uint32_t>(b, tensor_info_at(b, "q.Q4_1").rank, 9); }),
                    "tensor q.Q4_1 has rank 9");
  expect_gguf_error(gguf_with("past_end", [](auto& b) {
                      put<uint64_t>(b, tensor_info_at(b, "q.Q4_1").offset, uint64_t(1) << 40);
                    }),
                    "truncated: tensor q.Q4_1");
  // q.Q4_1 moved onto q.Q4_0's bytes (offset 0): both would read the same data.
  expect_gguf_error(gguf_with("overlap", [](auto& b) { put<uint64_t>(b, tensor_info_at(b, "q.Q4_1").offset, 0); }),
                    "tensor q.Q4_1 (data bytes 0..320) overlaps tensor q.Q4_0 (0..288)");
}

// ---- config.json: every field that changes the math is used or refused ----

namespace {

const char* kLlama = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256,
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4})";

std::string with(const std::string& extra) {
  json j = json::parse(kLlama);
  j.update(json::parse("{" + extra + "}"));
  return j.dump();
}

void expect_config_error(const std::string& text, const std::string& rule) {
  expect_throws_naming([&] { config_from_hf_json_text(text, "ck/config.json"); }, "config.json", rule);
}

}  // namespace

TEST(ConfigValidation, Refused) {
  expect_config_error(with(R"("model_type": "qwen2")"), "unsupported model_type 'qwen2'");
  expect_config_error(with(R"("architectures": ["Gemma2ForCausalLM"])"), "unsupported architectures entry Gemma2ForCausalLM");
  expect_config_error(with(R"("hidden_act": "gelu_pytorch_tanh")"), "unsupported hidden_act");
  expect_config_error(with(R"("attention_bias": true)"), "attention_bias = true is refused");
  expect_config_error(with(R"("mlp_bias": true)"), "mlp_bias = true is refused");
  expect_config_error(with(R"("pretraining_tp": 2)"), "pretraining_tp = 2 is refused");
  expect_config_error(with(R"("sliding_window": 4096)"), "sliding_window = 4096 is refused");
  expect_config_error(with(R"("sliding_window": 4096, "use_sliding_window": true)"), "use_sliding_window = true");
  expect_config_error(with(R"("layer_types": ["full_attention", "sliding_attention"])"), "layer_types[1]");
  expect_config_error(with(R"("hidden_size": 66)"), "head_dim is absent and hidden_size 66");
  expect_config_error(with(R"("partial_rotary_factor": 0.5)"), "partial_rotary_factor = 0.5 is refused");
  expect_config_error(with(R"("rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5})"),
                      "partial_rotary_factor 0.5");
  expect_config_error(with(R"("rope_scaling": {"rope_type": "longrope", "factor": 2.0})"), "unsupported rope type 'longrope'");
  expect_config_error(with(R"("quantization_config": {"quant_method": "fp8"})"), "quantization_config");
  expect_config_error(with(R"("use_qk_norm": true)"), "use_qk_norm = true is refused");
  expect_config_error(with(R"("rope_interleaved": true)"), "rope_interleaved = true is refused");
  expect_config_error(with(R"("final_logit_softcapping": 30.0)"), "final_logit_softcapping");
  expect_config_error(with(R"("logit_scale": 0.0625)"), "logit_scale");
  expect_config_error(with(R"("num_local_experts": 8)"), "num_local_experts = 8 is refused");
  expect_config_error(R"({"vocab_size": 256, "vocab_size": 512})", "duplicate key \"vocab_size\"");
}

TEST(ConfigValidation, AcceptedAndIgnored) {
  // Neutral values of refused fields, and bookkeeping keys, change nothing.
  const ModelConfig base = config_from_hf_json_text(kLlama, "config.json");
  const ModelConfig c = config_from_hf_json_text(
      with(R"("attention_bias": false, "mlp_bias": false, "pretraining_tp": 1, "sliding_window": 4096,
              "use_sliding_window": false, "layer_types": ["full_attention", "full_attention"],
              "partial_rotary_factor": 1.0, "rope_interleaved": false, "logit_scale": 1.0,
              "attention_dropout": 0.1, "initializer_range": 0.02, "use_cache": false, "pad_token_id": 3,
              "transformers_version": "5.0.0", "_name_or_path": "x", "auto_map": {"AutoConfig": "x.Config"},
              "some_future_key": [1, 2], "sliding_window_pattern": null, "hidden_size": 64, "head_dim": 16)"),
      "config.json");
  EXPECT_EQ(c.describe(), base.describe());
  EXPECT_NO_THROW(config_from_hf_json_text(with(R"("model_type": "mistral", "architectures": ["MistralForCausalLM"],
                                                   "sliding_window": null)"),
                                           "config.json"));
  // head_dim given explicitly need not be hidden_size / heads (headdim32_f32).
  EXPECT_EQ(config_from_hf_json_text(with(R"("hidden_size": 66, "head_dim": 32)"), "config.json").head_dim, 32);
}
