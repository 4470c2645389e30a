// safetensors: single and sharded files, F32/F16/BF16 conversion, row/column
// reads, validation errors, and an HF checkpoint folder through open_checkpoint.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "model/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tf;
using tf::testing::expect_throws_naming;
using tf::testing::write_bytes;

namespace {

fs::path tmp_dir() { return tf::testing::tmp_dir("tf_st_test"); }

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

std::vector<uint8_t> st_bytes(const std::vector<StTensor>& ts, const std::string& header_override = "") {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string hs = header_override.empty() ? h.dump() : header_override;
  while (hs.size() % 8) hs.push_back(' ');
  std::vector<uint8_t> b(8);
  const uint64_t n = hs.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), hs.begin(), hs.end());
  for (const auto& t : ts) b.insert(b.end(), t.data.begin(), t.data.end());
  return b;
}

std::vector<float> seq(int n, float a, float step) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = a + step * i;
  return v;
}

StTensor f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  StTensor t{name, "F32", std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
StTensor half(const std::string& name, bool bf, std::vector<int64_t> shape, const std::vector<float>& v) {
  StTensor t{name, bf ? "BF16" : "F16", std::move(shape), {}};
  for (float x : v) {
    const uint16_t h = bf ? f32_to_bf16(x) : f32_to_f16(x);
    t.data.push_back(uint8_t(h & 0xff));
    t.data.push_back(uint8_t(h >> 8));
  }
  return t;
}

}  // namespace

TEST(Safetensors, SingleFileRoundTrip) {
  const auto a = seq(12, -1.0f, 0.25f);
  const auto p = write_bytes(tmp_dir() / "single" / "model.safetensors",
                            st_bytes({f32("a", {3, 4}, a), half("h", false, {2, 3}, seq(6, 0.1f, 0.3f)),
                                      half("b", true, {6}, seq(6, 2.0f, -0.7f))}));
  SafetensorsFile f(p);
  EXPECT_EQ(f.entries().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  auto w = open_weights(fs::path(p).parent_path().string());
  EXPECT_TRUE(w->has("a"));
  EXPECT_FALSE(w->has("zzz"));
  EXPECT_EQ(w->info("h").stored_type, "F16");
  EXPECT_EQ(w->info("a").shape, (std::vector<int64_t>{3, 4}));
  Tensor ta = w->read_f32("a");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ta.ptr<float>()[i], a[i]);
  Tensor th = w->read_f32("h");
  const auto hv = seq(6, 0.1f, 0.3f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(th.ptr<float>()[i], f16_to_f32(f32_to_f16(hv[i])));
  Tensor tb = w->read_rows_f32("b", 2, 5);
  const auto bv = seq(6, 2.0f, -0.7f);
  ASSERT_EQ(tb.numel(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tb.ptr<float>()[i], bf16_to_f32(f32_to_bf16(bv[2 + i])));
  Tensor rows = w->read_rows_f32("a", 1, 3);
  EXPECT_EQ(rows.shape, (std::vector<int64_t>{2, 4}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rows.ptr<float>()[i], a[4 + i]);
  Tensor cols = w->read_cols_f32("a", 1, 3);
  EXPECT_EQ(cols.shape, (std::vector<int64_t>{3, 2}));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) EXPECT_EQ(cols.ptr<float>()[r * 2 + c], a[r * 4 + 1 + c]);
  EXPECT_THROW(w->read_rows_f32("a", 2, 4), tf::Error);
  EXPECT_THROW(w->read_cols_f32("a", 0, 5), tf::Error);
  expect_throws_naming([&] { w->info("zzz"); }, p, "zzz");
  // the file itself, too
  auto w2 = open_weights(p);
  EXPECT_EQ(w2->names().size(), 3u);
}

TEST(Safetensors, Sharded) {
  const fs::path d = tmp_dir() / "sharded";
  write_bytes(d / "model-00001-of-00002.safetensors", st_bytes({f32("x", {2}, {1, 2}), f32("y", {1}, {3})}));
  write_bytes(d / "model-00002-of-00002.safetensors", st_bytes({half("z", true, {2, 2}, {4, 5, 6, 7})}));
  json idx = {{"metadata", {{"total_size", 20}}},
              {"weight_map",
               {{"x", "model-00001-of-00002.safetensors"},
                {"y", "model-00001-of-00002.safetensors"},
                {"z", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(d / "model.safetensors.index.json") << idx.dump();
  auto w = open_weights(d.string());
  EXPECT_EQ(w->names().size(), 3u);
  EXPECT_NE(w->info("z").file.find("00002"), std::string::npos);
  Tensor z = w->read_f32("z");
  EXPECT_EQ(z.ptr<float>()[3], 7.0f);
  // A weight_map entry that is not in its shard.
  json bad = idx;
  bad["weight_map"]["q"] = "model-00002-of-00002.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << bad.dump();
  expect_throws_naming([&] { open_weights(d.string()); }, "model.safetensors.index.json", "q");
  // A missing shard.
  bad = idx;
  bad["weight_map"]["q"] = "model-00003-of-00003.safetensors";
  std::ofstream(d / "model.safetensors.index.json") << bad.dump();
  expect_throws_naming([&] { open_weights(d.string()); }, "model.safetensors.index.json", "00003");
}

TEST(Safetensors, ValidationErrors) {
  const fs::path d = tmp_dir() / "bad";
  const auto good = st_bytes({f32("w", {2, 2}, {1, 2, 3, 4})});
  {
    auto b = good;
    const uint64_t n = 1 << 20;
    std::memcpy(b.data(), &n, 8);
    const auto p = write_bytes(d / "hdrlen.safetensors", b);
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "header length");
  }
  {
    const auto p = write_bytes(d / "json.safetensors", st_bytes({f32("w", {1}, {1})}, "{\"w\": [1, 2"));
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "JSON");
  }
  {
    const auto p = write_bytes(
        d / "range.safetensors",
        st_bytes({f32("w", {1}, {1})}, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"));
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "w");
  }
  {
    const auto p = write_bytes(
        d / "span.safetensors",
        st_bytes({f32("w", {2}, {1, 2})}, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"));
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "12 bytes");
  }
  {
    const auto p = write_bytes(
        d / "dtype.safetensors",
        st_bytes({f32("w", {1}, {1})}, R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})"));
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "Q7");
  }
  {
    // Known but unconvertible dtype: opens, fails on read naming the tensor.
    StTensor t{"ids", "I32", {2}, std::vector<uint8_t>(8)};
    const auto p = write_bytes(d / "i32" / "model.safetensors", st_bytes({t}));
    auto w = open_weights(p);
    expect_throws_naming([&] { w->read_f32("ids"); }, p, "I32");
  }
  {
    const auto p = write_bytes(d / "tiny.safetensors", {1, 2, 3});
    expect_throws_naming([&] { SafetensorsFile f(p); }, p, "truncated");
  }
  fs::create_directories(d / "empty_dir");
  expect_throws_naming([&] { open_weights((d / "empty_dir").string()); }, "empty_dir");
  expect_throws_naming([&] { open_weights((d / "nothing.bin").string()); }, "nothing.bin");
}

namespace {

// config.json + model.safetensors for a 1-layer llama (hidden 8, 2 heads, 1 kv head, ffn 12, vocab 5).
fs::path tiny_hf(const std::string& name, bool drop_up = false, bool bad_k = false) {
  const fs::path d = tmp_dir() / name;
  fs::create_directories(d);
  json cfg = {{"model_type", "llama"}, {"vocab_size", 5}, {"hidden_size", 8}, {"intermediate_size", 12},
              {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", true},
              {"bos_token_id", 1}, {"eos_token_id", 2}, {"torch_dtype", "bfloat16"}, {"hidden_act", "silu"}};
  std::ofstream(d / "config.json") << cfg.dump(2);
  auto m = [](int r, int c) { return seq(r * c, 0.0f, 0.01f); };
  std::vector<StTensor> ts = {
      half("model.embed_tokens.weight", true, {5, 8}, m(5, 8)),
      half("model.norm.weight", true, {8}, m(1, 8)),
      half("model.layers.0.input_layernorm.weight", true, {8}, m(1, 8)),
      half("model.layers.0.post_attention_layernorm.weight", true, {8}, m(1, 8)),
      half("model.layers.0.self_attn.q_proj.weight", true, {8, 8}, m(8, 8)),
      bad_k ? half("model.layers.0.self_attn.k_proj.weight", true, {8, 8}, m(8, 8))
            : half("model.layers.0.self_attn.k_proj.weight", true, {4, 8}, m(4, 8)),
      half("model.layers.0.self_attn.v_proj.weight", true, {4, 8}, m(4, 8)),
      half("model.layers.0.self_attn.o_proj.weight", true, {8, 8}, m(8, 8)),
      half("model.layers.0.mlp.gate_proj.weight", true, {12, 8}, m(12, 8)),
      half("model.layers.0.mlp.down_proj.weight", true, {8, 12}, m(8, 12)),
  };
  if (!drop_up) ts.push_back(half("model.layers.0.mlp.up_proj.weight", true, {12, 8}, m(12, 8)));
  write_bytes(d / "model.safetensors", st_bytes(ts));
  return d;
}

}  // namespace

TEST(Checkpoint, HfFolder) {
  const auto d = tiny_hf("hf_ok");
  Checkpoint ck = open_checkpoint(d.string());
  EXPECT_FALSE(ck.is_gguf);
  EXPECT_FALSE(ck.gguf);
  EXPECT_EQ(ck.config.num_kv_heads, 1);
  EXPECT_EQ(ck.config.head_dim, 4);
  EXPECT_EQ(ck.config.torch_dtype, "bfloat16");
  Tensor k = ck.weights->read_f32("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(k.ptr<float>()[1], bf16_to_f32(f32_to_bf16(0.01f)));
}

TEST(Checkpoint, Errors) {
  const auto missing = tiny_hf("hf_missing", true);
  expect_throws_naming([&] { open_checkpoint(missing.string()); }, "hf_missing", "model.layers.0.mlp.up_proj.weight");
  const auto bad = tiny_hf("hf_badk", false, true);
  try {
    open_checkpoint(bad.string());
    FAIL();
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("[8, 8]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 8]"), std::string::npos) << m;
  }
  const fs::path nocfg = tmp_dir() / "no_config";
  fs::create_directories(nocfg);
  expect_throws_naming([&] { open_checkpoint(nocfg.string()); }, "no_config", "config.json");
  const auto txt = write_bytes(tmp_dir() / "weights.bin", {1, 2, 3});
  expect_throws_naming([&] { open_checkpoint(txt); }, "weights.bin");
  expect_throws_naming([&] { open_checkpoint((tmp_dir() / "nope.gguf").string()); }, "nope.gguf");
}
