// cuDNN's name of an engine configuration, "eng8_k2=7_k3=0" (the engine's
// global index, then backend knob type = choice pairs), as the frontend's
// get_plan_name prints it. TRIFORCE_CUDNN_ATTN_CONFIG takes one, so a prefill
// can be pinned to an engine configuration that was measured faster than the
// heuristics' first choice. Header-only: the env-knob table (core) and the
// cuDNN backend (kernels) both parse it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tf {

struct CudnnConfigTag {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (backend knob type, choice)
};

// False for anything but eng<N>(_k<N>=<[-]N>)*, each number of at most 18 digits.
inline bool parse_cudnn_config_tag(const std::string& v, CudnnConfigTag* out = nullptr) {
  size_t at = 0;
  auto number = [&](bool sign, int64_t* x) {
    const bool neg = sign && at < v.size() && v[at] == '-';
    if (neg) ++at;
    const size_t start = at;
    int64_t r = 0;
    while (at < v.size() && v[at] >= '0' && v[at] <= '9' && at - start < 18) r = r * 10 + (v[at++] - '0');
    if (at == start || (at < v.size() && v[at] >= '0' && v[at] <= '9')) return false;
    *x = neg ? -r : r;
    return true;
  };
  CudnnConfigTag t;
  if (v.compare(0, 3, "eng") != 0) return false;
  at = 3;
  if (!number(false, &t.engine)) return false;
  while (at < v.size()) {
    if (v.compare(at, 2, "_k") != 0) return false;
    at += 2;
    std::pair<int64_t, int64_t> k;
    if (!number(false, &k.first) || at >= v.size() || v[at] != '=') return false;
    ++at;
    if (!number(true, &k.second)) return false;
    t.knobs.push_back(k);
  }
  if (out) *out = std::move(t);
  return true;
}

inline std::string cudnn_config_tag_string(const CudnnConfigTag& t) {
  std::string s = "eng" + std::to_string(t.engine);
  for (const auto& [type, choice] : t.knobs) s += "_k" + std::to_string(type) + "=" + std::to_string(choice);
  return s;
}

}  // namespace tf
