// Sampling at T > 0 where the distribution rows are, so that a speculative
// level's q and p rows never leave the GPU: an inverse-CDF draw per row, one
// level's whole verification in one block, and the expansion of a draft's
// reduced-vocabulary rows to the full vocabulary. The rules are the host's
// (gen/sampling.h draw_from, speculative/verify.h verify), and so are the
// Philox numbers (tf::philox_uniform(seed, counter)):
//   draw:   total = the row's sum; the first index of a positive entry whose
//           running sum exceeds u * total; if rounding leaves none, the last
//           positive entry; 0 for a row with no positive entry.
//   verify: proposal x_i (i = 0, 1, ...) is accepted iff u_i * q_i(x_i) <
//           p_i(x_i) (or p_i(x_i) > 0 where q_i(x_i) = 0), u_i the uniform at
//           counter + i; at the first rejection k a draw from max(p_k - q_k, 0)
//           (from p_k when that is all zero, or in reference_bug mode) with the
//           number at counter + k + 1; all g accepted: a draw from p_g at
//           counter + g.
// Sums are double, as the host's, but in a fixed blocked order instead of the
// host's sequential one: a token can differ from the host's only where u *
// total lies within rounding of a boundary of the cumulative sum (never on
// rows whose partial sums are exact, which the tests use). The order is fixed,
// so the device's own draws are reproducible bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct DrawRowsParams {
  const float* probs = nullptr;  // [n, vocab], non-negative (need not sum to 1)
  int32_t* out = nullptr;        // [n]
  int64_t n = 0, vocab = 0;
  uint64_t seed = 0, counter = 0;  // row r draws with number counter + r
};
void draw_rows(const DrawRowsParams& p, cudaStream_t stream = nullptr);

constexpr int kMaxVerifyProposals = 64;

struct VerifyRowsParams {
  const float* q = nullptr;  // [g, vocab]: the proposals' distributions
  const float* p = nullptr;  // [g + 1, vocab]: the verifier's
  int64_t g = 0, vocab = 0;  // 0 <= g <= kMaxVerifyProposals
  int32_t x[kMaxVerifyProposals] = {};  // the proposals, in [0, vocab)
  uint64_t seed = 0, counter = 0;
  bool residual = true;  // false: the public reference's middle-level bug (resample from p; tests only)
  int32_t* out = nullptr;  // [3]: accepted proposals k, the token emitted after them, 1 if it was resampled
};
void verify_rows(const VerifyRowsParams& p, cudaStream_t stream = nullptr);

struct ExpandColumnsParams {
  const float* in = nullptr;     // [n, k]
  const int32_t* ids = nullptr;  // [k], distinct, in [0, vocab)
  float* out = nullptr;          // [n, vocab]: out[r, ids[j]] = in[r, j], `fill` elsewhere; not aliasing in
  int64_t n = 0, k = 0, vocab = 0;
  float fill = 0.0f;
};
void expand_columns(const ExpandColumnsParams& p, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
