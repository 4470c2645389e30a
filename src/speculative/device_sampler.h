// A level's T > 0 decisions where its distribution rows are (CUDA): the rows
// come from Verifier::device_distributions / LlamaModel::forward_distributions
// into this sampler's buffer, and only the decisions travel to the host (4
// bytes for a draw, 12 for a verification), where before each draft step
// brought a q row of the vocabulary back and each verification its p rows.
// The rules are the host's (verify.h, gen/sampling.h), with the same Philox
// numbers consumed in the same order, so a level's RngStream advances exactly
// as on the host path (kernels/speculative_sampling.cuh says where the tokens
// themselves can differ: within rounding of a cumulative-sum boundary).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "speculative/verify.h"

namespace tf::speculative {

class DeviceSampler {
 public:
  // Room for n rows of `vocab` floats on CUDA. Growing drops what the buffer
  // held and invalidates earlier views, so callers reserve before a step.
  void reserve(int64_t n, int64_t vocab);
  // Rows [row0, row0 + n) of the reserved buffer, [n, vocab].
  Tensor view(int64_t row0, int64_t n) const;
  int64_t capacity_rows() const { return rows_; }
  // The draw from `row` (CUDA f32 [1, vocab]) with number `counter` of `seed`.
  int32_t draw(const Tensor& row, uint64_t seed, uint64_t counter);
  // The same with the stream's next number.
  int32_t draw(const Tensor& row, RngStream& rng) { return draw(row, rng.seed, rng.next()); }
  // verify()'s result for proposals x with q rows [>= g, V] and p rows [>= g + 1, V]
  // (last_dist stays empty); rng advances past every number it used.
  VerifyResult verify(const std::vector<int32_t>& x, const Tensor& q, const Tensor& p, RngStream& rng,
                      ResampleMode mode);

 private:
  Tensor buf_, out_;  // f32 [rows_, vocab_]; i32 [3], the decisions
  int64_t rows_ = 0, vocab_ = 0;
  int32_t host_[3] = {0, 0, 0};
};

}  // namespace tf::speculative
