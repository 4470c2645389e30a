// Awkward logits rows for the greedy rule (tf::argmax_lowest): the CPU op and
// the CUDA kernel are checked against it on these (tests/unit/test_sampling.cpp,
// tests/gpu/test_kernels_sampling.cpp). Ties of the maximum at several places,
// rows of -inf, all-equal rows, NaN first, NaN elsewhere, all NaN, +-0, +inf,
// the maximum first or last; and reduced-vocabulary id sets with and without
// token 0, with and without a gap.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tf::testing {

inline constexpr int kArgmaxCases = 16;

// Row `kind` (0 .. kArgmaxCases - 1) of length V, reproducible per (kind, V, salt).
inline std::vector<float> argmax_row(int kind, int64_t V, uint64_t salt) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t s = (salt + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(kind) << 32) ^ uint64_t(V);
  auto next = [&] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  };
  auto at = [&] { return int64_t(next() % uint64_t(V)); };
  std::vector<float> x(static_cast<size_t>(V));
  for (auto& v : x) v = float(int64_t(next() % 2001) - 1000) / 64.0f;  // many exact ties
  switch (kind) {
    case 0:  // the maximum tied at three places, one of them the last
      x[size_t(at())] = 100.0f, x[size_t(at())] = 100.0f, x[size_t(V - 1)] = 100.0f;
      break;
    case 1:  // all -inf
      for (auto& v : x) v = -inf;
      break;
    case 2:  // all equal
      for (auto& v : x) v = 1.5f;
      break;
    case 3:  // NaN first (it wins)
      x[0] = nan;
      x[size_t(at())] = 100.0f;
      break;
    case 4:  // NaNs elsewhere, around a planted maximum
      for (int i = 0; i < 5; ++i) x[size_t(at())] = nan;
      x[size_t(V / 2)] = 100.0f;
      if (V / 2 > 0) x[size_t(V / 2 - 1)] = nan;
      if (V > 1) x[size_t(V - 1)] = nan;
      break;
    case 5:  // all NaN
      for (auto& v : x) v = nan;
      break;
    case 6:  // -inf first, NaN and -inf after
      for (auto& v : x) v = (next() % 2) ? nan : -inf;
      x[0] = -inf;
      break;
    case 7:  // +0 and -0 only: the lowest index is the pick whatever the sign
      for (auto& v : x) v = (next() % 2) ? 0.0f : -0.0f;
      break;
    case 8:  // +inf twice
      x[size_t(at())] = inf, x[size_t(at())] = inf;
      break;
    case 9:  // NaN everywhere but one -inf in the middle
      for (auto& v : x) v = nan;
      x[size_t(V / 2)] = -inf;
      break;
    case 10:  // the maximum at the end alone
      x[size_t(V - 1)] = 1000.0f;
      break;
    case 11:  // the maximum at 0 and again later
      x[0] = 1000.0f, x[size_t(at())] = 1000.0f;
      break;
    case 12:  // NaN first, the rest -inf
      for (auto& v : x) v = -inf;
      x[0] = nan;
      break;
    case 13:  // -0 first, +0 later as the maximum of non-positive values
      for (auto& v : x) v = -float(1 + next() % 7);
      x[0] = -0.0f, x[size_t(at())] = 0.0f;
      break;
    case 14:  // logits-like: small spread, one winner with near ties
      for (auto& v : x) v = float(int64_t(next() % 100000)) * 1e-4f;
      x[size_t(at())] = 10.00001f, x[size_t(at())] = 10.0f;
      break;
    default:  // plain random with ties
      break;
  }
  return x;
}

// A reduced vocabulary of a V-token model: kind 0 keeps token 0 and leaves gaps,
// 1 leaves out token 0, 2 is every token, 3 is the prefix [0, K), 4 is one id
// (the last), 5 every other token from 1.
inline std::vector<int32_t> argmax_ids(int kind, int64_t V) {
  std::vector<int32_t> ids;
  switch (kind) {
    case 0:
      for (int64_t j = 0; j < V; ++j)
        if (j == 0 || j % 3 != 1) ids.push_back(int32_t(j));
      break;
    case 1:
      for (int64_t j = 1; j < V; j += 2) ids.push_back(int32_t(j));
      break;
    case 2:
      for (int64_t j = 0; j < V; ++j) ids.push_back(int32_t(j));
      break;
    case 3:
      for (int64_t j = 0; j < (V + 1) / 2; ++j) ids.push_back(int32_t(j));
      break;
    case 4:
      ids.push_back(int32_t(V - 1));
      break;
    default:
      for (int64_t j = 1; j < V; j += 2) ids.push_back(int32_t(j));
      if (ids.empty()) ids.push_back(0);
      break;
  }
  if (ids.empty()) ids.push_back(0);
  return ids;
}
inline constexpr int kArgmaxIdSets = 6;

}  // namespace tf::testing
