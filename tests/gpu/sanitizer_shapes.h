// TRIFORCE_SANITIZER_SHAPES=1 (set by experiments/h200/sanitize.sh): each GPU
// test trims its shape grid to a few small, awkward shapes so that a binary
// finishes under compute-sanitizer (racecheck and initcheck run kernels tens of
// times slower). Every code path stays: each kernel variant, dtype, graphs on and
// off, TP; only the sizes and the repeats shrink. Unset or "0": the full grid.
#pragma once
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace tf::testing {

inline bool sanitizer_shapes() {
  static const bool on = [] {
    const char* e = std::getenv("TRIFORCE_SANITIZER_SHAPES");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}

// `full` normally, `small` under TRIFORCE_SANITIZER_SHAPES.
template <class T>
std::vector<T> grid(std::initializer_list<T> full, std::initializer_list<T> small) {
  return sanitizer_shapes() ? std::vector<T>(small) : std::vector<T>(full);
}
template <class T>
T pick(T full, T small) {
  return sanitizer_shapes() ? small : full;
}

}  // namespace tf::testing
