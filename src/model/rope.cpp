#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "ops/ops.h"

namespace tf {

namespace {

// torch: base ** (arange(0, dim, 2).float() / dim) in float32.
std::vector<float> pos_freqs_f32(double base, int64_t dim) {
  std::vector<float> f(size_t(dim / 2));
  const float b = float(base);  // the Python scalar joins a float32 op as float32
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = float(2 * i) / float(dim);
    f[size_t(i)] = float(std::pow(double(b), double(e)));
  }
  return f;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
  auto f = pos_freqs_f32(base, dim);
  for (auto& x : f) x = 1.0f / x;
  return f;
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double correction_dim(double num_rot, int64_t dim, double base, double max_pos) {
  return (double(dim) * std::log(max_pos / (num_rot * 2.0 * M_PI))) / (2.0 * std::log(base));
}

}  // namespace

RopeTable compute_rope(const ModelConfig& cfg, int64_t seq_len) {
  const RopeScaling& rs = cfg.rope_scaling;
  const int64_t dim = cfg.head_dim;
  TF_CHECK(dim > 0 && dim % 2 == 0, "rope: head_dim " << dim << " must be positive and even");
  const double base = cfg.rope_theta;
  TF_CHECK(base > 0, "rope: rope_theta " << base << " must be positive");
  const int64_t omax = rs.original_max_position_embeddings > 0 ? rs.original_max_position_embeddings
                                                               : cfg.max_position_embeddings;
  RopeTable t;
  const std::string& type = rs.type;
  if (type == "none" || type == "default" || type.empty()) {
    t.inv_freq = default_inv_freq(base, dim);
  } else if (type == "linear") {
    t.inv_freq = default_inv_freq(base, dim);
    const float f = float(rs.factor);
    for (auto& x : t.inv_freq) x = x / f;
  } else if (type == "dynamic") {
    const double mp = double(cfg.max_position_embeddings);
    const double sl = std::max(double(seq_len), mp);
    const double b = base * std::pow((rs.factor * sl / mp) - (rs.factor - 1.0), double(dim) / double(dim - 2));
    t.inv_freq = default_inv_freq(b, dim);
  } else if (type == "yarn") {
    const double factor = rs.factor;
    double attn;
    if (rs.attention_factor > 0.0) attn = rs.attention_factor;
    else if (rs.mscale != 0.0 && rs.mscale_all_dim != 0.0)
      attn = yarn_mscale(factor, rs.mscale) / yarn_mscale(factor, rs.mscale_all_dim);
    else attn = yarn_mscale(factor, 1.0);
    const double beta_fast = rs.beta_fast != 0.0 ? rs.beta_fast : 32.0;
    const double beta_slow = rs.beta_slow != 0.0 ? rs.beta_slow : 1.0;
    double low = correction_dim(beta_fast, dim, base, double(omax));
    double high = correction_dim(beta_slow, dim, base, double(omax));
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    const auto pf = pos_freqs_f32(base, dim);
    const float ff = float(factor);
    // torch keeps min/max as Python scalars: (arange.f32 - min) / (max - min) in float32.
    const float lo_f = float(low), span_f = float(high - low);
    t.inv_freq.resize(pf.size());
    for (size_t i = 0; i < pf.size(); ++i) {
      const float extrap = 1.0f / pf[i];
      const float interp = 1.0f / (ff * pf[i]);
      float ramp = (float(i) - lo_f) / span_f;
      ramp = std::min(1.0f, std::max(0.0f, ramp));
      const float ef = 1.0f - ramp;  // inv_freq_extrapolation_factor
      t.inv_freq[i] = interp * (1.0f - ef) + extrap * ef;
    }
    t.attention_scaling = float(attn);
  } else if (type == "llama3") {
    auto inv = default_inv_freq(base, dim);
    const float factor = float(rs.factor), lo = float(rs.low_freq_factor);
    const double low_wl = double(omax) / rs.low_freq_factor;   // Python floats
    const double high_wl = double(omax) / rs.high_freq_factor;
    const float low_wl_f = float(low_wl), high_wl_f = float(high_wl), ctx_f = float(omax);
    const float two_pi = float(2.0 * M_PI);
    const float span = float(rs.high_freq_factor - rs.low_freq_factor);  // a Python scalar
    t.inv_freq.resize(inv.size());
    for (size_t i = 0; i < inv.size(); ++i) {
      const float wl = two_pi / inv[i];
      float v = wl > low_wl_f ? inv[i] / factor : inv[i];
      const float smooth = (ctx_f / wl - lo) / span;
      const float smoothed = (1.0f - smooth) * v / factor + smooth * v;
      const bool medium = !(wl < high_wl_f) && !(wl > low_wl_f);
      t.inv_freq[i] = medium ? smoothed : v;
    }
  } else {
    TF_FAIL("rope: unsupported rope_scaling type '" << type << "'");
  }
  return t;
}

void apply_rope(const RopeTable& table, const Tensor& positions, Tensor& q, Tensor& k) {
  const int64_t n = positions.numel(), half = int64_t(table.inv_freq.size());
  Tensor inv = Tensor::cpu(DType::F32, {half});
  std::copy(table.inv_freq.begin(), table.inv_freq.end(), inv.ptr<float>());
  Tensor c = Tensor::cpu(DType::F32, {n, half}), s = Tensor::cpu(DType::F32, {n, half});
  ops::rope_cos_sin(inv, positions, c, s, ops::RopeParams{table.attention_scaling});
  ops::rope_apply(q, c, s);
  ops::rope_apply(k, c, s);
}

Rope::Rope(const ModelConfig& cfg) : cfg_(cfg) {
  dynamic_ = cfg.rope_scaling.type == "dynamic";
  original_max_ = cached_max_ = cfg.max_position_embeddings;
  original_ = table_ = compute_rope(cfg, 0);
}

const RopeTable& Rope::update(int64_t seq_len) {
  if (!dynamic_) return table_;
  if (seq_len > cached_max_) {
    table_ = compute_rope(cfg_, seq_len);
    cached_max_ = seq_len;
  }
  if (seq_len < original_max_ && cached_max_ > original_max_) {
    table_ = original_;
    cached_max_ = original_max_;
  }
  return table_;
}

}  // namespace tf
