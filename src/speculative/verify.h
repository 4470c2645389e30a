// Exact speculative verification for one level (Leviathan et al. / Chen et al.):
// proposals x_1..x_g drawn from q_1..q_g are checked against the verifier's
// distributions p_1..p_{g+1} (both already passed through sampling_distribution,
// so temperature/top-p are identical at every level). x_i is accepted with
// probability min(1, p_i(x_i)/q_i(x_i)); on the first rejection a token is drawn
// from norm(max(p_i - q_i, 0)); if all are accepted a bonus is drawn from p_{g+1}.
// Every emitted token k is then distributed (given the tokens before it) exactly
// as p_k, which is why a middle level passes p rows upward as its proposal q.
// At T = 0 (greedy) this is exact greedy: accept while x_i == argmax p_i, then
// emit argmax p at the first mismatch (or argmax p_{g+1}).
#pragma once
#include <cstdint>
#include <vector>

#include "gen/sampling.h"

namespace tf::speculative {

// A Philox stream with an explicit counter: every uniform or draw uses the next
// counter value, so a run is reproducible from (seed, level) alone.
struct RngStream {
  uint64_t seed = 0;
  uint64_t counter = 0;
  float uniform();         // philox_uniform(seed, counter++)
  uint64_t next() { return counter++; }
  // The stream of chain level `level` for a user seed.
  static RngStream for_level(uint64_t user_seed, int level);
  // The stream of level `level`'s simulated accept/reject decisions
  // (verify_simulated): its own key, so a simulated run never draws from a
  // verification stream for its decisions.
  static RngStream for_simulation(uint64_t user_seed, int level);
};

enum class ResampleMode {
  residual,       // correct: resample from norm(max(p - q, 0))
  reference_bug,  // the public TriForce middle level: resample from p (NOT lossless; for tests)
};

struct VerifyResult {
  int64_t accepted = 0;          // proposals accepted (0..g)
  std::vector<int32_t> tokens;   // accepted proposals, then one resampled or bonus token
  bool bonus = false;            // last token drawn from p_{g+1} (all accepted)
  bool resampled = false;        // last token drawn after a rejection
  // The distribution the last token was drawn from: the residual after a
  // rejection (p itself in reference_bug mode or when the residual vanishes),
  // p_{g+1} for a bonus. For the upward proposal of token k use p row k (see above).
  std::vector<float> last_dist;
};

// x: g proposals; q: [g, vocab] row-major; p: [g+1, vocab] row-major.
// greedy: T = 0 (no uniforms consumed; compares with argmax p).
VerifyResult verify(const std::vector<int32_t>& x, const float* q, const float* p, int64_t vocab,
                    RngStream& rng, bool greedy, ResampleMode mode = ResampleMode::residual);

// Buffers verify_logits reuses from call to call.
struct VerifyScratch {
  RowSampler rows;
  std::vector<float> residual;  // [vocab]
};

// verify() at T > 0 from the verifier's logits rows [g+1, vocab]: p row i
// (sampling_distribution of logits row i, into p + i * vocab) is made only
// when verification reaches it, i.e. rows 0..accepted (the rows of the emitted
// tokens; a middle level's proposal upward). Rows after a rejection are not
// written. Tokens, flags and draws are verify()'s for the same p, bit for bit;
// last_dist stays empty (the residual is drawn from in place).
VerifyResult verify_logits(const std::vector<int32_t>& x, const float* q, const float* logits, int64_t vocab,
                           const SamplingParams& sp, RngStream& rng, float* p, VerifyScratch& scratch,
                           ResampleMode mode = ResampleMode::residual);

// Simulated acceptance (--simulate-acceptance, systems studies): proposal x_i
// is accepted when a uniform of `decide` is below `rate`, whatever p and q say
// (one uniform per proposal examined, at any temperature). Everything else is
// what verify() emits for that outcome: on the first rejection argmax p_i
// (greedy) or a draw from norm(max(p_i - q_i, 0)) (p_i where that vanishes),
// all accepted the bonus from p_{g+1}; those draws use `rng`, the level's
// verification stream, as verify() does. NOT lossless: the output follows the
// simulated decisions, not the target.
VerifyResult verify_simulated(const std::vector<int32_t>& x, const float* q, const float* p, int64_t vocab,
                              double rate, RngStream& decide, RngStream& rng, bool greedy);

// Greedy verification (T = 0) from the verifier's argmax ids alone: best[i] =
// argmax p_i for i = 0..g. Accepts while x_i == best[i], then emits best[i] at
// the first mismatch or best[g] as the bonus. verify(greedy) gives the same
// tokens and flags; this one reads no distribution, so a greedy level never
// builds a one-hot row of the vocabulary (last_dist stays empty).
VerifyResult verify_greedy(const std::vector<int32_t>& x, const std::vector<int32_t>& best);
// The same with simulated decisions (verify_simulated at T = 0).
VerifyResult verify_simulated_greedy(const std::vector<int32_t>& x, const std::vector<int32_t>& best, double rate,
                                     RngStream& decide);

// Index of the largest value (lowest index on ties), as the greedy sampler does.
int32_t argmax_row(const float* x, int64_t n);

}  // namespace tf::speculative
