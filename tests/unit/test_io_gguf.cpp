// GGUF reader: metadata, dequantization of every supported type against a
// reference computed here from hand-built blocks, q/k un-permutation, defects.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/half.h"
#include "io/gguf.h"
#include "io/weight_source.h"
#include "model/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tf;
using tf::testing::expect_throws_naming;
using tf::testing::write_bytes;

namespace {

fs::path tmp_dir() { return tf::testing::tmp_dir("tf_gguf_test"); }

// ---- a minimal GGUF writer for the tests ----
struct Buf {
  std::vector<uint8_t> b;
  template <class T> void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

struct GTensor {
  std::string name;
  uint32_t type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> data;
};

struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32;
  Buf kv;
  uint64_t n_kv = 0;
  std::vector<GTensor> tensors;

  void kv_u32(const std::string& k, uint32_t v) { kv.str(k); kv.put<uint32_t>(4); kv.put(v); ++n_kv; }
  void kv_i32(const std::string& k, int32_t v) { kv.str(k); kv.put<uint32_t>(5); kv.put(v); ++n_kv; }
  void kv_f32(const std::string& k, float v) { kv.str(k); kv.put<uint32_t>(6); kv.put(v); ++n_kv; }
  void kv_f64(const std::string& k, double v) { kv.str(k); kv.put<uint32_t>(12); kv.put(v); ++n_kv; }
  void kv_bool(const std::string& k, bool v) { kv.str(k); kv.put<uint32_t>(7); kv.put<uint8_t>(v); ++n_kv; }
  void kv_str(const std::string& k, const std::string& v) { kv.str(k); kv.put<uint32_t>(8); kv.str(v); ++n_kv; }
  void kv_u64(const std::string& k, uint64_t v) { kv.str(k); kv.put<uint32_t>(10); kv.put(v); ++n_kv; }
  void kv_strs(const std::string& k, const std::vector<std::string>& v) {
    kv.str(k); kv.put<uint32_t>(9); kv.put<uint32_t>(8); kv.put<uint64_t>(v.size());
    for (auto& s : v) kv.str(s);
    ++n_kv;
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    kv.str(k); kv.put<uint32_t>(9); kv.put<uint32_t>(5); kv.put<uint64_t>(v.size());
    for (auto x : v) kv.put(x);
    ++n_kv;
  }
  void kv_f32s(const std::string& k, const std::vector<float>& v) {
    kv.str(k); kv.put<uint32_t>(9); kv.put<uint32_t>(6); kv.put<uint64_t>(v.size());
    for (auto x : v) kv.put(x);
    ++n_kv;
  }
  void tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data) {
    tensors.push_back({name, type, std::move(ne), std::move(data)});
  }
  std::vector<uint8_t> bytes() const {
    Buf h;
    h.put<uint32_t>(0x46554747u);
    h.put<uint32_t>(version);
    h.put<uint64_t>(tensors.size());
    h.put<uint64_t>(n_kv);
    h.b.insert(h.b.end(), kv.b.begin(), kv.b.end());
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (auto& t : tensors) {
      h.str(t.name);
      h.put<uint32_t>(uint32_t(t.ne.size()));
      for (auto d : t.ne) h.put<uint64_t>(d);
      h.put<uint32_t>(t.type);
      h.put<uint64_t>(off);
      offs.push_back(off);
      off += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (h.b.size() % alignment) h.b.push_back(0);
    const size_t base = h.b.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      h.b.resize(base + offs[i], 0);
      h.b.insert(h.b.end(), tensors[i].data.begin(), tensors[i].data.end());
    }
    return h.b;
  }
  std::string write(const std::string& name) const {
    return write_bytes(tmp_dir() / name, bytes());
  }
};

void put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(uint8_t(x & 0xff));
  v.push_back(uint8_t(x >> 8));
}

// ---- hand-built quant blocks and their straightforward reference ----
// Q8_0: f16 scale d, 32 int8 q: x = d*q
std::vector<uint8_t> q8_0_block(uint16_t d, const int8_t q[32]) {
  std::vector<uint8_t> v;
  put16(v, d);
  for (int i = 0; i < 32; ++i) v.push_back(uint8_t(q[i]));
  return v;
}
// Q4_0: f16 d, 16 bytes; element i<16 is low nibble of byte i, i>=16 the high nibble of byte i-16; x = d*(nib-8)
std::vector<uint8_t> q4_0_block(uint16_t d, const uint8_t nib[32]) {
  std::vector<uint8_t> v;
  put16(v, d);
  for (int i = 0; i < 16; ++i) v.push_back(uint8_t(nib[i] | (nib[i + 16] << 4)));
  return v;
}
// Q4_1: f16 d, f16 m, 16 bytes; x = d*nib + m
std::vector<uint8_t> q4_1_block(uint16_t d, uint16_t m, const uint8_t nib[32]) {
  std::vector<uint8_t> v;
  put16(v, d);
  put16(v, m);
  for (int i = 0; i < 16; ++i) v.push_back(uint8_t(nib[i] | (nib[i + 16] << 4)));
  return v;
}

}  // namespace

TEST(Gguf, MetadataRoundTrip) {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("a.u32", 7);
  g.kv_i32("a.i32", -5);
  g.kv_u64("a.u64", 1ull << 40);
  g.kv_f32("a.f32", 0.5f);
  g.kv_f64("a.f64", 0.25);
  g.kv_bool("a.bool", true);
  g.kv_strs("a.strs", {"x", "", "yz"});
  g.kv_i32s("a.ints", {1, -2, 3});
  g.kv_f32s("a.floats", {1.5f, 2.5f});
  std::vector<uint8_t> d(16);
  float vals[4] = {1, 2, 3, 4};
  std::memcpy(d.data(), vals, 16);
  g.tensor("t", 0, {4}, d);
  for (uint32_t ver : {2u, 3u}) {
    g.version = ver;
    const auto p = g.write("meta" + std::to_string(ver) + ".gguf");
    GgufFile f(p);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("a.u32"), 7);
    EXPECT_EQ(f.get_int("a.i32"), -5);
    EXPECT_EQ(f.get_int("a.u64"), int64_t(1) << 40);
    EXPECT_DOUBLE_EQ(f.get_float("a.f32", 0), 0.5);
    EXPECT_DOUBLE_EQ(f.get_float("a.f64", 0), 0.25);
    EXPECT_TRUE(f.get_bool("a.bool", false));
    EXPECT_EQ(f.get_string_array("a.strs"), (std::vector<std::string>{"x", "", "yz"}));
    EXPECT_EQ(f.get_int_array("a.ints"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f.get_float_array("a.floats"), (std::vector<double>{1.5, 2.5}));
    EXPECT_EQ(f.get_int("missing", 42), 42);
    EXPECT_EQ(f.get_string("missing", "d"), "d");
    EXPECT_TRUE(f.get_int_array("missing").empty());
    expect_throws_naming([&] { f.get_int("missing"); }, p, "missing");
    expect_throws_naming([&] { f.get_int("general.architecture"); }, p);
    ASSERT_EQ(f.tensors().size(), 1u);
    const GgufTensor* t = f.tensor("t");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->nbytes, 16u);
    EXPECT_EQ(std::memcmp(f.tensor_data(*t), vals, 16), 0);
    EXPECT_EQ(f.tensor("nope"), nullptr);
  }
}

TEST(Gguf, CustomAlignment) {
  GgufBuilder g;
  g.alignment = 64;
  g.kv_u32("general.alignment", 64);
  std::vector<uint8_t> a(8, 1), b(8, 2);
  g.tensor("a", 0, {2}, a);
  g.tensor("b", 0, {2}, b);
  const auto p = g.write("align64.gguf");
  GgufFile f(p);
  EXPECT_EQ(f.tensor("b")->offset, 64u);
  EXPECT_EQ(f.tensor_data(*f.tensor("b"))[0], 2);
}

TEST(Gguf, DequantizeEveryType) {
  std::mt19937 rng(1);
  const int n = 64;  // two blocks
  // F32
  {
    std::vector<float> x(n);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-3, 3)(rng);
    std::vector<float> out(n);
    ggml_dequantize(0, reinterpret_cast<const uint8_t*>(x.data()), 0, n, out.data());
    EXPECT_EQ(out, x);
  }
  // F16 and BF16
  {
    std::vector<uint16_t> h(n), bf(n);
    std::vector<float> rh(n), rb(n);
    for (int i = 0; i < n; ++i) {
      const float v = std::uniform_real_distribution<float>(-3, 3)(rng);
      h[i] = f32_to_f16(v);
      bf[i] = f32_to_bf16(v);
      rh[i] = f16_to_f32(h[i]);
      rb[i] = bf16_to_f32(bf[i]);
    }
    std::vector<float> out(n);
    ggml_dequantize(1, reinterpret_cast<const uint8_t*>(h.data()), 0, n, out.data());
    EXPECT_EQ(out, rh);
    ggml_dequantize(30, reinterpret_cast<const uint8_t*>(bf.data()), 0, n, out.data());
    EXPECT_EQ(out, rb);
    // sub-range
    ggml_dequantize(1, reinterpret_cast<const uint8_t*>(h.data()), 5, 7, out.data());
    for (int i = 0; i < 7; ++i) EXPECT_EQ(out[i], rh[5 + i]);
  }
  // Q8_0, Q4_0, Q4_1: two blocks each, reference computed element by element.
  std::vector<uint8_t> q8, q40, q41;
  std::vector<float> r8, r40, r41;
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk ? 0.125f : -0.75f, m = blk ? -1.5f : 0.25f;
    const uint16_t dh = f32_to_f16(d), mh = f32_to_f16(m);
    int8_t q[32];
    uint8_t nib[32];
    for (int i = 0; i < 32; ++i) {
      q[i] = int8_t(std::uniform_int_distribution<int>(-128, 127)(rng));
      nib[i] = uint8_t(std::uniform_int_distribution<int>(0, 15)(rng));
    }
    nib[0] = 0;
    nib[31] = 15;
    q[1] = -128;
    auto b8 = q8_0_block(dh, q), b40 = q4_0_block(dh, nib), b41 = q4_1_block(dh, mh, nib);
    q8.insert(q8.end(), b8.begin(), b8.end());
    q40.insert(q40.end(), b40.begin(), b40.end());
    q41.insert(q41.end(), b41.begin(), b41.end());
    for (int i = 0; i < 32; ++i) {
      r8.push_back(f16_to_f32(dh) * float(q[i]));
      r40.push_back(f16_to_f32(dh) * float(int(nib[i]) - 8));
      r41.push_back(f16_to_f32(dh) * float(nib[i]) + f16_to_f32(mh));
    }
  }
  struct Case { uint32_t type; const std::vector<uint8_t>* data; const std::vector<float>* ref; };
  for (const Case& c : {Case{8, &q8, &r8}, Case{2, &q40, &r40}, Case{3, &q41, &r41}}) {
    std::vector<float> out(n);
    ggml_dequantize(c.type, c.data->data(), 0, n, out.data());
    for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(out[i], (*c.ref)[i]) << "type " << c.type << " i " << i;
    // ranges that start and end inside blocks
    for (auto [b, len] : {std::pair{3, 10}, std::pair{30, 5}, std::pair{31, 33}, std::pair{32, 32}}) {
      std::vector<float> part(len);
      ggml_dequantize(c.type, c.data->data(), b, len, part.data());
      for (int i = 0; i < len; ++i) EXPECT_FLOAT_EQ(part[i], (*c.ref)[b + i]) << "type " << c.type;
    }
  }
  EXPECT_TRUE(ggml_can_dequantize(3));
  EXPECT_TRUE(ggml_can_dequantize(12));
  EXPECT_FALSE(ggml_can_dequantize(10));  // Q2_K
  std::vector<uint8_t> k(84);
  float dummy[256];
  EXPECT_THROW(ggml_dequantize(10, k.data(), 0, 256, dummy), tf::Error);
  ASSERT_NE(ggml_type_info(12), nullptr);
  EXPECT_STREQ(ggml_type_info(12)->name, "Q4_K");
  EXPECT_EQ(ggml_type_info(99), nullptr);
}

namespace {

// A tiny llama model: hidden 64, 4 heads of 16, 2 kv heads, ffn 96, vocab 8, 1 layer.
constexpr int H = 64, NH = 4, NKV = 2, HD = 16, FF = 96, V = 8;

std::vector<float> hf_matrix(int rows, int cols, float seed) {
  std::vector<float> m(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m[size_t(r) * cols + c] = seed + 0.01f * r + 0.0001f * c;
  return m;
}

// llama.cpp's converter: reshape(n_head, 2, hd/2, in).swapaxes(1, 2)
std::vector<float> llama_cpp_permute(const std::vector<float>& w, int rows, int cols, int n_head) {
  std::vector<float> out(w.size());
  const int hd = rows / n_head, half = hd / 2;
  for (int h = 0; h < n_head; ++h)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < half; ++j) {
        const int src = h * hd + s * half + j, dst = h * hd + j * 2 + s;
        std::memcpy(&out[size_t(dst) * cols], &w[size_t(src) * cols], size_t(cols) * 4);
      }
  return out;
}

std::vector<uint8_t> as_f32(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> as_f16(const std::vector<float>& v) {
  std::vector<uint8_t> b;
  for (float x : v) put16(b, f32_to_f16(x));
  return b;
}
std::vector<uint8_t> as_bf16(const std::vector<float>& v) {
  std::vector<uint8_t> b;
  for (float x : v) put16(b, f32_to_bf16(x));
  return b;
}
// Q8_0 with the scale max|x|/127 (what llama.cpp does); returns the bytes.
std::vector<uint8_t> as_q8_0(const std::vector<float>& v) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i < v.size(); i += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[i + j]));
    const uint16_t dh = f32_to_f16(amax / 127.f);
    const float d = f16_to_f32(dh);
    int8_t q[32];
    for (int j = 0; j < 32; ++j) q[j] = int8_t(d ? std::lround(v[i + j] / d) : 0);
    auto blk = q8_0_block(dh, q);
    b.insert(b.end(), blk.begin(), blk.end());
  }
  return b;
}

GgufBuilder tiny_llama(bool untied, uint32_t q_type) {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("llama.block_count", 1);
  g.kv_u32("llama.context_length", 256);
  g.kv_u32("llama.embedding_length", H);
  g.kv_u32("llama.feed_forward_length", FF);
  g.kv_u32("llama.attention.head_count", NH);
  g.kv_u32("llama.attention.head_count_kv", NKV);
  g.kv_f32("llama.rope.freq_base", 500000.f);
  g.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.kv_u32("llama.rope.dimension_count", HD);
  g.kv_strs("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f", "g", "h"});
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  auto mat = [&](int rows, int cols, float seed) { return hf_matrix(rows, cols, seed); };
  g.tensor("token_embd.weight", 1, {H, V}, as_f16(mat(V, H, 0.1f)));
  g.tensor("output_norm.weight", 0, {H}, as_f32(mat(1, H, 1.0f)));
  if (untied) g.tensor("output.weight", 30, {H, V}, as_bf16(mat(V, H, -0.2f)));
  g.tensor("blk.0.attn_norm.weight", 0, {H}, as_f32(mat(1, H, 0.5f)));
  g.tensor("blk.0.ffn_norm.weight", 0, {H}, as_f32(mat(1, H, 0.6f)));
  auto enc = [&](const std::vector<float>& m) { return q_type == 8 ? as_q8_0(m) : as_f32(m); };
  g.tensor("blk.0.attn_q.weight", q_type, {H, NH * HD}, enc(llama_cpp_permute(mat(NH * HD, H, 0.2f), NH * HD, H, NH)));
  g.tensor("blk.0.attn_k.weight", q_type, {H, NKV * HD},
           enc(llama_cpp_permute(mat(NKV * HD, H, 0.3f), NKV * HD, H, NKV)));
  g.tensor("blk.0.attn_v.weight", q_type, {H, NKV * HD}, enc(mat(NKV * HD, H, 0.4f)));
  g.tensor("blk.0.attn_output.weight", q_type, {NH * HD, H}, enc(mat(H, NH * HD, 0.5f)));
  g.tensor("blk.0.ffn_gate.weight", q_type, {H, FF}, enc(mat(FF, H, 0.6f)));
  g.tensor("blk.0.ffn_up.weight", q_type, {H, FF}, enc(mat(FF, H, 0.7f)));
  g.tensor("blk.0.ffn_down.weight", q_type, {FF, H}, enc(mat(H, FF, 0.8f)));
  return g;
}

}  // namespace

TEST(GgufWeights, TinyLlamaConfigAndUnpermute) {
  const auto p = tiny_llama(false, 0).write("tiny.gguf");
  GgufFile f(p);
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.num_layers, 1);
  EXPECT_EQ(c.hidden_size, H);
  EXPECT_EQ(c.intermediate_size, FF);
  EXPECT_EQ(c.num_heads, NH);
  EXPECT_EQ(c.num_kv_heads, NKV);
  EXPECT_EQ(c.head_dim, HD);
  EXPECT_EQ(c.vocab_size, V);  // from tokenizer.ggml.tokens
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));

  Checkpoint ck = open_checkpoint(p);
  EXPECT_TRUE(ck.is_gguf);
  ASSERT_TRUE(ck.gguf);
  const WeightSource& w = *ck.weights;
  EXPECT_FALSE(w.has("lm_head.weight"));
  EXPECT_TRUE(w.has("model.embed_tokens.weight"));
  EXPECT_EQ(w.info("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{H, FF}));
  EXPECT_EQ(w.info("model.embed_tokens.weight").stored_type, "F16");
  Tensor q = w.read_f32("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{NH * HD, H}));
  const auto qref = hf_matrix(NH * HD, H, 0.2f);
  for (size_t i = 0; i < qref.size(); ++i) ASSERT_EQ(q.ptr<float>()[i], qref[i]) << i;
  const auto kref = hf_matrix(NKV * HD, H, 0.3f);
  Tensor k = w.read_rows_f32("model.layers.0.self_attn.k_proj.weight", 5, 21);
  for (int r = 0; r < 16; ++r)
    for (int cc = 0; cc < H; ++cc) ASSERT_EQ(k.ptr<float>()[r * H + cc], kref[(5 + r) * H + cc]);
  Tensor o = w.read_cols_f32("model.layers.0.self_attn.o_proj.weight", 16, 48);
  const auto oref = hf_matrix(H, NH * HD, 0.5f);
  for (int r = 0; r < H; ++r)
    for (int cc = 0; cc < 32; ++cc) ASSERT_EQ(o.ptr<float>()[r * 32 + cc], oref[r * NH * HD + 16 + cc]);
  Tensor n = w.read_f32("model.norm.weight");
  EXPECT_EQ(n.shape, (std::vector<int64_t>{H}));
  EXPECT_FLOAT_EQ(n.ptr<float>()[3], 1.0f + 0.0003f);
  Tensor e = w.read_rows_f32("model.embed_tokens.weight", 7, 8);
  EXPECT_EQ(e.ptr<float>()[0], f16_to_f32(f32_to_f16(0.1f + 0.07f)));
  EXPECT_THROW(w.read_rows_f32("model.embed_tokens.weight", 7, 9), tf::Error);
  expect_throws_naming([&] { w.info("nope"); }, p, "nope");
}

TEST(GgufWeights, UntiedAndQ8_0) {
  const auto p = tiny_llama(true, 8).write("tiny_q8.gguf");
  Checkpoint ck = open_checkpoint(p);
  EXPECT_FALSE(ck.config.tie_word_embeddings);
  ASSERT_TRUE(ck.weights->has("lm_head.weight"));
  EXPECT_EQ(ck.weights->info("lm_head.weight").stored_type, "BF16");
  Tensor lm = ck.weights->read_f32("lm_head.weight");
  EXPECT_EQ(lm.ptr<float>()[0], bf16_to_f32(f32_to_bf16(-0.2f)));
  // Q8_0 q_proj un-permuted: close to the HF matrix within the quantization step.
  Tensor q = ck.weights->read_f32("model.layers.0.self_attn.q_proj.weight");
  const auto qref = hf_matrix(NH * HD, H, 0.2f);
  for (size_t i = 0; i < qref.size(); ++i) ASSERT_NEAR(q.ptr<float>()[i], qref[i], 1.0f / 127.f) << i;
  EXPECT_EQ(ck.weights->info("model.layers.0.self_attn.q_proj.weight").stored_type, "Q8_0");
}

TEST(GgufWeights, MissingTensorIsNamed) {
  GgufBuilder g = tiny_llama(false, 0);
  g.tensors.erase(std::remove_if(g.tensors.begin(), g.tensors.end(),
                                 [](const GTensor& t) { return t.name == "blk.0.ffn_up.weight"; }),
                  g.tensors.end());
  const auto p = g.write("tiny_missing.gguf");
  expect_throws_naming([&] { open_checkpoint(p); }, p, "model.layers.0.mlp.up_proj.weight");
}

TEST(GgufWeights, WrongShapeIsNamed) {
  GgufBuilder g = tiny_llama(false, 0);
  for (auto& t : g.tensors)
    if (t.name == "blk.0.ffn_norm.weight") {
      t.ne = {H / 2};
      t.data.resize(H / 2 * 4);
    }
  const auto p = g.write("tiny_shape.gguf");
  expect_throws_naming([&] { open_checkpoint(p); }, p, "post_attention_layernorm");
}

TEST(GgufErrors, CorruptFilesNameTheFile) {
  GgufBuilder g = tiny_llama(false, 0);
  const auto good = g.bytes();
  {
    auto b = good;
    b[0] = 'X';
    const auto p = write_bytes(tmp_dir() / "bad_magic.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p, "magic");
  }
  {
    auto b = good;
    b[4] = 1;  // version 1
    const auto p = write_bytes(tmp_dir() / "bad_version.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p, "version");
  }
  {
    auto b = good;
    b.resize(b.size() - 100);  // last tensor's data cut short
    const auto p = write_bytes(tmp_dir() / "truncated.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p, "blk.0.ffn_down.weight");
  }
  {
    auto b = good;
    b.resize(200);  // cut inside the metadata
    const auto p = write_bytes(tmp_dir() / "truncated_meta.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p);
  }
  {
    auto b = good;
    const uint64_t huge = 1ull << 50;
    std::memcpy(&b[24], &huge, 8);  // first key's string length
    const auto p = write_bytes(tmp_dir() / "bad_strlen.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p, "length");
  }
  {
    auto b = good;
    const uint64_t huge = 1ull << 40;
    std::memcpy(&b[16], &huge, 8);  // kv count
    const auto p = write_bytes(tmp_dir() / "bad_kvcount.gguf", b);
    expect_throws_naming([&] { GgufFile f(p); }, p, "count");
  }
  {
    const auto p = write_bytes(tmp_dir() / "empty.gguf", std::vector<uint8_t>{});
    expect_throws_naming([&] { GgufFile f(p); }, p);
  }
  {
    GgufBuilder h;
    h.kv_u32("general.alignment", 3);
    const auto p = h.write("bad_align.gguf");
    expect_throws_naming([&] { GgufFile f(p); }, p, "alignment");
  }
  {
    GgufBuilder h;
    h.tensor("odd", 2, {20}, std::vector<uint8_t>(18));  // Q4_0 row of 20 is not whole blocks
    const auto p = h.write("bad_block.gguf");
    expect_throws_naming([&] { GgufFile f(p); }, p, "odd");
  }
  {
    GgufBuilder h;
    h.tensor("t", 77, {4}, std::vector<uint8_t>(16));
    const auto p = h.write("bad_type.gguf");
    expect_throws_naming([&] { GgufFile f(p); }, p, "77");
  }
  expect_throws_naming([&] { GgufFile f((tmp_dir() / "does_not_exist.gguf").string()); }, "does_not_exist.gguf");
  {
    GgufBuilder h = tiny_llama(false, 0);
    h.n_kv = 0;
    h.kv = Buf{};
    h.kv_str("general.architecture", "qwen2");
    const auto p = h.write("arch.gguf");
    GgufFile f(p);
    expect_throws_naming([&] { config_from_gguf(f); }, p, "qwen2");
  }
}

TEST(GgufDefaultModel, SmolLM2Loads) {
  const char* home = std::getenv("HOME");
  const std::string p = std::string(home ? home : "") + "/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(p)) GTEST_SKIP() << "default model not present: " << p;
  Checkpoint ck = open_checkpoint(p);
  const ModelConfig& c = ck.config;
  EXPECT_TRUE(ck.is_gguf);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(ck.weights->has("lm_head.weight"));
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.param_count(), 134515008);
  EXPECT_EQ(ck.weights->info("model.layers.0.self_attn.q_proj.weight").stored_type, "Q4_1");
  EXPECT_EQ(ck.weights->info("model.embed_tokens.weight").stored_type, "Q8_0");
  Tensor k = ck.weights->read_f32("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{192, 576}));
  double s = 0;
  for (int64_t i = 0; i < k.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(k.ptr<float>()[i]));
    s += std::fabs(k.ptr<float>()[i]);
  }
  EXPECT_GT(s, 0);
  // Values checked once by hand against gguf-py's dequantize + transformers'
  // reverse permute (exact match over the whole tensor).
  Tensor e = ck.weights->read_rows_f32("model.embed_tokens.weight", 1, 2);
  EXPECT_EQ(e.numel(), 576);
}

// tests/fixtures/io/quants.gguf was written once with gguf-py (GGUFWriter): for
// each type, tensor q.<TYPE> holds random blocks (scales set to small finite
// f16 values) and ref.<TYPE> (F32) holds gguf.quants.dequantize of the same
// bytes. This checks every supported quant type against an independent decoder
// and that a gguf-py-written file parses.
TEST(Gguf, DequantizeMatchesGgufPyFixture) {
  const std::string p = std::string(TF_FIXTURES) + "/io/quants.gguf";
  GgufFile f(p);
  int checked = 0;
  for (const char* type : {"Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}) {
    const GgufTensor* q = f.tensor(std::string("q.") + type);
    const GgufTensor* r = f.tensor(std::string("ref.") + type);
    ASSERT_NE(q, nullptr) << type;
    ASSERT_NE(r, nullptr) << type;
    ASSERT_STREQ(ggml_type_info(q->ggml_type)->name, type);
    ASSERT_TRUE(ggml_can_dequantize(q->ggml_type)) << type;
    int64_t n = 1;
    for (auto d : q->ne) n *= d;
    std::vector<float> ref(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    std::memcpy(ref.data(), f.tensor_data(*r), size_t(n) * 4);
    ggml_dequantize(q->ggml_type, f.tensor_data(*q), 0, n, out.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ref[i]) << type << " element " << i;
    // a range that starts and ends mid-block
    const int64_t b = 37, len = n - 37 - 11;
    std::vector<float> part(static_cast<size_t>(len));
    ggml_dequantize(q->ggml_type, f.tensor_data(*q), b, len, part.data());
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(part[i], ref[b + i]) << type << " element " << b + i;
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}
