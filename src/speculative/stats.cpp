#include "speculative/stats.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace tf::speculative {

double gamma_q(double a, double x) {
  TF_CHECK(a > 0 && x >= 0, "gamma_q: a = " << a << ", x = " << x);
  if (x == 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {
    // P(a, x) by its series.
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-16) break;
    }
    return std::max(0.0, 1.0 - sum * std::exp(-x + a * std::log(x) - lg));
  }
  // Q(a, x) by its continued fraction (modified Lentz).
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-16) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

ChiSquare chi_square(const std::vector<int64_t>& observed, const std::vector<double>& expected_probs,
                     double min_expected) {
  TF_CHECK(observed.size() == expected_probs.size(), "chi_square: size mismatch");
  int64_t n = 0;
  for (auto o : observed) n += o;
  ChiSquare r;
  double pooled_e = 0;
  int64_t pooled_o = 0;
  int64_t cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = expected_probs[i] * double(n);
    if (expected_probs[i] <= 0) {
      if (observed[i] > 0) {
        r.statistic = std::numeric_limits<double>::infinity();
        r.p_value = 0;
        return r;
      }
      continue;
    }
    if (e < min_expected) {
      pooled_e += e;
      pooled_o += observed[i];
      continue;
    }
    r.statistic += (double(observed[i]) - e) * (double(observed[i]) - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    r.statistic += (double(pooled_o) - pooled_e) * (double(pooled_o) - pooled_e) / pooled_e;
    ++cells;
  }
  r.dof = cells - 1;
  r.p_value = r.dof > 0 ? gamma_q(0.5 * double(r.dof), 0.5 * r.statistic) : 1.0;
  return r;
}

}  // namespace tf::speculative
