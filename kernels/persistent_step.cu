#include "persistent_step.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "activation_tile.cuh"
#include "attention_decode.cuh"
#include "attention_decode_tile.cuh"
#include "common.cuh"
#include "device_props.cuh"
#include "core/env_knobs.h"
#include "gemm_skinny.cuh"
#include "gemm_skinny_tile.cuh"
#include "rmsnorm_tile.cuh"
#include "rope_tile.cuh"
#include "tile_load.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;   // 8 warps: the block of the skinny GEMM's mma_k8u4 variant
constexpr int kKW = 8, kU = 4;  // mma_k8u4
constexpr int kAttnBarrier = 1;  // named barrier of the 4 warps running a split tile
// A barrier still open after this many cycles (~10 s) means a block never
// arrived: trap rather than hang the process.
constexpr long long kBarrierTimeoutCycles = 20000000000LL;

// ---- the grid barriers ----
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void barrier_timeout(const unsigned* bar, long long t0, unsigned& spins,
                                                unsigned waiting_for) {
  if ((++spins & 1023u) == 0 && clock64() - t0 > kBarrierTimeoutCycles) {
    // Release builds too: a hang found blind must say where it was.
    printf("persistent_step: grid barrier timed out in block %d (waiting for %u, counter %u, grid %d)\n",
           int(blockIdx.x), waiting_for, *(volatile const unsigned*)bar, int(gridDim.x));
    __trap();
  }
}

// Every block's writes before a barrier are visible to every block after it
// (the block's threads meet, thread 0 releases them at gpu scope and acquires
// the others'). Data written before a barrier is read after it with L2 loads
// (tile_load.cuh), never through a possibly stale L1 line.
//
// kCounter (the default): bar[0] counts arrivals over the whole launch (the
// launcher zeroes it first); the k-th barrier opens at k * gridDim.x. A block
// arrives with one fire-and-forget release-add and polls with acquire loads:
// about one L2 round trip from the last arrival to everyone's release.
// kGeneration (TRIFORCE_PERSISTENT_BARRIER=generation, the first design, kept
// for the A/B): arrivals in bar[0], reset by the last arriver, which then bumps
// the generation in bar[1]: a read, an add with return, a reset and a second
// add on the path, about four round trips (1.93 us with 132 blocks, 2026-12-03).
enum BarrierKind : int { kCounter = 0, kGeneration = 1 };

__device__ void grid_barrier(unsigned* bar, int kind, unsigned& opens_at) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const long long t0 = clock64();
    unsigned spins = 0;
    if (kind == kCounter) {
      opens_at += gridDim.x;
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
      while (ld_acquire(bar) < opens_at) barrier_timeout(bar, t0, spins, opens_at);
    } else {
      // The generation is read before arriving: it cannot move until this block has arrived.
      const unsigned gen = ld_acquire(bar + 1);
      __threadfence();
      if (atomicAdd(bar, 1u) == gridDim.x - 1) {
        atomicExch(bar, 0u);  // reset before releasing, so the next barrier counts from zero
        __threadfence();
        atomicAdd(bar + 1, 1u);
      } else {
        while (ld_acquire(bar + 1) == gen) barrier_timeout(bar + 1, t0, spins, gen + 1);
      }
      __threadfence();
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

__device__ __forceinline__ int64_t gemv_tiles_of(int64_t out) { return (out + 15) / 16; }

// ---- weight staging ----
// A GEMV phase's weights do not depend on anything the step computes, so a
// block copies the W rows of its tiles for the next GEMV phase into shared
// memory (cp.async) when the current GEMV phase begins: they travel while the
// grid runs this phase, the attention and the barriers, and the next phase's
// tiles start without a global load of W. Two buffers alternate (GEMV phases
// q/k/v, o, gate/up, down take 0, 1, 0, 1; the lm_head 0); a block stages the
// first tiles of its loop that fit a buffer, and loads the rest as before.
// A staged row is padded to stage_ld elements: 64 bytes past a multiple of 128,
// so the 8 rows a quarter-warp reads fall in distinct banks.
__device__ __forceinline__ int64_t stage_ld(int64_t in) { return (in + 63) / 64 * 64 + 32; }

template <class T>
__device__ __forceinline__ int64_t staged_tiles(int64_t in, int64_t out, int stage_bytes) {
  const int64_t ntiles = gemv_tiles_of(out);
  const int64_t mine = ntiles > blockIdx.x ? (ntiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  return min(mine, int64_t(stage_bytes) / (16 * stage_ld(in) * int64_t(sizeof(T))));
}


// Weights do not depend on activations: before waiting at a barrier, a block
// asks L2 for the weight rows of the tiles it will take in a coming GEMV phase.
// Tiles this block stages (staged_tiles) are skipped.
template <class T>
__device__ __forceinline__ void prefetch_tiles(const T* w, int64_t in, int64_t out, int stage_bytes) {
  const int64_t ntiles = (out + 15) / 16;
  for (int64_t tile = blockIdx.x + staged_tiles<T>(in, out, stage_bytes) * gridDim.x; tile < ntiles;
       tile += gridDim.x) {
    const int64_t r0 = tile * 16, rows = min(int64_t(16), out - r0);
    const char* base = reinterpret_cast<const char*>(w + r0 * in);
    const int64_t lines = (rows * in * int64_t(sizeof(T)) + 127) / 128;
    for (int64_t i = threadIdx.x; i < lines; i += blockDim.x) prefetch_l2(base + i * 128);
  }
}

// One commit group (empty when nothing fits), on all threads of the block.
template <class T>
__device__ __forceinline__ void stage_tiles(const T* w, int64_t in, int64_t out, T* buf, int stage_bytes) {
  const int64_t k = staged_tiles<T>(in, out, stage_bytes), ld = stage_ld(in), chunks = in / 8;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t r0 = (blockIdx.x + j * gridDim.x) * 16, rows = min(int64_t(16), out - r0);
    T* dst = buf + j * 16 * ld;
    for (int64_t i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
      const int64_t r = i / chunks, c = i % chunks * 8;
      mma::cp_async16(dst + r * ld + c, w + (r0 + r) * in + c, true);
    }
  }
  mma::cp_async_commit();
}

// The staged copies (every thread's) have landed and every thread sees them.
__device__ __forceinline__ void stage_arrived() {
  mma::cp_async_wait<0>();
  __syncthreads();
}

// The skinny GEMM's tiles of y = x . W^T, each block taking tiles blockIdx.x,
// blockIdx.x + gridDim.x, ... (the standalone grid's tile indices); the first
// staged_tiles(...) of them from the stage buffer `staged` (nullptr: none).
template <class T, class Y, class XL>
__device__ __forceinline__ void gemv_tiles(const T* x, int64_t x_ld, const T* w, Y* y, int64_t y_ld, int n,
                                           int64_t in, int64_t out, float* part, const T* staged = nullptr,
                                           int stage_bytes = 0) {
  const int64_t ntiles = (out + 15) / 16;
  const int64_t k = staged ? staged_tiles<T>(in, out, stage_bytes) : 0, ld = stage_ld(in);
  int64_t j = 0;
  for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x, ++j) {
    const bool st = j < k;
    skinny::mma_tile<T, Y, kKW, kU, 1, XL>(x, x_ld, st ? staged + j * 16 * ld : w, y, y_ld, n, in, out, tile, part,
                                           XL{}, skinny::WStagedOrStream{st, tile * 16, ld});
    __syncthreads();  // the next tile reuses `part`
  }
}

// The fused attention phase's Q rows: rotated from the q/k/v GEMM output
// straight into the split tile's shared q tile (rope_pair, the arithmetic of
// rope_qkv_row), instead of through the rotated q buffer.
struct QRope {
  const void* qkv;
  int64_t ld;
  const float* cos;
  const float* sin;
  const int32_t* rows;
  int64_t table_rows;
  // Every load of a thread first, then the rotations (one L2 round trip, not one a pair).
  template <class T, int D, int kRows, int kThr>
  __device__ __forceinline__ void load(const attn::SplitArgs& a, T* q_s, int group, int kvh, int tid) const {
    constexpr int half = D / 2;
    constexpr int kIters = kRows * half / kThr;
    static_assert(kRows * half % kThr == 0, "whole pairs a thread");
    const int R = a.n * a.G;
    float x1[kIters], x2[kIters], c[kIters], s[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = tid + it * kThr, r = i / half, j = i % half, row = group * kRows + r;
      x1[it] = x2[it] = c[it] = s[it] = 0.0f;
      if (row < R) {
        const int t = row / a.G, h = kvh * a.G + row % a.G;
        const int32_t rr = rows[t];
        const bool ok = rr >= 0 && rr < table_rows;
        c[it] = ok ? cos[int64_t(rr) * half + j] : NAN;
        s[it] = ok ? sin[int64_t(rr) * half + j] : NAN;
        const T* src = static_cast<const T*>(qkv) + t * ld + int64_t(h) * D;
        x1[it] = to_f32(LoadCoherent::ld(src + j));
        x2[it] = to_f32(LoadCoherent::ld(src + j + half));
      }
    }
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = tid + it * kThr, r = i / half, j = i % half, row = group * kRows + r;
      T y1 = from_f32<T>(0.0f), y2 = from_f32<T>(0.0f);  // rows past R: zeros, as cp.async's zero fill
      if (row < R) rope_pair(x1[it], x2[it], c[it], s[it], y1, y2);
      q_s[mma::swz<D>(r, j & ~7) + (j & 7)] = y1;
      q_s[mma::swz<D>(r, (j + half) & ~7) + ((j + half) & 7)] = y2;
    }
  }
};

// The fused attention phase's K/V write: for each of the step's tokens whose
// slot lies in [lo, hi) (this task's split), KV head kvh's rotated k and its v
// into the cache, as rope_qkv_row writes them (rope_pair; v copied). The
// (token, k|v, pair) items are spread over the tile's kThr threads, loads first.
template <class T, int D, int kThr>
__device__ __forceinline__ void write_split_kv(const RopeQkvParams& p, int n, int kvh, int lo, int hi, int tid) {
  constexpr int half = D / 2, kU = 4;
  const int items = n * 2 * half;
  for (int base = 0; base < items; base += kU * kThr) {
    T x1[kU], x2[kU];  // raw: v is copied bit for bit
    float c[kU], s[kU];
    int64_t at[kU];
    bool go[kU], is_k[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u * kThr + tid;
      const int t = i / (2 * half), j = i % half;
      is_k[u] = i / half % 2 == 0;
      const int slot = i < items ? p.slots[t] : -1;
      go[u] = i < items && slot >= lo && slot < hi && slot < p.slot_limit;
      c[u] = s[u] = 0.0f;
      at[u] = 0;
      if (go[u]) {
        const int32_t r = p.rows[t];
        const bool ok = r >= 0 && r < p.table_rows;
        c[u] = ok ? p.cos[int64_t(r) * half + j] : NAN;
        s[u] = ok ? p.sin[int64_t(r) * half + j] : NAN;
        const T* src = is_k[u] ? static_cast<const T*>(p.k) + t * p.k_ld + int64_t(kvh) * D
                               : static_cast<const T*>(p.v) + t * p.v_ld + int64_t(kvh) * D;
        x1[u] = LoadCoherent::ld(src + j);
        x2[u] = LoadCoherent::ld(src + j + half);
        at[u] = kvh * p.out_head_stride + int64_t(slot) * p.out_slot_stride + j;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (!go[u]) continue;
      if (is_k[u]) {
        T* dst = static_cast<T*>(p.k_out) + at[u];
        rope_pair(to_f32(x1[u]), to_f32(x2[u]), c[u], s[u], dst[0], dst[half]);
      } else {
        T* dst = static_cast<T*>(p.v_out) + at[u];
        dst[0] = x1[u];
        dst[half] = x2[u];
      }
    }
  }
}

// Phase codes of the profile stamps (persistent_step_profile).
enum Phase : unsigned { kStart = 0, kQkv, kRope, kAttn, kComb, kO, kGu, kDown, kLmHead, kPhases };

// stage_off, stage_bytes: where the two weight-stage buffers start in the
// dynamic shared memory and the bytes of each (0: no staging).
// AW: the attention split tile's warps (attention_decode_split_warps(D)).
template <class T, int D, int AW>
__global__ void __launch_bounds__(kThreads, 1) persistent_step_kernel(const __grid_constant__ PersistentStepParams p,
                                                                       int norm_threads, float scale_log2,
                                                                       int stage_off, int stage_bytes) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float gemv_part[skinny::MmaPart<kKW, 1>::kFloats];
  __shared__ float comb_sm[attn::combine_smem_floats(1, D)];
  __shared__ int last_task;
  __shared__ float norm_red[kPersistentMaxTokens * 8], norm_scale[kPersistentMaxTokens];
  T* xs = reinterpret_cast<T*>(smem);  // prologue rows (normalized x, or SiLU(gate) * up)
  T* const stage[2] = {reinterpret_cast<T*>(smem + stage_off),
                       reinterpret_cast<T*>(smem + stage_off + stage_bytes)};
  const int tid = threadIdx.x;
  const int n = p.n;
  const int64_t hidden = p.hidden, I = p.inter, H = p.heads, KH = p.kv_heads, G = H / KH;
  const int64_t qkv_out = (H + 2 * KH) * D;
  const int64_t xs_ld = hidden + 8, act_ld = I + 8;  // padded rows: fewer bank conflicts, 16-byte aligned
  T* const xbuf[2] = {static_cast<T*>(p.x[0]), static_cast<T*>(p.x[1])};
  T* const proj = static_cast<T*>(p.proj);
  T* const qkv = static_cast<T*>(p.qkv);
  T* const gu = static_cast<T*>(p.gu);
  T* const att = static_cast<T*>(p.att);
  const T* const embed = static_cast<const T*>(p.embed);

  // Attention: the split grid the per-op launch would run for this length.
  const int len = *p.kv_length;
  const int chunk = int(p.split_slots);
  const int splits = min(p.max_splits, max(1, (len + chunk - 1) / chunk));
  const int64_t rows = int64_t(n) * H;  // query rows of the combine
  const int R = int(n * G), mt = R > 16 ? 2 : 1, groups = (R + 16 * mt - 1) / (16 * mt);
  attn::SplitArgs sa;
  sa.q = p.q;
  sa.kv_length = p.kv_length;
  sa.q_positions = p.rope.slots;
  sa.o_part = p.workspace;
  sa.lse_part = p.workspace + size_t(p.max_splits) * size_t(rows) * size_t(D);
  sa.n = n, sa.H = int(H), sa.G = int(G);
  sa.head_stride = p.capacity * D, sa.token_stride = D;
  sa.chunk = chunk;
  sa.scale_log2 = scale_log2;
  // One split: it writes att itself, no partials, no combine (the same bits;
  // attention_decode_tile.cuh, SplitArgs::out). `len` is the same in every block.
  const bool direct = p.direct_single_split && splits == 1;
  sa.out = direct ? p.att : nullptr;
  const int tasks = groups * splits * int(KH);

  // Ask L2 for layer l's cached K/V rows that this block's attention tasks will
  // read (they do not change within the step; the weights streamed since the
  // last step have evicted them): the phase's first tile then starts from L2.
  auto prefetch_kv = [&](int l) {
    if (!p.kv_prefetch) return;
    for (int task = blockIdx.x; task < tasks; task += gridDim.x) {
      if (task % groups != 0) continue;  // the other row groups of a split read the same rows
      const int split = (task / groups) % splits, kvh = task / (groups * splits);
      const int lo = split * chunk, hi = min(len, lo + chunk);
      if (hi <= lo) continue;
      const int64_t off = l * p.kv_layer_stride + kvh * p.capacity * D + int64_t(lo) * D;
      const int64_t lines = (int64_t(hi - lo) * D * int64_t(sizeof(T)) + 127) / 128;
      const char* kb = reinterpret_cast<const char*>(static_cast<const T*>(p.rope.k_out) + off);
      const char* vb = reinterpret_cast<const char*>(static_cast<const T*>(p.rope.v_out) + off);
      for (int64_t i = tid; i < lines; i += kThreads) prefetch_l2(kb + i * 128), prefetch_l2(vb + i * 128);
    }
  };
  // The next GEMV phase's weights into stage buffer b (weight staging, above).
  auto stage_next = [&](const void* w, int64_t in, int64_t out, int b) {
    if (stage_bytes) stage_tiles<T>(static_cast<const T*>(w), in, out, stage[b], stage_bytes);
  };
  auto stage_wait = [&] {
    if (stage_bytes) stage_arrived();
  };

  // The normalized rows [r0, r0 + m) of this layer's input into xs: the sum of
  // the residual x[cur] and proj (the closing add of the step's last phase),
  // stored by block 0 into x[cur ^ 1]; for layer 0, the embedding rows (block 0
  // copies them into x[0]). All rows at once (rmsnorm_vec8_rows).
  auto norm_rows = [&](int r0, int m, const T* w, int cur, bool first, bool rounded, bool store, T* out = nullptr,
                       int64_t out_ld = 0) {
    if (!out) out = xs, out_ld = xs_ld;
    auto out_of = [&](int i) { return out + int64_t(i) * out_ld; };
    if (first) {
      if (store)
        for (int64_t e = tid; e < int64_t(m) * hidden; e += kThreads) {
          const int64_t row = r0 + e / hidden;
          xbuf[0][row * hidden + e % hidden] = embed[int64_t(p.tokens[row]) * hidden + e % hidden];
        }
      rmsnorm_vec8_rows<T, LoadCoherent>(
          m, [&](int i) { return embed + int64_t(p.tokens[r0 + i]) * hidden; },
          [](int) { return static_cast<const T*>(nullptr); }, [](int) { return static_cast<T*>(nullptr); }, out_of,
          w, hidden, p.eps, false, norm_threads, norm_red, norm_scale);
    } else {
      T* const r_in = xbuf[cur];
      T* const r_out = store ? xbuf[cur ^ 1] : nullptr;
      rmsnorm_vec8_rows<T, LoadCoherent>(
          m, [&](int i) { return static_cast<const T*>(proj + (r0 + i) * hidden); },
          [&](int i) { return static_cast<const T*>(r_in + (r0 + i) * hidden); },
          [&](int i) { return r_out ? r_out + (r0 + i) * hidden : static_cast<T*>(nullptr); }, out_of, w, hidden,
          p.eps, rounded, norm_threads, norm_red, norm_scale);
    }
  };

  // Profile (benchmarks): block 0 stamps its clock and the phase after each barrier.
  int stamp_at = 0;
  auto stamp = [&](unsigned phase) {
    if (p.stamps && blockIdx.x == 0 && tid == 0 && stamp_at < p.stamps_cap) {
      p.stamps[2 * stamp_at] = clock64();
      p.stamps[2 * stamp_at + 1] = phase;
    }
    ++stamp_at;
  };
  stamp(kStart);

  unsigned opens_at = 0;  // grid_barrier's count for the next opening (thread 0's)
  int cur = 0;            // the residual stream's current buffer
  const int rows_out = n - p.out_from;
  const bool head_inside = rows_out > 0 && !p.xn_out;
  stage_next(p.layers[0].wqkv, hidden, qkv_out, 0);
  for (int l = 0; l < p.num_layers; ++l) {
    const PersistentLayer W = p.layers[l];
    // qkv: (previous layer's closing add +) input norm, stacked q/k/v tiles
    stage_wait();
    stage_next(W.wo, H * D, hidden, 1);
    prefetch_kv(l);
    if (blockIdx.x < gemv_tiles_of(qkv_out)) {
      norm_rows(0, n, static_cast<const T*>(W.attn_norm), cur, l == 0, true, blockIdx.x == 0);
      gemv_tiles<T, T, skinny::XShared>(xs, xs_ld, static_cast<const T*>(W.wqkv), qkv, qkv_out, n, hidden, qkv_out,
                                        gemv_part, stage[0], stage_bytes);
    }
    if (l > 0) cur ^= 1;
    prefetch_tiles(static_cast<const T*>(W.wo), H * D, hidden, stage_bytes);
    grid_barrier(p.barrier, p.barrier_kind, opens_at);
    stamp(kQkv);

    T* const k_l = static_cast<T*>(p.rope.k_out) + l * p.kv_layer_stride;
    T* const v_l = static_cast<T*>(p.rope.v_out) + l * p.kv_layer_stride;
    RopeQkvParams rp = p.rope;
    rp.k_out = k_l, rp.v_out = v_l;
    sa.k = k_l, sa.v = v_l;
    if (!p.fused_attention) {
      // rope: q into p.q, k and v into the cache at the query slots
      const int64_t heads = H + 2 * KH, half = D / 2;
      const int tx = half >= 64 ? 64 : 32, ty = kThreads / tx;
      for (int64_t r = int64_t(blockIdx.x) * ty + tid / tx; r < n * heads; r += int64_t(gridDim.x) * ty)
        rope_qkv_row<T, LoadCoherent>(rp, r / heads, r % heads, tid % tx, tx);
      grid_barrier(p.barrier, p.barrier_kind, opens_at);
      stamp(kRope);
    }

    // attention splits, on the split tile's AW warps of each block (4, or all 8). Fused: a task first writes
    // the step's K/V rows that fall in its split (no other task reads them),
    // rotates its q rows into shared memory, and the last task of a KV head to
    // finish combines that head's rows.
    // Only the tile's warps touch shared memory here, each reuse ordered by named barrier kAttnBarrier (their
    // threads); with the narrow tile warps 4..7 wait at the grid barrier's first __syncthreads, which then orders
    // this phase against the next for all 256. racecheck (sanitize run 3) reported hazards only after this phase, each between two
    // accesses a __syncthreads orders: the tool's, as experiments/h200/racecheck_named_barrier.cu showed (it
    // reports such pairs once some warps ran a named barrier the others did not, and none when every warp ran
    // as many; docs/RELIABILITY.md).
    constexpr int kAttnThreads = attn::kSplitThreads<AW>;
    static_assert(kAttnThreads <= kThreads, "the split tile fits the block");
    if (tid < kAttnThreads) {
      const QRope qrope{p.qkv, qkv_out, p.rope.cos, p.rope.sin, p.rope.rows, p.rope.table_rows};
      for (int task = blockIdx.x; task < tasks; task += gridDim.x) {
        const int group = task % groups, split = (task / groups) % splits, kvh = task / (groups * splits);
        if (!p.fused_attention) {
          if (mt == 1) attn::attention_split_tile<T, D, 1, AW>(sa, group, split, kvh, smem, tid, kAttnBarrier);
          else attn::attention_split_tile<T, D, 2, AW>(sa, group, split, kvh, smem, tid, kAttnBarrier);
          attn::split_sync<AW>(kAttnBarrier);  // the next task refills the shared memory this one merged in
          continue;
        }
        if (group == 0) write_split_kv<T, D, kAttnThreads>(rp, n, kvh, split * chunk, (split + 1) * chunk, tid);
        __threadfence();
        attn::split_sync<AW>(kAttnBarrier);  // the rows are in the cache before the tile's copies read them
        if (mt == 1) attn::attention_split_tile<T, D, 1, AW>(sa, group, split, kvh, smem, tid, kAttnBarrier, qrope);
        else attn::attention_split_tile<T, D, 2, AW>(sa, group, split, kvh, smem, tid, kAttnBarrier, qrope);
        attn::split_sync<AW>(kAttnBarrier);  // every partial of this task is written
        if (direct) continue;            // the split wrote its rows of att
        if (tid == 0) {
          __threadfence();
          const unsigned arrived = atomicAdd(p.counters + kvh, 1u) + 1;
          last_task = arrived == unsigned(groups * splits);
          if (last_task) atomicExch(p.counters + kvh, 0u);  // every task of the head has arrived
          __threadfence();
        }
        attn::split_sync<AW>(kAttnBarrier);
        if (last_task) {
          const int64_t base = int64_t(kvh) * G;
          attn::attention_combine_rows<T, LoadCoherent>(
              sa.o_part, sa.lse_part, att, splits, int(rows), int(n * G),
              [=](int i) { return int64_t(i / G) * H + base + i % G; }, D, p.kv_length, chunk,
              reinterpret_cast<float*>(smem), tid, kAttnThreads, [] { attn::split_sync<AW>(kAttnBarrier); });
        }
        attn::split_sync<AW>(kAttnBarrier);  // the next task refills the shared memory
      }
    }
    grid_barrier(p.barrier, p.barrier_kind, opens_at);
    stamp(kAttn);

    if (!p.fused_attention && !direct) {
      // combine, a row per block
      for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        attn::attention_combine_rows<T, LoadCoherent>(
            sa.o_part, sa.lse_part, att, splits, int(rows), 1, [row](int) { return row; }, D, p.kv_length, chunk,
            comb_sm, tid, kThreads, [] { __syncthreads(); });
        __syncthreads();
      }
      grid_barrier(p.barrier, p.barrier_kind, opens_at);
      stamp(kComb);
    }

    // o-proj
    stage_wait();
    stage_next(W.w_gate_up, hidden, 2 * I, 0);
    gemv_tiles<T, T, skinny::XCoherent>(att, H * D, static_cast<const T*>(W.wo), proj, hidden, n, H * D, hidden,
                                        gemv_part, stage[1], stage_bytes);
    prefetch_tiles(static_cast<const T*>(W.w_gate_up), hidden, 2 * I, stage_bytes);
    grid_barrier(p.barrier, p.barrier_kind, opens_at);
    stamp(kO);

    // gate/up: residual add + MLP norm (of the fp32 sum, as add_rmsnorm) in the prologue
    stage_wait();
    stage_next(W.w_down, I, hidden, 1);
    if (blockIdx.x < gemv_tiles_of(2 * I)) {
      norm_rows(0, n, static_cast<const T*>(W.mlp_norm), cur, false, false, blockIdx.x == 0);
      gemv_tiles<T, T, skinny::XShared>(xs, xs_ld, static_cast<const T*>(W.w_gate_up), gu, 2 * I, n, hidden, 2 * I,
                                        gemv_part, stage[0], stage_bytes);
    }
    cur ^= 1;
    prefetch_tiles(static_cast<const T*>(W.w_down), I, hidden, stage_bytes);
    grid_barrier(p.barrier, p.barrier_kind, opens_at);
    stamp(kGu);

    // down: SiLU(gate) * up of the n rows in the prologue
    stage_wait();
    if (l + 1 < p.num_layers) stage_next(p.layers[l + 1].wqkv, hidden, qkv_out, 0);
    else if (head_inside) stage_next(p.lm_head, hidden, p.vocab_rows, 0);
    if (blockIdx.x < gemv_tiles_of(hidden)) {
      // 8 elements a step, 16-byte loads; each element as silu_mul's kernel computes it
#pragma unroll 4
      for (int64_t i = tid; i < n * I / 8; i += kThreads) {
        const int64_t r = i / (I / 8), c = i % (I / 8) * 8;
        const uint4 gr = LoadCoherent::ld16(gu + r * 2 * I + c), ur = LoadCoherent::ld16(gu + r * 2 * I + I + c);
        const T* g8 = reinterpret_cast<const T*>(&gr);
        const T* u8 = reinterpret_cast<const T*>(&ur);
        uint4 packed;
        T* o8 = reinterpret_cast<T*>(&packed);
#pragma unroll
        for (int e = 0; e < 8; ++e) o8[e] = from_f32<T>(silu_mul_f32(to_f32(g8[e]), to_f32(u8[e])));
        *reinterpret_cast<uint4*>(xs + r * act_ld + c) = packed;
      }
      __syncthreads();
      gemv_tiles<T, T, skinny::XShared>(xs, act_ld, static_cast<const T*>(W.w_down), proj, hidden, n, I, hidden,
                                        gemv_part, stage[1], stage_bytes);
    }
    if (l + 1 < p.num_layers)
      prefetch_tiles(static_cast<const T*>(p.layers[l + 1].wqkv), hidden, qkv_out, stage_bytes);
    grid_barrier(p.barrier, p.barrier_kind, opens_at);
    stamp(kDown);
  }

  // the last closing add + final norm for the logit rows, then the lm_head
  stage_wait();
  if (rows_out > 0 && p.xn_out) {  // the lm_head is the caller's (a standalone skinny GEMM)
    if (blockIdx.x == 0)
      norm_rows(p.out_from, rows_out, static_cast<const T*>(p.final_norm), cur, false, true, false,
                static_cast<T*>(p.xn_out), hidden);
  } else if (rows_out > 0 && blockIdx.x < gemv_tiles_of(p.vocab_rows)) {
    norm_rows(p.out_from, rows_out, static_cast<const T*>(p.final_norm), cur, false, true, false);
    gemv_tiles<T, float, skinny::XShared>(xs, xs_ld, static_cast<const T*>(p.lm_head), p.logits, p.vocab_rows,
                                          rows_out, hidden, p.vocab_rows, gemv_part, stage[0], stage_bytes);
  }
  stamp(kLmHead);  // block 0's end: the others may still be in their lm_head tiles
}

__global__ void __launch_bounds__(kThreads) barrier_bench_kernel(unsigned* bar, int kind, int iters) {
  unsigned opens_at = 0;
  for (int i = 0; i < iters; ++i) grid_barrier(bar, kind, opens_at);
}

// Profile stamps of the last profiled launch (device), and whether to take them.
struct ProfileState {
  bool on = false;
  unsigned long long* stamps = nullptr;
  int cap = 0;
};
ProfileState& profile_state() {
  static ProfileState s;
  return s;
}

bool fused_attention_from_env() { return switch_from_env("TRIFORCE_PERSISTENT_FUSED_ATTN", true); }
bool& fused_attention_flag() {
  static bool on = fused_attention_from_env();
  return on;
}
// TRIFORCE_PERSISTENT_BARRIER: counter (default) or generation (grid_barrier).
int barrier_kind_from_env() {
  static const int kind = [] {
    const char* s = std::getenv("TRIFORCE_PERSISTENT_BARRIER");
    if (!s || !*s) return int(kCounter);
    const std::string v(s);
    TF_CHECK(v == "counter" || v == "generation",
             "TRIFORCE_PERSISTENT_BARRIER=" << v << ": expected counter or generation");
    return v == "counter" ? int(kCounter) : int(kGeneration);
  }();
  return kind;
}

bool& lm_head_flag() {
  static bool on = switch_from_env("TRIFORCE_PERSISTENT_LM_HEAD", true);
  return on;
}

bool kv_prefetch_flag() {
  static const bool on = switch_from_env("TRIFORCE_PERSISTENT_KV_PREFETCH", true);
  return on;
}

bool& stage_weights_flag() {
  static bool on = switch_from_env("TRIFORCE_PERSISTENT_STAGE_WEIGHTS", false);
  return on;
}
// Bytes of one weight-stage buffer at most: a 16-row tile of a 1536-wide
// matrix (SmolLM2's down projection) or two of a 576-wide one, with room left.
constexpr size_t kStageBufferMax = 64 * 1024;

int g_last_grid = 0;

// TRIFORCE_PERSISTENT_BLOCKS_PER_SM=k (default 1): more blocks give the GEMV
// phases more loads in flight but make every barrier count more arrivals.
int blocks_per_sm_wanted() {
  static const int v = [] {
    const char* s = std::getenv("TRIFORCE_PERSISTENT_BLOCKS_PER_SM");
    if (!s || !*s) return 1;
    const int k = std::atoi(s);
    TF_CHECK(k >= 1 && k <= 8, "TRIFORCE_PERSISTENT_BLOCKS_PER_SM=" << s << ": expected 1..8");
    return k;
  }();
  return v;
}

template <class T, int D, int AW>
void launch(const PersistentStepParams& p, cudaStream_t stream) {
  auto* kern = persistent_step_kernel<T, D, AW>;
  const int64_t G = p.heads / p.kv_heads, R = p.n * G;
  const size_t attn_bytes = R > 16 ? attn::split_smem_bytes<D, 2, AW>() : attn::split_smem_bytes<D, 1, AW>();
  const size_t rows_bytes = sizeof(T) * size_t(p.n) * size_t(std::max(p.hidden, p.inter) + 8);
  const size_t base = (std::max(attn_bytes, rows_bytes) + 127) / 128 * 128;
  // The two weight-stage buffers after it, as large as the SM leaves room for (up to kStageBufferMax).
  size_t stage_bytes = 0;
  if (stage_weights_flag()) {
    static const size_t room = [&] {
      int dev = 0, optin = 0;
      CUDA_CHECK(cudaGetDevice(&dev));
      CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
      cudaFuncAttributes fa = {};
      CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
      return size_t(optin) > fa.sharedSizeBytes ? size_t(optin) - fa.sharedSizeBytes : size_t(0);
    }();
    if (room > base) stage_bytes = std::min(kStageBufferMax, (room - base) / 2 / 128 * 128);
  }
  const size_t smem = base + 2 * stage_bytes;
  // Per device: the largest dynamic shared memory allowed so far, and the
  // co-resident grid for each size asked (the occupancy API, asked once).
  static std::mutex mu;
  static std::map<std::pair<int, size_t>, int> grid_of;
  static std::map<int, size_t> allowed;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int grid = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = grid_of.find({dev, smem});
    if (it == grid_of.end()) {
      if (allowed[dev] < smem) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        allowed[dev] = smem;
      }
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kThreads, smem));
      TF_CHECK(per_sm >= 1, "cuda::persistent_step: no block of " << kThreads << " threads and " << smem
                                                                  << " bytes of shared memory fits an SM");
      it = grid_of.emplace(std::make_pair(dev, smem), std::min(per_sm, blocks_per_sm_wanted()) * current_sm_count()).first;
    }
    grid = it->second;
  }
  const float scale = p.attn_scale > 0.0f ? p.attn_scale : 1.0f / sqrtf(float(p.head_dim));
  const float scale_log2 = scale * attn::kLog2e;  // as attention_decode computes it
  const int norm_threads = rmsnorm_vec8_threads(p.hidden);

  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // co-residency guaranteed, or the launch fails
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  PersistentStepParams q = p;
  q.barrier_kind = barrier_kind_from_env();
  q.kv_prefetch = kv_prefetch_flag();
  // Both barriers start from zero arrivals; the counter's is left at the launch's total.
  CUDA_CHECK(cudaMemsetAsync(q.barrier, 0, sizeof(unsigned), stream));
  ProfileState& prof = profile_state();
  if (prof.on) {
    const int need = 2 + int(p.num_layers) * int(kPhases);
    if (prof.cap < need) {
      if (prof.stamps) CUDA_CHECK(cudaFree(prof.stamps));
      CUDA_CHECK(cudaMalloc(&prof.stamps, sizeof(unsigned long long) * 2 * size_t(need)));
      prof.cap = need;
    }
    CUDA_CHECK(cudaMemsetAsync(prof.stamps, 0, sizeof(unsigned long long) * 2 * size_t(prof.cap), stream));
    q.stamps = prof.stamps, q.stamps_cap = prof.cap;
  }
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, q, norm_threads, scale_log2, int(base), int(stage_bytes)));
  g_last_grid = grid;
}

}  // namespace

const char* persistent_step_unsupported(int64_t hidden, int64_t inter, int64_t heads, int64_t kv_heads,
                                        int64_t head_dim, DType dtype) {
  if (!is_half_dtype(dtype)) return "dtype is not f16/bf16";
  if (head_dim != 64 && head_dim != 128) return "head_dim is not 64 or 128";
  if (kv_heads <= 0 || heads % kv_heads != 0) return "heads are not a multiple of the KV heads";
  // n * G query rows of a KV head must fit the split tile's 32 rows at n = kPersistentMaxTokens.
  if (heads / kv_heads * kPersistentMaxTokens > 32) return "more than 4 query heads per KV head";
  if (hidden % 8 != 0 || hidden < 8 || hidden > kPersistentMaxHidden)
    return "hidden size is not a multiple of 8 up to 2048";
  if (inter % 8 != 0 || inter < 8 || inter > kPersistentMaxInter)
    return "intermediate size is not a multiple of 8 up to 8192";
  if (rmsnorm_vec8_threads(hidden) > kThreads) return "hidden size needs a wider norm block";
  if (skinny_default_variant() != SkinnyVariant::mma_k8u4) return "TRIFORCE_SKINNY_VARIANT is not mma_k8u4";
  return nullptr;
}

size_t persistent_step_workspace_bytes(int64_t n, int64_t heads, int64_t head_dim, int max_splits) {
  return sizeof(float) * size_t(max_splits) * size_t(n) * size_t(heads) * size_t(head_dim + 1);
}

int persistent_step_last_grid() { return g_last_grid; }

bool persistent_step_fused_attention() { return fused_attention_flag(); }
void set_persistent_step_fused_attention(bool on) { fused_attention_flag() = on; }
bool persistent_step_lm_head() { return lm_head_flag(); }
void set_persistent_step_lm_head(bool on) { lm_head_flag() = on; }
bool persistent_step_stage_weights() { return stage_weights_flag(); }
void set_persistent_step_stage_weights(bool on) { stage_weights_flag() = on; }

void set_persistent_step_profiling(bool on) { profile_state().on = on; }

std::vector<PersistentPhaseTimes> persistent_step_profile() {
  static const char* const names[kPhases] = {"start", "qkv", "rope", "attn", "comb", "o", "gu", "down", "lm_head"};
  std::vector<PersistentPhaseTimes> out;
  for (unsigned k = 1; k < kPhases; ++k) out.push_back({names[k], 0.0});
  out.push_back({"total", 0.0});
  const ProfileState& prof = profile_state();
  if (!prof.stamps) return out;
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> h(2 * size_t(prof.cap));
  CUDA_CHECK(cudaMemcpy(h.data(), prof.stamps, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  int dev = 0, khz = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const double us_per_cycle = 1e3 / double(khz > 0 ? khz : 1);
  int last = 0;
  for (int i = 1; i < prof.cap && h[2 * size_t(i)] != 0; ++i) {
    const unsigned phase = unsigned(h[2 * size_t(i) + 1]);
    if (phase >= 1 && phase < kPhases)
      out[phase - 1].us += double(h[2 * size_t(i)] - h[2 * size_t(i - 1)]) * us_per_cycle;
    last = i;
  }
  out.back().us = double(h[2 * size_t(last)] - h[0]) * us_per_cycle;
  return out;
}

double persistent_barrier_us(int iters, int blocks_per_sm, bool generation) {
  const int kind = generation ? int(kGeneration) : int(kCounter);
  unsigned* bar = nullptr;
  CUDA_CHECK(cudaMalloc(&bar, 2 * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, barrier_bench_kernel, kThreads, 0));
  const int grid = std::min(per_sm, blocks_per_sm) * current_sm_count();
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(kThreads);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, barrier_bench_kernel, bar, kind, 10));  // warm-up
  CUDA_CHECK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
  EventTimer t;
  t.start();
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, barrier_bench_kernel, bar, kind, iters));
  const double us = t.stop_us();
  CUDA_CHECK(cudaFree(bar));
  return us / double(iters > 0 ? iters : 1);
}

void persistent_step(const PersistentStepParams& p, cudaStream_t stream) {
  const char* why = persistent_step_unsupported(p.hidden, p.inter, p.heads, p.kv_heads, p.head_dim, p.dtype);
  TF_CHECK(!why, "cuda::persistent_step: " << why);
  TF_CHECK(p.n >= 1 && p.n <= kPersistentMaxTokens,
           "cuda::persistent_step: " << p.n << " tokens (need 1.." << kPersistentMaxTokens << ")");
  TF_CHECK(p.out_from >= 0 && p.out_from <= p.n, "cuda::persistent_step: out_from " << p.out_from);
  TF_CHECK(p.layers && p.num_layers > 0 && p.embed && p.final_norm && p.lm_head && p.tokens && p.kv_length &&
               p.x[0] && p.x[1] && p.qkv && p.q && p.att && p.proj && p.gu && p.workspace && p.barrier &&
               (p.counters || !p.fused_attention) &&
               (p.logits || p.xn_out || p.out_from == p.n),
           "cuda::persistent_step: null pointer");
  TF_CHECK(p.rope.q && p.rope.k && p.rope.v && p.rope.q_out && p.rope.k_out && p.rope.v_out && p.rope.cos &&
               p.rope.sin && p.rope.rows && p.rope.slots,
           "cuda::persistent_step: incomplete rope / KV-write params");
  TF_CHECK(p.split_slots > 0 && p.split_slots % 64 == 0 && p.max_splits >= 1 && p.capacity > 0,
           "cuda::persistent_step: split_slots " << p.split_slots << ", max_splits " << p.max_splits);
  TF_CHECK(p.workspace_bytes >= persistent_step_workspace_bytes(p.n, p.heads, p.head_dim, p.max_splits),
           "cuda::persistent_step: workspace of " << p.workspace_bytes << " bytes is too small");
  TF_DISPATCH_HALF(p.dtype, T, {
    // The per-op path's split tile, so the same bits (attention_decode_split_warps).
    if (p.head_dim == 128) launch<T, 128, attn::kWarps>(p, stream);
    else if (attention_decode_split_warps(64) == attn::kWideWarps) launch<T, 64, attn::kWideWarps>(p, stream);
    else launch<T, 64, attn::kWarps>(p, stream);
  });
}

}  // namespace tf::cuda
