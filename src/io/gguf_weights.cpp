// GGUF tensors exposed under HF Llama names, dequantized on read, with the
// llama.cpp q/k row permutation undone.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <regex>

#include "core/check.h"
#include "core/half.h"
#include "io/gguf.h"
#include "io/weight_source.h"
#include "model/config.h"

namespace tf {

namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12,
                   kQ5_K = 13, kQ6_K = 14, kBF16 = 30;

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};

const TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},      {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},      {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 40}},
    {10, {"Q2_K", 256, 84}},    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},   {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},   {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},        {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},   {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

inline uint16_t rd16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K/Q5_K pack eight 6-bit (scale, min) pairs into 12 bytes.
inline void k_scale_min(int j, const uint8_t* q, int& sc, int& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// One whole block -> `block` floats.
void dequant_block(uint32_t type, const uint8_t* b, float* out) {
  switch (type) {
    case kQ5_0:
    case kQ5_1: {
      const bool has_min = type == kQ5_1;
      const float d = f16_to_f32(rd16(b));
      const float m = has_min ? f16_to_f32(rd16(b + 2)) : 0.f;
      uint32_t qh;
      std::memcpy(&qh, b + (has_min ? 4 : 2), 4);
      const uint8_t* q = b + (has_min ? 8 : 6);
      const int off = has_min ? 0 : 16;
      for (int i = 0; i < 16; ++i) {
        const int lo = (q[i] & 0x0f) | int(((qh >> i) & 1) << 4);
        const int hi = (q[i] >> 4) | int(((qh >> (i + 16)) & 1) << 4);
        out[i] = float(lo - off) * d + m;
        out[i + 16] = float(hi - off) * d + m;
      }
      return;
    }
    case kQ4_K:
    case kQ5_K: {
      const bool five = type == kQ5_K;
      const float d = f16_to_f32(rd16(b));
      const float dmin = f16_to_f32(rd16(b + 2));
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;                   // Q5_K only: 32 bytes of high bits
      const uint8_t* q = b + (five ? 48 : 16);      // 128 bytes of nibbles
      for (int g = 0; g < 4; ++g) {                 // 64 values per group: two sub-blocks of 32
        int sc1, m1, sc2, m2;
        k_scale_min(2 * g, scales, sc1, m1);
        k_scale_min(2 * g + 1, scales, sc2, m2);
        const float d1 = d * float(sc1), dm1 = dmin * float(m1);
        const float d2 = d * float(sc2), dm2 = dmin * float(m2);
        for (int l = 0; l < 32; ++l) {
          int lo = q[32 * g + l] & 0x0f, hi = q[32 * g + l] >> 4;
          if (five) {
            lo += ((qh[l] >> (2 * g)) & 1) << 4;
            hi += ((qh[l] >> (2 * g + 1)) & 1) << 4;
          }
          out[64 * g + l] = d1 * float(lo) - dm1;
          out[64 * g + 32 + l] = d2 * float(hi) - dm2;
        }
      }
      return;
    }
    case kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = f16_to_f32(rd16(b + 208));
      for (int n = 0; n < 2; ++n) {  // two halves of 128
        const uint8_t* L = ql + 64 * n;
        const uint8_t* Hh = qh + 32 * n;
        const int8_t* S = sc + 8 * n;
        float* y = out + 128 * n;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = int((L[l] & 0x0f) | (((Hh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = int((L[l + 32] & 0x0f) | (((Hh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = int((L[l] >> 4) | (((Hh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = int((L[l + 32] >> 4) | (((Hh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * float(S[is]) * float(q1);
          y[l + 32] = d * float(S[is + 2]) * float(q2);
          y[l + 64] = d * float(S[is + 4]) * float(q3);
          y[l + 96] = d * float(S[is + 6]) * float(q4);
        }
      }
      return;
    }
    case kQ8_0: {
      const float d = f16_to_f32(rd16(b));
      const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
      for (int i = 0; i < 32; ++i) out[i] = float(q[i]) * d;
      return;
    }
    case kQ4_0: {
      const float d = f16_to_f32(rd16(b));
      const uint8_t* q = b + 2;
      for (int i = 0; i < 16; ++i) {
        out[i] = float(int(q[i] & 0x0f) - 8) * d;
        out[i + 16] = float(int(q[i] >> 4) - 8) * d;
      }
      return;
    }
    case kQ4_1: {
      const float d = f16_to_f32(rd16(b));
      const float m = f16_to_f32(rd16(b + 2));
      const uint8_t* q = b + 4;
      for (int i = 0; i < 16; ++i) {
        out[i] = float(q[i] & 0x0f) * d + m;
        out[i + 16] = float(q[i] >> 4) * d + m;
      }
      return;
    }
  }
}

struct Mapped {
  std::string gguf_name;
  int permute_heads = 0;  // >0: undo llama.cpp's q/k row permutation with this many heads
};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t t) {
  for (const auto& r : kTypes)
    if (r.id == t) return &r.info;
  return nullptr;
}

bool ggml_can_dequantize(uint32_t t) {
  return t == kF32 || t == kF16 || t == kBF16 || t == kQ8_0 || t == kQ4_0 || t == kQ4_1 || t == kQ5_0 ||
         t == kQ5_1 || t == kQ4_K || t == kQ5_K || t == kQ6_K;
}

void ggml_dequantize(uint32_t type, const uint8_t* data, int64_t begin, int64_t n, float* dst) {
  if (n <= 0) return;
  switch (type) {
    case kF32:
      std::memcpy(dst, data + begin * 4, size_t(n) * 4);
      return;
    case kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(rd16(data + (begin + i) * 2));
      return;
    case kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(rd16(data + (begin + i) * 2));
      return;
    case kQ8_0:
    case kQ4_0:
    case kQ4_1:
    case kQ5_0:
    case kQ5_1:
    case kQ4_K:
    case kQ5_K:
    case kQ6_K: {
      const GgmlTypeInfo* ti = ggml_type_info(type);
      const int64_t bs = ti->block;
      const int64_t end = begin + n;
      float tmp[256];
      for (int64_t blk = begin / bs; blk * bs < end; ++blk) {
        const int64_t b0 = blk * bs;
        const uint8_t* src = data + blk * ti->bytes;
        if (b0 >= begin && b0 + bs <= end) {
          dequant_block(type, src, dst + (b0 - begin));
        } else {
          dequant_block(type, src, tmp);
          const int64_t lo = std::max(b0, begin), hi = std::min(b0 + bs, end);
          std::memcpy(dst + (lo - begin), tmp + (lo - b0), size_t(hi - lo) * 4);
        }
      }
      return;
    }
  }
  const GgmlTypeInfo* ti = ggml_type_info(type);
  TF_FAIL("cannot dequantize ggml type " << (ti ? ti->name : "?") << " (" << type
                                         << "); supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
}

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string& src = f.path();
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  TF_CHECK(arch == "llama", src << ": unsupported architecture '" << arch << "' (only llama)");
  c.architecture = arch;
  const std::string p = arch + ".";
  auto need_int = [&](const std::string& k) {
    TF_CHECK(f.has(p + k), src << ": missing metadata key " << p << k);
    return f.get_int(p + k);
  };
  c.num_layers = need_int("block_count");
  c.hidden_size = need_int("embedding_length");
  c.intermediate_size = need_int("feed_forward_length");
  c.num_heads = need_int("attention.head_count");
  c.num_kv_heads = f.get_int(p + "attention.head_count_kv", c.num_heads);
  c.max_position_embeddings = f.get_int(p + "context_length", c.max_position_embeddings);
  c.rope_theta = f.get_float(p + "rope.freq_base", 10000.0);
  c.rms_norm_eps = f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  // The file stores f32; print/compare it as the decimal HF wrote (9.999999747e-06 -> 1e-05).
  {
    const float e = float(c.rms_norm_eps);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.7g", double(e));
    c.rms_norm_eps = std::strtod(buf, nullptr);
    const float t = float(c.rope_theta);
    std::snprintf(buf, sizeof buf, "%.7g", double(t));
    c.rope_theta = std::strtod(buf, nullptr);
  }
  TF_CHECK(c.num_heads > 0, src << ": " << p << "attention.head_count must be positive");
  if (f.has(p + "attention.key_length")) c.head_dim = f.get_int(p + "attention.key_length");
  else if (f.has(p + "rope.dimension_count")) c.head_dim = f.get_int(p + "rope.dimension_count");
  else {
    TF_CHECK(c.hidden_size % c.num_heads == 0,
             src << ": " << p << "embedding_length " << c.hidden_size << " is not a multiple of " << p
                 << "attention.head_count " << c.num_heads << " and no " << p << "attention.key_length is given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (f.has(p + "vocab_size")) {
    c.vocab_size = f.get_int(p + "vocab_size");
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = int64_t(f.get_string_array("tokenizer.ggml.tokens").size());
  } else if (const GgufTensor* te = f.tensor("token_embd.weight")) {
    c.vocab_size = te->ne.size() >= 2 ? te->ne[1] : 0;
  }
  // rope scaling
  const std::string st = f.get_string(p + "rope.scaling.type", "");
  if (!st.empty() && st != "none") {
    TF_CHECK(st == "linear" || st == "yarn",
             src << ": unsupported " << p << "rope.scaling.type '" << st << "' (supported: none, linear, yarn)");
    c.rope_scaling.type = st;
    c.rope_scaling.factor = f.get_float(p + "rope.scaling.factor", 1.0);
    c.rope_scaling.original_max_position_embeddings = f.get_int(p + "rope.scaling.original_context_length", 0);
    if (st == "yarn") {
      c.rope_scaling.beta_fast = f.get_float(p + "rope.scaling.yarn_beta_fast", c.rope_scaling.beta_fast);
      c.rope_scaling.beta_slow = f.get_float(p + "rope.scaling.yarn_beta_slow", c.rope_scaling.beta_slow);
      c.rope_scaling.attention_factor = f.get_float(p + "rope.scaling.attn_factor", 0.0);
    }
  } else if (f.has(p + "rope.scale_linear")) {
    const double s = f.get_float(p + "rope.scale_linear", 1.0);
    if (s != 1.0) {
      c.rope_scaling.type = "linear";
      c.rope_scaling.factor = s;
    }
  }
  TF_CHECK(!f.tensor("rope_freqs.weight"),
           src << ": rope_freqs.weight (llama3-style rope frequency factors) is not supported for GGUF; "
                  "use the HF checkpoint");
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id", -1);
  if (f.has("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(f.get_int("tokenizer.ggml.eos_token_id"));
  if (f.has("tokenizer.ggml.eot_token_id")) {
    const int64_t eot = f.get_int("tokenizer.ggml.eot_token_id");
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), eot) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(eot);
  }
  // Report the dominant storage type of the 2-D weights.
  std::map<std::string, int> counts;
  for (const auto& t : f.tensors())
    if (t.ne.size() >= 2)
      if (const GgmlTypeInfo* ti = ggml_type_info(t.ggml_type)) ++counts[ti->name];
  if (!counts.empty()) {
    auto it = std::max_element(counts.begin(), counts.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
    c.torch_dtype = "gguf " + it->first;
  }
  c.validate(src);
  return c;
}

namespace {

class GgufWeights : public WeightSource {
 public:
  GgufWeights(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg) : f_(std::move(f)) {
    const bool llama = cfg.architecture == "llama";
    static const std::regex blk(R"(blk\.(\d+)\.(\w+)\.weight)");
    static const std::map<std::string, std::string> per_layer = {
        {"attn_q", "self_attn.q_proj"},     {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"},     {"attn_output", "self_attn.o_proj"},
        {"ffn_gate", "mlp.gate_proj"},      {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},      {"attn_norm", "input_layernorm"},
        {"ffn_norm", "post_attention_layernorm"},
    };
    for (const auto& t : f_->tensors()) {
      Mapped m;
      m.gguf_name = t.name;
      std::string hf = t.name;  // unmapped tensors keep their GGUF name
      std::smatch sm;
      if (t.name == "token_embd.weight") hf = "model.embed_tokens.weight";
      else if (t.name == "output_norm.weight") hf = "model.norm.weight";
      else if (t.name == "output.weight") hf = "lm_head.weight";
      else if (std::regex_match(t.name, sm, blk)) {
        auto it = per_layer.find(sm[2].str());
        if (it != per_layer.end()) {
          hf = "model.layers." + sm[1].str() + "." + it->second + ".weight";
          if (llama && sm[2].str() == "attn_q") m.permute_heads = int(cfg.num_heads);
          if (llama && sm[2].str() == "attn_k") m.permute_heads = int(cfg.num_kv_heads);
        }
      }
      if (m.permute_heads > 0) {
        const int64_t rows = t.ne.size() >= 2 ? t.ne[1] : 0;
        TF_CHECK(t.ne.size() == 2 && rows % (2 * m.permute_heads) == 0,
                 f_->path() << ": tensor " << t.name << " has " << rows << " rows, not divisible into "
                            << m.permute_heads << " heads of even size");
      }
      TF_CHECK(map_.find(hf) == map_.end(), f_->path() << ": two tensors map to " << hf);
      map_[hf] = m;
      order_.push_back(hf);
    }
  }

  bool has(const std::string& name) const override { return map_.count(name) > 0; }

  TensorInfo info(const std::string& name) const override {
    const GgufTensor& t = tensor(name);
    TensorInfo i;
    i.name = name;
    i.file = f_->path();
    const GgmlTypeInfo* ti = ggml_type_info(t.ggml_type);
    i.stored_type = ti ? ti->name : "?";
    i.shape.assign(t.ne.rbegin(), t.ne.rend());
    return i;
  }

  std::vector<std::string> names() const override { return order_; }

  void read_rows_f32(const std::string& name, int64_t row_begin, int64_t row_end, float* dst) const override {
    const GgufTensor& t = tensor(name);
    const Mapped& m = map_.at(name);
    // Rows are over HF shape[0] (the outermost ggml dimension).
    const int64_t outer = t.ne.back();
    int64_t row_len = 1;
    for (size_t d = 0; d + 1 < t.ne.size(); ++d) row_len *= t.ne[d];
    TF_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= outer,
             f_->path() << ": tensor " << name << ": rows " << row_begin << ".." << row_end << " out of range [0, "
                        << outer << ")");
    if (!ggml_can_dequantize(t.ggml_type)) {
      const GgmlTypeInfo* ti = ggml_type_info(t.ggml_type);
      TF_FAIL(f_->path() << ": tensor " << t.name << " has type " << (ti ? ti->name : "?")
                         << ", which cannot be dequantized (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
    }
    const uint8_t* data = f_->tensor_data(t);
    if (m.permute_heads == 0) {
      ggml_dequantize(t.ggml_type, data, row_begin * row_len, (row_end - row_begin) * row_len, dst);
      return;
    }
    // HF row r = h*hd + s*(hd/2) + j was written by llama.cpp as row h*hd + 2*j + s.
    const int64_t hd = outer / m.permute_heads, half = hd / 2;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t h = r / hd, w = r % hd, s = w / half, j = w % half;
      const int64_t g = h * hd + 2 * j + s;
      ggml_dequantize(t.ggml_type, data, g * row_len, row_len, dst + (r - row_begin) * row_len);
    }
  }

 private:
  const GgufTensor& tensor(const std::string& name) const {
    auto it = map_.find(name);
    TF_CHECK(it != map_.end(), f_->path() << ": no tensor " << name);
    return *f_->tensor(it->second.gguf_name);
  }

  std::shared_ptr<const GgufFile> f_;
  std::map<std::string, Mapped> map_;
  std::vector<std::string> order_;
};

}  // namespace

std::unique_ptr<WeightSource> make_gguf_weights(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg) {
  return std::make_unique<GgufWeights>(std::move(f), cfg);
}

std::unique_ptr<WeightSource> open_gguf_weights(const std::string& path) {
  auto f = std::make_shared<const GgufFile>(path);
  return make_gguf_weights(f, config_from_gguf(*f));
}

}  // namespace tf
