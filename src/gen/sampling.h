// Token selection for every level of every method: temperature and top-p are
// applied here and only here; T = 0 means exact greedy (argmax, lowest id on ties).
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// probs[vocab] <- the distribution a token is drawn from (one-hot at T = 0).
// Bit for bit ops::softmax_top_p (the definition, tested against it); made by
// a RowSampler of this thread.
void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs);

// Inverse-CDF draw from probs with the uniform number `draw` of the seed's Philox stream.
int32_t draw_from(const float* probs, int64_t vocab, uint64_t seed, uint64_t draw);
// draw_from when probs is zero outside ids[0..n) (ascending): the same token
// from the same draw, reading only those n entries.
int32_t draw_from_ids(const float* probs, const int32_t* ids, int64_t n, uint64_t seed, uint64_t draw);

// The index of the largest value, the lowest index on ties (NaNs never win,
// unless x[0] is one). Every greedy decision of every level goes through it.
int64_t argmax_lowest(const float* x, int64_t n);

// sampling_distribution + draw_from (argmax at T = 0).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& sp, uint64_t draw);

// Makes distribution rows from logits rows as ops::softmax_top_p does, bit for
// bit, at a fraction of its host cost, with buffers reused across rows (no
// allocation once grown). The op sorts the whole vocabulary for top-p; here a
// vectorised pass of approximate exponentials bounds the masses, exact values
// are computed only for the few tokens that can be kept, and the cut is taken
// only when the approximation cannot have moved it (otherwise the op runs).
class RowSampler {
 public:
  // probs[vocab] <- sampling_distribution(logits, vocab, sp).
  void distribution(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs);
  // The last row is zero outside support() (ascending ids): greedy and top-p
  // rows. Otherwise (top-p off) any entry may be nonzero.
  bool sparse() const { return sparse_; }
  const std::vector<int32_t>& support() const { return support_; }
  // draw_from(probs, vocab, ...) for the row distribution() wrote last.
  int32_t draw(const float* probs, int64_t vocab, uint64_t seed, uint64_t draw) const;
  // Top-p rows the approximation left undecided, made by the op instead.
  int64_t fallbacks() const { return fallbacks_; }

 private:
  struct Candidate {
    float s;  // logit / T: the op's sort key
    int32_t id;
    float e;  // exp(s - max s), as the op computes it
  };
  void reference(const float* logits, int64_t vocab, const SamplingParams& sp, float* probs);
  bool top_p_fast(const float* logits, int64_t vocab, float T, float m, float top_p, float* probs);

  bool sparse_ = false;
  std::vector<int32_t> support_;
  std::vector<Candidate> cand_;
  int64_t fallbacks_ = 0;
};

namespace detail {
// Approximate masses of the row exp(l[j] / T - m), j < n: the total and the
// parts where l[j] / T - m > -kMassCuts[c] (each within 1e-5 relative of the
// exact sum; l[j] / T - m below -87 counts as e^-87). Vectorised.
inline constexpr float kMassCuts[3] = {4.0f, 8.0f, 16.0f};
struct ApproxMass {
  double total = 0;
  double above[3] = {0, 0, 0};
};
ApproxMass approx_exp_masses(const float* l, int64_t n, float T, float m);
// The approximation itself, for its test: exp(d) for -87 <= d <= 0 within 1e-5 relative.
float exp_approx(float d);
}  // namespace detail

}  // namespace tf
