#include "speculative/device_sampler.h"

#include "core/check.h"
#include "core/device.h"
#include "ops/ops.h"

namespace tf::speculative {

void DeviceSampler::reserve(int64_t n, int64_t vocab) {
  TF_CHECK(n >= 1 && vocab >= 1, "device sampler: " << n << " rows of " << vocab);
  if (n <= rows_ && vocab == vocab_) return;
  buf_ = empty_tensor(Device::CUDA, DType::F32, {n, vocab});
  rows_ = n, vocab_ = vocab;
  if (!out_.data) out_ = empty_tensor(Device::CUDA, DType::I32, {3});
}

Tensor DeviceSampler::view(int64_t row0, int64_t n) const {
  TF_CHECK(row0 >= 0 && n >= 1 && row0 + n <= rows_,
           "device sampler: rows [" << row0 << ", " << row0 + n << ") of " << rows_ << " reserved");
  return ops::slice_rows(buf_, row0, row0 + n);
}

int32_t DeviceSampler::draw(const Tensor& row, uint64_t seed, uint64_t counter) {
  if (!out_.data) out_ = empty_tensor(Device::CUDA, DType::I32, {3});
  Tensor id = ops::slice_rows(out_, 0, 1);
  ops::draw_rows(row, id, seed, counter);
  copy_bytes(host_, Device::CPU, out_.data, Device::CUDA, sizeof(int32_t));  // the step's one wait
  return host_[0];
}

VerifyResult DeviceSampler::verify(const std::vector<int32_t>& x, const Tensor& q, const Tensor& p, RngStream& rng,
                                   ResampleMode mode) {
  if (!out_.data) out_ = empty_tensor(Device::CUDA, DType::I32, {3});
  const int64_t g = int64_t(x.size());
  ops::verify_rows(g ? q : p, p, x, rng.seed, rng.counter, mode == ResampleMode::residual, out_);
  copy_bytes(host_, Device::CPU, out_.data, Device::CUDA, sizeof(host_));
  VerifyResult r;
  r.accepted = host_[0];
  TF_CHECK(r.accepted >= 0 && r.accepted <= g, "device verify: " << r.accepted << " of " << g << " accepted");
  r.tokens.assign(x.begin(), x.begin() + r.accepted);
  r.tokens.push_back(host_[1]);
  r.resampled = host_[2] != 0;
  r.bonus = !r.resampled;
  // verify(): one uniform per proposal examined, then one number for the last token.
  rng.counter += uint64_t(r.resampled ? r.accepted + 1 : g) + 1;
  return r;
}

}  // namespace tf::speculative
