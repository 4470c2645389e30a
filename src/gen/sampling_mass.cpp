// Built with -fno-trapping-math (CMakeLists.txt): with it GCC vectorises the
// clamp and the selects below; it changes no result, only whether a
// comparison may raise a floating-point flag. Nothing here feeds a
// distribution's values: these masses only bound where a top-p cut can lie.
#include <algorithm>
#include <bit>

#include "gen/sampling.h"

namespace tf::detail {

float exp_approx(float d) {
  d = std::max(d, -87.0f);  // keeps 2^n normal; exp(-87) ~ 1.6e-38 is as good as 0 to a mass
  const float x = d * 1.44269504088896341f;
  // 1.5 * 2^23: adding it rounds x to an integer held in the low mantissa bits.
  const float magic = 12582912.0f;
  const float r = x + magic;
  const int32_t n = std::bit_cast<int32_t>(r) - std::bit_cast<int32_t>(magic);
  const float t = (x - (r - magic)) * 0.693147180559945309f;  // |t| <= ln2 / 2
  float p = 1.0f / 5040;
  p = p * t + 1.0f / 720;
  p = p * t + 1.0f / 120;
  p = p * t + 1.0f / 24;
  p = p * t + 1.0f / 6;
  p = p * t + 0.5f;
  p = p * t + 1.0f;
  p = p * t + 1.0f;
  return p * std::bit_cast<float>((n + 127) << 23);
}

ApproxMass approx_exp_masses(const float* l, int64_t n, float T, float m) {
  // Float partial sums over blocks of 256 (32 terms a lane), then double: the
  // float rounding stays near 1e-6 of the block, the lanes keep the loop vectorised.
  constexpr int64_t B = 256, L = 8;
  ApproxMass r;
  int64_t j0 = 0;
  for (; j0 + B <= n; j0 += B) {
    float all[L] = {}, a0[L] = {}, a1[L] = {}, a2[L] = {};
    for (int64_t j = j0; j < j0 + B; j += L)
      for (int64_t k = 0; k < L; ++k) {
        const float d = l[j + k] / T - m;
        const float e = exp_approx(d);
        all[k] += e;
        a0[k] += d > -kMassCuts[0] ? e : 0.0f;
        a1[k] += d > -kMassCuts[1] ? e : 0.0f;
        a2[k] += d > -kMassCuts[2] ? e : 0.0f;
      }
    for (int64_t k = 0; k < L; ++k) {
      r.total += all[k];
      r.above[0] += a0[k];
      r.above[1] += a1[k];
      r.above[2] += a2[k];
    }
  }
  for (int64_t j = j0; j < n; ++j) {
    const float d = l[j] / T - m;
    const float e = exp_approx(d);
    r.total += e;
    for (int c = 0; c < 3; ++c) r.above[c] += d > -kMassCuts[c] ? e : 0.0f;
  }
  return r;
}

}  // namespace tf::detail
