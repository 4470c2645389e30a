// Goodness-of-fit statistics for the losslessness tests of speculative decoding.
#pragma once
#include <cstdint>
#include <vector>

namespace tf::speculative {

// Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a).
double gamma_q(double a, double x);

struct ChiSquare {
  double statistic = 0;
  int64_t dof = 0;
  double p_value = 1;
};
// Pearson chi-square of observed counts against expected probabilities (same
// length). Cells with expected count < min_expected are pooled into one cell;
// an observation in a zero-probability cell gives p_value = 0.
ChiSquare chi_square(const std::vector<int64_t>& observed, const std::vector<double>& expected_probs,
                     double min_expected = 5.0);

}  // namespace tf::speculative
