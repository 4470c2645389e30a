// The pieces of attention_decode (attention_decode.cu) that the persistent
// step kernel (persistent_step.cu) runs too: the split tile (one (row group,
// split, kv head) of the split kernel's grid) and one row of the combine. The
// standalone kernels are thin wrappers around them, so both paths execute the
// same arithmetic in the same order and their outputs are bit-identical.
#pragma once
#if defined(__CUDACC__)
#include <climits>
#include <cstdint>

#include "attention_mma.cuh"
#include "common.cuh"
#include "tile_load.cuh"

namespace tf::cuda::attn {

// A split tile runs W warps, each taking 16 slots of every KV tile of 16 W
// slots. W is fixed per process and head dim (attention_decode_split_warps),
// never per call, so a row's result does not depend on the call: 4 warps, or
// at head dim 64 optionally 8, since a short split is bound by the length of
// each warp's instruction chain, not by memory (results/h100/session-2026-12-07d).
constexpr int kWarps = 4;             // the narrow tile (every head dim)
constexpr int kWideWarps = 8;         // the wide tile (head dim 64 only: its stages fit as the narrow D = 128 ones)
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16 * kWarps;    // the narrow tile's slots; split sizes are multiples of it
constexpr int kStages = 3;            // tiles in flight: two load while one is consumed
template <int W> inline constexpr int kSplitThreads = 32 * W;
template <int W> inline constexpr int kSplitTile = 16 * W;
constexpr float kLog2e = 1.4426950408889634f;

struct SplitArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* kv_length;
  const int32_t* q_positions;
  float* o_part;    // [splits, n, H, D]
  float* lse_part;  // [splits, n, H] (log2 domain)
  int n, H, G;      // G = heads per kv head
  int64_t head_stride, token_stride;
  int chunk;        // slots per split, a multiple of kTile (a wide tile's last one in a split may be partly past it)
  float scale_log2;
  // Non-null when the grid has one split: that split writes its rows here, in
  // the KV dtype, [n, H, D], instead of o_part and lse_part, and no combine
  // runs. From one split the combine takes weight exp2(lse - lse) = 1 and
  // computes 0 + fma(1, o, 0) + 0 + 0 + 0, divided by (1 + 0) + (0 + 0): o
  // itself (never -0, as the merge below sums from +0), or 0 for a row that
  // saw no slot; so these are the combine's bits.
  void* out = nullptr;
};

template <int D, int MT, int W = kWarps> constexpr size_t split_smem_bytes() {
  constexpr int rows = 16 * MT;
  const size_t tiles = sizeof(uint16_t) * (size_t(rows) * D + size_t(kStages) * 2 * kSplitTile<W> * D);
  const size_t merge = sizeof(float) * size_t(W) * rows * (D + 2);
  return tiles > merge ? tiles : merge;
}

// Barrier of the 32 W threads running a split tile (named, so a wider block's
// other warps need not take part).
template <int W> __device__ __forceinline__ void split_sync(int bar_id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(bar_id), "r"(kSplitThreads<W>) : "memory");
}

// grid = (row groups, splits, kv heads); block = W warps. Query row r of kv
// head kvh is token r / G, head kvh * G + r % G; the CTA takes rows
// [16 MT group, 16 MT (group + 1)) as MT mma M tiles, so the whole GQA group
// (and every verify token) shares each K/V tile it loads. The groups of one
// split sit next to each other in the grid and read the same tiles through L2.
// Warp w scores and accumulates slots [16w, 16w + 16) of each tile with its
// own online softmax; the W warps merge in shared memory at the end.
// The tile runs on threads tid = 0..32 W - 1 of their block, which meet at named
// barrier bar_id (0 in the standalone kernel, whose block is these threads);
// smem_raw is split_smem_bytes<D, MT, W>() bytes of 128-byte aligned shared memory.
// The split kernel's Q rows: cp.async from the rotated q in global memory
// (token-major, head-minor, one 16-byte chunk per copy), rows past R zero.
struct QFromGlobal {
  template <class T, int D, int kRows, int kThr>
  __device__ __forceinline__ void load(const SplitArgs& a, T* q_s, int group, int kvh, int tid) const {
    using namespace mma;
    const int R = a.n * a.G;
    const T* Q = static_cast<const T*>(a.q);
    for (int i = tid; i < kRows * (D / 8); i += kThr) {
      const int r = i / (D / 8), c = (i % (D / 8)) * 8;
      const int row = group * kRows + r;
      const bool ok = row < R;
      const int64_t src = ok ? (int64_t(row / a.G) * a.H + kvh * a.G + row % a.G) * D + c : 0;
      cp_async16(q_s + swz<D>(r, c), Q + src, ok);
    }
  }
};

template <class T, int D, int MT, int W, class QL = QFromGlobal>
__device__ __forceinline__ void attention_split_tile(const SplitArgs& a, int group, int split, int kvh,
                                                     unsigned char* smem_raw, int tid, int bar_id,
                                                     const QL& ql = QL()) {
  using namespace mma;
  constexpr int kRows = 16 * MT;
  constexpr int kWarps = W, kThreads = kSplitThreads<W>, kTile = kSplitTile<W>;  // shadow the narrow tile's
  T* q_s = reinterpret_cast<T*>(smem_raw);   // [kRows * D] swizzled
  T* k_s = q_s + kRows * D;                  // [kStages][kTile * D]
  T* v_s = k_s + kStages * kTile * D;        // [kStages][kTile * D]

  // A grid sized for more slots than the cache holds (a captured graph sized
  // for its capacity bucket): splits past the length do nothing, and the
  // combine reads only the splits below it, so the result is the one of a
  // grid sized for the length. Split 0 always runs (an empty cache gives zeros).
  if (split > 0 && split * a.chunk >= *a.kv_length) return;
  const int lane = tid & 31, warp = tid >> 5;
  const int R = a.n * a.G;
  const T* K = static_cast<const T*>(a.k) + int64_t(kvh) * a.head_stride;
  const T* V = static_cast<const T*>(a.v) + int64_t(kvh) * a.head_stride;

  // Q rows into q_s (QFromGlobal: cp.async, travelling in the first commit
  // group; another loader may store them directly: the loop's first barrier
  // comes before any read of q_s).
  ql.template load<T, D, kRows, kThreads>(a, q_s, group, kvh, tid);

  const int len = *a.kv_length;
  int max_pos = INT_MIN;
  for (int t = 0; t < a.n; ++t) max_pos = max(max_pos, a.q_positions ? a.q_positions[t] : INT_MAX);
  const int begin = split * a.chunk;
  int end = min(len, begin + a.chunk);
  if (max_pos < INT_MAX) end = min(end, max_pos + 1);
  const int ntiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;

  auto load_kv = [&](int tile) {
    const int stage = tile % kStages;
    const int j0 = begin + tile * kTile;
    const int valid = min(kTile, end - j0);
    load_tile_async<D, kTile, kThreads>(k_s + stage * kTile * D, K + int64_t(j0) * a.token_stride, a.token_stride,
                                        valid, tid);
    load_tile_async<D, kTile, kThreads>(v_s + stage * kTile * D, V + int64_t(j0) * a.token_stride, a.token_stride,
                                        valid, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ntiles) load_kv(s);
    cp_async_commit();  // Q travels in the first group
  }

  const int g = lane >> 2, t4 = lane & 3;
  int lim[MT][2];  // last slot each of this thread's rows (16 mt + g + 8 r) may see
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = group * kRows + 16 * mt + g + 8 * r;
      const int lm = row < R ? (a.q_positions ? a.q_positions[row / a.G] : INT_MAX) : INT_MIN;
      lim[mt][r] = min(lm, end - 1);
    }

  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  }
  const auto* qbase = reinterpret_cast<const uint16_t*>(q_s);

  for (int tile = 0; tile < ntiles; ++tile) {
    if (tile + kStages - 1 < ntiles) load_kv(tile + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    split_sync<W>(bar_id);

    const int stage = tile % kStages;
    const auto* kbase = reinterpret_cast<const uint16_t*>(k_s + stage * kTile * D);
    const T* vt = v_s + stage * kTile * D;
    const int j0 = begin + tile * kTile + warp * 16;  // this warp's first slot

    float s[MT][2][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, kbase + swz<D>(warp * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldmatrix_x4(af, qbase + swz<D>(16 * mt + (lane & 15), kk * 16 + (lane >> 4) * 8));
        mma16816<T>(s[mt][0], af, b[0], b[1]);
        mma16816<T>(s[mt][1], af, b[2], b[3]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int slot = j0 + nt * 8 + 2 * t4 + (e & 1);
          s[mt][nt][e] = slot <= lim[mt][e >> 1] ? s[mt][nt][e] * a.scale_log2 : -INFINITY;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(m[mt][r], fmaxf(fmaxf(s[mt][0][2 * r], s[mt][0][2 * r + 1]),
                                         fmaxf(s[mt][1][2 * r], s[mt][1][2 * r + 1])));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mu = mx == -INFINITY ? 0.0f : mx;  // a row that sees nothing yet stays at zero
        const float alpha = fast_exp2(m[mt][r] - mu);
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          s[mt][nt][2 * r] = fast_exp2(s[mt][nt][2 * r] - mu);
          s[mt][nt][2 * r + 1] = fast_exp2(s[mt][nt][2 * r + 1] - mu);
          sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
        }
        l[mt][r] = l[mt][r] * alpha + sum;  // per-thread partial; the quad is summed at the end
        m[mt][r] = mx;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
      }
      uint32_t pa[4];
      pa[0] = pack2<T>(s[mt][0][0], s[mt][0][1]);
      pa[1] = pack2<T>(s[mt][0][2], s[mt][0][3]);
      pa[2] = pack2<T>(s[mt][1][0], s[mt][1][1]);
      pa[3] = pack2<T>(s[mt][1][2], s[mt][1][3]);
      pv_step<T, D>(o[mt], pa, vt, warp * 16, lane);
    }
    split_sync<W>(bar_id);  // this stage is refilled kStages - 1 iterations from now
  }
  cp_async_wait<0>();
  split_sync<W>(bar_id);  // tiles are dead: reuse shared memory for the merge

  // Merge the warps: per warp and row, m, l and the unnormalised output.
  float* m_s = reinterpret_cast<float*>(smem_raw);  // [kWarps][kRows]
  float* l_s = m_s + kWarps * kRows;                // [kWarps][kRows]
  float* o_s = l_s + kWarps * kRows;                // [kWarps][kRows][D]
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = 16 * mt + g + 8 * r;
      if (t4 == 0) {
        m_s[warp * kRows + row] = m[mt][r];
        l_s[warp * kRows + row] = sum;
      }
      float* dst = o_s + (warp * kRows + row) * D + 2 * t4;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        dst[dt * 8] = o[mt][dt][2 * r];
        dst[dt * 8 + 1] = o[mt][dt][2 * r + 1];
      }
    }
  split_sync<W>(bar_id);
  for (int i = tid; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const int row = group * kRows + r;
    if (row >= R) break;  // rows are in order: the rest are past R too
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w * kRows + r]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = fast_exp2(m_s[w * kRows + r] - M);  // 0 for a warp that saw nothing
        L = fmaf(l_s[w * kRows + r], f, L);
        O = fmaf(o_s[(w * kRows + r) * D + d], f, O);
      }
    }
    const bool any = L > 0.0f;
    const int t = row / a.G, h = kvh * a.G + row % a.G;
    if (a.out) {
      store_f32(static_cast<T*>(a.out) + (int64_t(t) * a.H + h) * D + d, any ? O / L : 0.0f);
      continue;
    }
    const int64_t out_row = (int64_t(split) * a.n + t) * a.H + h;
    a.o_part[out_row * D + d] = any ? O / L : 0.0f;
    if (d == 0) a.lse_part[out_row] = any ? M + log2f(L) : -INFINITY;
  }
}

// Rows row_of(0), ..., row_of(nrows - 1) of the LSE-weighted merge of the
// splits, on threads tid = 0..nthreads-1 that meet at sync(). Virtual thread
// (i, sg, d), sg < 4, sums splits sg, sg + 4, ... of dim d of row i (the
// standalone kernel's block is exactly the 4 D threads of one row; other
// callers spread the virtual threads over theirs), so four independent loads
// per dim are in flight; the four partial sums meet in shared memory. sm:
// combine_smem_floats(nrows, D) floats of shared memory; nthreads a multiple
// of 32 (the one-row path reduces by warps).
constexpr int kCombineGroups = 4;
__host__ __device__ constexpr int combine_smem_floats(int nrows, int D) {
  return nrows * (1 + kCombineGroups + kCombineGroups * D) + 32;
}
template <class T, class LD, class RowOf, class Sync>
__device__ __forceinline__ void attention_combine_rows(const float* o_part, const float* lse_part, T* out,
                                                       int grid_splits, int rows, int nrows, RowOf row_of, int D,
                                                       const int32_t* kv_length, int chunk, float* sm, int tid,
                                                       int nthreads, Sync sync) {
  float* M_s = sm;                              // [nrows]
  float* w_s = M_s + nrows;                     // [nrows][4]
  float* part = w_s + kCombineGroups * nrows;   // [nrows][4][D]
  float* red = part + kCombineGroups * D * nrows;  // [32] warp maxima (one row)
  // The splits that ran: those starting below the device length (at least one).
  const int live = max(1, (*kv_length + chunk - 1) / chunk);
  const int splits = min(grid_splits, live);
  // Each row's largest LSE: a max, the same whatever the order. One row: every
  // thread takes some splits (thousands at long context); several: a thread a row.
  if (nrows == 1) {
    float mx = -INFINITY;
    for (int s = tid; s < splits; s += nthreads) mx = fmaxf(mx, LD::ld(lse_part + int64_t(s) * rows + row_of(0)));
    mx = warp_max(mx);
    if ((tid & 31) == 0) red[tid >> 5] = mx;
    sync();
    if (tid == 0) {
      float m = -INFINITY;
      for (int w = 0; w < (nthreads + 31) / 32; ++w) m = fmaxf(m, red[w]);
      M_s[0] = m;
    }
  } else {
    for (int i = tid; i < nrows; i += nthreads) {
      const int64_t row = row_of(i);
      float mx = -INFINITY;
      for (int s = 0; s < splits; ++s) mx = fmaxf(mx, LD::ld(lse_part + int64_t(s) * rows + row));
      M_s[i] = mx;
    }
  }
  sync();
  for (int v = tid; v < nrows * kCombineGroups * D; v += nthreads) {
    const int i = v / (kCombineGroups * D), sg = v / D % kCombineGroups, d = v % D;
    const int64_t row = row_of(i);
    const float M = M_s[i];
    float acc = 0.0f, wsum = 0.0f;
    if (M != -INFINITY) {
#pragma unroll 4
      for (int s = sg; s < splits; s += kCombineGroups) {
        const float w = exp2f(LD::ld(lse_part + int64_t(s) * rows + row) - M);  // 0 for an empty split
        wsum += w;
        acc = fmaf(w, LD::ld(o_part + (int64_t(s) * rows + row) * D + d), acc);
      }
    }
    part[v] = acc;
    if (d == 0) w_s[i * kCombineGroups + sg] = wsum;
  }
  sync();
  for (int v = tid; v < nrows * D; v += nthreads) {
    const int i = v / D, d = v % D;
    // The first kernel summed the four groups' weights with block_sum over its
    // 4 D threads, only threads (sg, 0) nonzero: they sit in lanes 0, 2, 4, 6
    // (D = 64) or 0, 4, 8, 12 (D = 128) of the warp partials' xor tree, which
    // adds them as (w0 + w2) + (w1 + w3) in both cases. Written out, it needs
    // no block shape.
    const float* w = w_s + i * kCombineGroups;
    const float W = (w[0] + w[2]) + (w[1] + w[3]);
    float o = 0.0f;
#pragma unroll
    for (int g = 0; g < kCombineGroups; ++g) o += part[(i * kCombineGroups + g) * D + d];
    store_f32(out + row_of(i) * D + d, W > 0.0f ? o / W : 0.0f);
  }
}

}  // namespace tf::cuda::attn
#endif
