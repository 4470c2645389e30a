// Philox4x32-10 counter-based RNG (Salmon et al., SC'11). The same (seed,
// counter) gives the same numbers on the host and on the device, so every rank
// and every backend draw identical random streams with no state to share.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TF_HD __host__ __device__ __forceinline__
#else
#define TF_HD inline
#endif

namespace tf {

struct Philox4 {
  uint32_t v[4];
};

TF_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// One 128-bit block for counter (ctr_hi:ctr_lo) under a 64-bit key.
TF_HD Philox4 philox4x32_10(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi = 0) {
  uint32_t c0 = uint32_t(ctr_lo), c1 = uint32_t(ctr_lo >> 32);
  uint32_t c2 = uint32_t(ctr_hi), c3 = uint32_t(ctr_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) with 24 random bits: draw number `offset` of the
// stream `seed`. Each draw uses its own counter, so draws are addressable.
TF_HD float philox_uniform(uint64_t seed, uint64_t offset) {
  Philox4 r = philox4x32_10(seed, offset);
  return float(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace tf
