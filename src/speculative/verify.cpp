#include "speculative/verify.h"

#include <algorithm>

#include "core/check.h"
#include "core/philox.h"
#include "gen/sampling.h"

namespace tf::speculative {

float RngStream::uniform() { return philox_uniform(seed, counter++); }

RngStream RngStream::for_level(uint64_t user_seed, int level) {
  // A distinct key per level (splitmix64 of seed and level); counters start at 0.
  uint64_t z = user_seed + 0x9E3779B97F4A7C15ull * uint64_t(level + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return RngStream{z, 0};
}

RngStream RngStream::for_simulation(uint64_t user_seed, int level) {
  // The level's key xor a constant ("simulate"): a key of its own, next to the verification stream's.
  RngStream s = for_level(user_seed, level);
  s.seed ^= 0x73696D756C617465ull;
  return s;
}

int32_t argmax_row(const float* x, int64_t n) { return int32_t(argmax_lowest(x, n)); }

namespace {

// The token a level emits on rejecting proposal i (row pi of p, qi of q), and
// the distribution it came from (see VerifyResult::last_dist).
void emit_rejection(VerifyResult& r, const float* pi, const float* qi, int64_t vocab, RngStream& rng, bool greedy,
                    ResampleMode mode) {
  r.resampled = true;
  if (greedy) {
    const int32_t t = argmax_row(pi, vocab);
    r.last_dist.assign(size_t(vocab), 0.0f);
    r.last_dist[size_t(t)] = 1.0f;
    r.tokens.push_back(t);
    return;
  }
  if (mode == ResampleMode::residual) {
    r.last_dist.resize(size_t(vocab));
    float* res = r.last_dist.data();
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += (res[v] = std::max(pi[v] - qi[v], 0.0f));
    if (sum > 0) {
      r.tokens.push_back(draw_from(res, vocab, rng.seed, rng.next()));
      return;
    }  // else p == q up to rounding: p is the residual's limit
  }
  r.last_dist.assign(pi, pi + vocab);
  r.tokens.push_back(draw_from(pi, vocab, rng.seed, rng.next()));
}

// All proposals accepted: the bonus token from p_{g+1}.
void emit_bonus(VerifyResult& r, const float* pb, int64_t vocab, RngStream& rng, bool greedy) {
  r.bonus = true;
  r.last_dist.assign(pb, pb + vocab);
  r.tokens.push_back(greedy ? argmax_row(pb, vocab) : draw_from(pb, vocab, rng.seed, rng.next()));
}

}  // namespace

VerifyResult verify(const std::vector<int32_t>& x, const float* q, const float* p, int64_t vocab,
                    RngStream& rng, bool greedy, ResampleMode mode) {
  VerifyResult r;
  const int64_t g = int64_t(x.size());
  for (int64_t i = 0; i < g; ++i) {
    TF_CHECK(x[size_t(i)] >= 0 && x[size_t(i)] < vocab, "verify: proposal " << x[size_t(i)] << " outside vocab");
    const float* pi = p + i * vocab;
    const float* qi = q + i * vocab;
    const int32_t xi = x[size_t(i)];
    bool accept;
    if (greedy) {
      accept = xi == argmax_row(pi, vocab);
    } else {
      const double px = pi[xi], qx = qi[xi];
      const double u = rng.uniform();
      // u in [0, 1): accept iff u < min(1, p/q); q(x) = 0 cannot be proposed, treat p > 0 as accept.
      accept = qx > 0 ? u * qx < px : px > 0;
    }
    if (accept) {
      r.tokens.push_back(xi);
      ++r.accepted;
      continue;
    }
    emit_rejection(r, pi, qi, vocab, rng, greedy, mode);
    return r;
  }
  emit_bonus(r, p + g * vocab, vocab, rng, greedy);
  return r;
}

VerifyResult verify_logits(const std::vector<int32_t>& x, const float* q, const float* logits, int64_t vocab,
                           const SamplingParams& sp, RngStream& rng, float* p, VerifyScratch& scratch,
                           ResampleMode mode) {
  TF_CHECK(!sp.greedy(), "verify_logits: T = 0 verifies from argmax ids (verify_greedy)");
  RowSampler& rows = scratch.rows;
  VerifyResult r;
  const int64_t g = int64_t(x.size());
  for (int64_t i = 0; i < g; ++i) {
    const int32_t xi = x[size_t(i)];
    TF_CHECK(xi >= 0 && xi < vocab, "verify: proposal " << xi << " outside vocab");
    float* pi = p + i * vocab;
    const float* qi = q + i * vocab;
    rows.distribution(logits + i * vocab, vocab, sp, pi);
    const double px = pi[xi], qx = qi[xi];
    const double u = rng.uniform();
    if (qx > 0 ? u * qx < px : px > 0) {  // as verify()
      r.tokens.push_back(xi);
      ++r.accepted;
      continue;
    }
    r.resampled = true;
    if (mode == ResampleMode::residual) {
      // max(p - q, 0) is zero wherever p is, so a sparse p row needs it on its support alone.
      scratch.residual.resize(size_t(vocab));
      float* res = scratch.residual.data();
      double sum = 0;
      if (rows.sparse()) {
        const std::vector<int32_t>& ids = rows.support();
        for (int32_t v : ids) sum += (res[v] = std::max(pi[v] - qi[v], 0.0f));
        if (sum > 0) {
          r.tokens.push_back(draw_from_ids(res, ids.data(), int64_t(ids.size()), rng.seed, rng.next()));
          return r;
        }
      } else {
        for (int64_t v = 0; v < vocab; ++v) sum += (res[v] = std::max(pi[v] - qi[v], 0.0f));
        if (sum > 0) {
          r.tokens.push_back(draw_from(res, vocab, rng.seed, rng.next()));
          return r;
        }
      }
    }
    r.tokens.push_back(rows.draw(pi, vocab, rng.seed, rng.next()));
    return r;
  }
  float* pb = p + g * vocab;
  rows.distribution(logits + g * vocab, vocab, sp, pb);
  r.bonus = true;
  r.tokens.push_back(rows.draw(pb, vocab, rng.seed, rng.next()));
  return r;
}

VerifyResult verify_simulated(const std::vector<int32_t>& x, const float* q, const float* p, int64_t vocab,
                              double rate, RngStream& decide, RngStream& rng, bool greedy) {
  TF_CHECK(rate >= 0.0 && rate <= 1.0, "--simulate-acceptance: rate " << rate << " outside [0, 1]");
  VerifyResult r;
  const int64_t g = int64_t(x.size());
  for (int64_t i = 0; i < g; ++i) {
    TF_CHECK(x[size_t(i)] >= 0 && x[size_t(i)] < vocab, "verify: proposal " << x[size_t(i)] << " outside vocab");
    // u in [0, 1): rate 1 accepts every proposal, rate 0 none.
    if (decide.uniform() < rate) {
      r.tokens.push_back(x[size_t(i)]);
      ++r.accepted;
      continue;
    }
    emit_rejection(r, p + i * vocab, q + i * vocab, vocab, rng, greedy, ResampleMode::residual);
    return r;
  }
  emit_bonus(r, p + g * vocab, vocab, rng, greedy);
  return r;
}

VerifyResult verify_greedy(const std::vector<int32_t>& x, const std::vector<int32_t>& best) {
  TF_CHECK(best.size() == x.size() + 1, "verify_greedy: " << best.size() << " argmax ids for " << x.size()
                                                          << " proposals (expected one more)");
  VerifyResult r;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != best[i]) {
      r.resampled = true;
      r.tokens.push_back(best[i]);
      return r;
    }
    r.tokens.push_back(x[i]);
    ++r.accepted;
  }
  r.bonus = true;
  r.tokens.push_back(best.back());
  return r;
}

VerifyResult verify_simulated_greedy(const std::vector<int32_t>& x, const std::vector<int32_t>& best, double rate,
                                     RngStream& decide) {
  TF_CHECK(rate >= 0.0 && rate <= 1.0, "--simulate-acceptance: rate " << rate << " outside [0, 1]");
  TF_CHECK(best.size() == x.size() + 1, "verify_simulated_greedy: " << best.size() << " argmax ids for " << x.size()
                                                                    << " proposals (expected one more)");
  VerifyResult r;
  for (size_t i = 0; i < x.size(); ++i) {
    if (decide.uniform() < rate) {  // as verify_simulated: one uniform per proposal examined
      r.tokens.push_back(x[i]);
      ++r.accepted;
      continue;
    }
    r.resampled = true;
    r.tokens.push_back(best[i]);
    return r;
  }
  r.bonus = true;
  r.tokens.push_back(best.back());
  return r;
}

}  // namespace tf::speculative
