// --simulate-acceptance: a run whose accept/reject decisions are drawn with
// fixed per-level probabilities (verify_simulated) while every forward,
// rollback and re-retrieval runs for real, to measure the hierarchy's speed at
// acceptance rates that random synthetic weights never reach. The rates are
// one per verifying level, bottom first (triforce: A1 = the retrieval-cache
// target verifying the draft, A2 = the full target verifying that level).
// A simulated run's tokens are not the target's; everything that reports one
// marks it (the --json key simulated_acceptance, the sweep's run attribute and
// key, progress lines, plots).
#pragma once
#include <string>
#include <vector>

#include "speculative/methods.h"

namespace tf::speculative {

// "0.35,0.9" (sep ',') or "0.35/0.9" (sep '/') -> rates, each a number in
// [0, 1]; a one-line error naming `option` otherwise.
std::vector<double> parse_acceptance_rates(const std::string& text, const std::string& option, char sep = ',');

// Rates joined by sep, each the shortest text that reads back to the same double.
std::string acceptance_str(const std::vector<double>& rates, char sep = '/');

// Refuses (one line naming --simulate-acceptance) rates for ar, a count other
// than the resolved chain's verifying levels, or a rate outside [0, 1].
void check_simulated_acceptance(const std::vector<double>& rates, const std::string& method, const ResolvedMethod& rm);

}  // namespace tf::speculative
