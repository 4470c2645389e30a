#include <algorithm>
#include <atomic>
#include <climits>

#include "attention_decode.cuh"
#include "attention_mma.cuh"
#include "common.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 4;             // warps per split CTA; each takes 16 slots of every tile
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16 * kWarps;    // KV slots per pipeline stage
constexpr int kStages = 3;            // tiles in flight: two load while one is consumed
constexpr float kLog2e = 1.4426950408889634f;

struct SplitArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* kv_length;
  const int32_t* q_positions;
  void* out;        // [n, H, D] in T
  float* o_part;    // [splits, n, H, D]
  float* lse_part;  // [splits, n, H] (log2 domain)
  int* counters;    // [kv heads, row groups] tickets, zero between calls
  int n, H, G;      // G = heads per kv head
  int64_t head_stride, token_stride;
  int chunk;        // slots per split, a multiple of kTile
  int splits;       // splits in the grid (partials per row); 1: no partials, the CTA writes out
  int spc;          // consecutive splits per CTA (gridDim.y = ceil(splits / spc))
  float scale_log2;
};

template <int D, int MT> constexpr size_t split_smem_bytes() {
  constexpr int rows = 16 * MT;
  // Q, the K/V stages, and m/l of the split flush (its outputs use a dead K/V stage).
  return sizeof(uint16_t) * (size_t(rows) * D + size_t(kStages) * 2 * kTile * D) +
         sizeof(float) * 2 * size_t(kWarps) * rows;
}

// Splits whose weights the final merge stages in shared memory at a time.
constexpr int kMergeBatch = 256;

// grid = (row groups, split ranges, kv heads); block = 4 warps. Query row r of
// kv head kvh is token r / G, head kvh * G + r % G; the CTA takes rows
// [16 MT group, 16 MT (group + 1)) as MT mma M tiles, so the whole GQA group
// (and every verify token) shares each K/V tile it loads.
//
// A CTA streams the tiles of `spc` consecutive splits through one pipeline
// (so a wave-filling grid has no per-split ramp) but keeps a separate online
// softmax per split and writes each split's partial: a split's partial is
// then the same whichever CTA computes it, and a verify row equals its decode
// step bit for bit whatever spc the two calls chose. Warp w scores and
// accumulates slots [16w, 16w + 16) of each tile; the four warps merge at
// every split end, in the K/V stage just consumed (it is refilled only at the
// next iteration). The last CTA of a (group, kv head) to finish (a ticket
// counter) merges the partials of all live splits in split order and writes
// the output; a one-split grid writes the output directly.
template <class T, int D, int MT>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(SplitArgs a) {
  using namespace mma;
  constexpr int kRows = 16 * MT;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);   // [kRows * D] swizzled
  T* k_s = q_s + kRows * D;                  // [kStages][kTile * D]
  T* v_s = k_s + kStages * kTile * D;        // [kStages][kTile * D]
  float* ml_s = reinterpret_cast<float*>(v_s + kStages * kTile * D);  // m, l: [2][kWarps][16]
  __shared__ int last_s;

  const int group = blockIdx.x, cta = blockIdx.y, kvh = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = a.n * a.G;

  // The slots any query of the call sees: [0, eff_end). Splits at or past it
  // are not live: they do not run and the merge skips them, so a grid sized
  // for more slots than the cache holds (a graph sized for its capacity
  // bucket) gives the result of a grid sized for the length. Split 0 is
  // always live (an empty cache gives zeros). Every CTA derives the same counts.
  const int len = *a.kv_length;
  int max_pos = INT_MIN;
  for (int t = 0; t < a.n; ++t) max_pos = max(max_pos, a.q_positions ? a.q_positions[t] : INT_MAX);
  const int eff_end = max_pos < INT_MAX ? min(len, max_pos + 1) : len;
  const int live = min(a.splits, max(1, eff_end > 0 ? (eff_end + a.chunk - 1) / a.chunk : 1));
  const int live_ctas = (live + a.spc - 1) / a.spc;
  if (cta >= live_ctas) return;
  const int first_split = cta * a.spc;
  const int begin = first_split * a.chunk;
  const int end = min(eff_end, min(live, first_split + a.spc) * a.chunk);
  const int ntiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int split_tiles = a.chunk / kTile;

  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k) + int64_t(kvh) * a.head_stride;
  const T* V = static_cast<const T*>(a.v) + int64_t(kvh) * a.head_stride;

  // Q rows are scattered (token-major, head-minor), one 16-byte chunk per copy.
  for (int i = tid; i < kRows * (D / 8); i += kThreads) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    const int row = group * kRows + r;
    const bool ok = row < R;
    const int64_t src = ok ? (int64_t(row / a.G) * a.H + kvh * a.G + row % a.G) * D + c : 0;
    cp_async16(q_s + swz<D>(r, c), Q + src, ok);
  }

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
  auto reset = [&] {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
      m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    }
  };
  reset();

  // Merges the four warps' state of split `split` (one M tile at a time, the
  // outputs in K/V stage `stage`, which no load targets now) and writes the
  // split's partial, or the output when the grid has one split.
  auto flush = [&](int split, int stage) {
    float* m_s = ml_s;                 // [kWarps][16]
    float* l_s = ml_s + kWarps * 16;   // [kWarps][16]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = l[mt][r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = g + 8 * r;
        if (t4 == 0) {
          m_s[warp * 16 + row] = m[mt][r];
          l_s[warp * 16 + row] = sum;
        }
        // Warps 0-1 use the K stage, 2-3 the V stage: 16 x D floats each, 2 per stage.
        float* o_w = reinterpret_cast<float*>((warp < 2 ? k_s : v_s) + stage * kTile * D) + (warp & 1) * 16 * D;
        float* dst = o_w + row * D + 2 * t4;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          dst[dt * 8] = o[mt][dt][2 * r];
          dst[dt * 8 + 1] = o[mt][dt][2 * r + 1];
        }
      }
      __syncthreads();
      for (int i = tid; i < 16 * D; i += kThreads) {
        const int r = i / D, d = i % D;
        const int row = group * kRows + 16 * mt + r;
        if (row >= R) break;  // rows are in order: the rest are past R too
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w * 16 + r]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
          for (int w = 0; w < kWarps; ++w) {
            const float* o_w = reinterpret_cast<const float*>((w < 2 ? k_s : v_s) + stage * kTile * D) +
                               (w & 1) * 16 * D;
            const float f = fast_exp2(m_s[w * 16 + r] - M);  // 0 for a warp that saw nothing
            L = fmaf(l_s[w * 16 + r], f, L);
            O = fmaf(o_w[r * D + d], f, O);
          }
        }
        const bool any = L > 0.0f;
        const int t = row / a.G, h = kvh * a.G + row % a.G;
        if (a.splits == 1) {
          store_f32(static_cast<T*>(a.out) + (int64_t(t) * a.H + h) * D + d, any ? O / L : 0.0f);
        } else {
          const int64_t out_row = (int64_t(split) * a.n + t) * a.H + h;
          a.o_part[out_row * D + d] = any ? O / L : 0.0f;
          if (d == 0) a.lse_part[out_row] = any ? M + log2f(L) : -INFINITY;
        }
      }
      __syncthreads();  // m_s, l_s and the stage are reused by the next M tile or split
    }
    reset();
  };

  const auto* qbase = reinterpret_cast<const uint16_t*>(q_s);
  for (int tile = 0; tile < ntiles; ++tile) {
    if (tile + kStages - 1 < ntiles) load_kv(tile + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();

    const int stage = tile % kStages;
    const auto* kbase = reinterpret_cast<const uint16_t*>(k_s + stage * kTile * D);
    const T* vt = v_s + stage * kTile * D;
    const int j0 = begin + tile * kTile + warp * 16;  // this warp's first slot

#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // One M tile at a time keeps only its scores live (the 32-row tile fits
      // the register file); the K fragments are re-read from shared memory.
      float s[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[4], af[4];
        ldmatrix_x4(b, kbase + swz<D>(warp * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8));
        ldmatrix_x4(af, qbase + swz<D>(16 * mt + (lane & 15), kk * 16 + (lane >> 4) * 8));
        mma16816<T>(s[0], af, b[0], b[1]);
        mma16816<T>(s[1], af, b[2], b[3]);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int slot = j0 + nt * 8 + 2 * t4 + (e & 1);
          s[nt][e] = slot <= lim[mt][e >> 1] ? s[nt][e] * a.scale_log2 : -INFINITY;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(m[mt][r], fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1])));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mu = mx == -INFINITY ? 0.0f : mx;  // a row that sees nothing yet stays at zero
        const float alpha = fast_exp2(m[mt][r] - mu);
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          s[nt][2 * r] = fast_exp2(s[nt][2 * r] - mu);
          s[nt][2 * r + 1] = fast_exp2(s[nt][2 * r + 1] - mu);
          sum += s[nt][2 * r] + s[nt][2 * r + 1];
        }
        l[mt][r] = l[mt][r] * alpha + sum;  // per-thread partial; the quad is summed at the flush
        m[mt][r] = mx;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
      }
      uint32_t pa[4];
      pa[0] = pack2<T>(s[0][0], s[0][1]);
      pa[1] = pack2<T>(s[0][2], s[0][3]);
      pa[2] = pack2<T>(s[1][0], s[1][1]);
      pa[3] = pack2<T>(s[1][2], s[1][3]);
      pv_step<T, D>(o[mt], pa, vt, warp * 16, lane);
    }
    __syncthreads();  // this stage is refilled kStages - 1 iterations from now
    if ((tile + 1) % split_tiles == 0 || tile + 1 == ntiles) flush(first_split + tile / split_tiles, stage);
  }
  cp_async_wait<0>();
  __syncthreads();
  if (ntiles == 0) flush(first_split, 0);  // split 0 of a call whose queries see nothing: zeros
  if (a.splits == 1) return;

  // Publish the partials, then take a ticket: the CTA that draws the last one
  // sees every live CTA's partials and merges them.
  bool last = true;
  if (live_ctas > 1) {
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      int* counter = a.counters + kvh * gridDim.x + group;
      const int prev = atomicAdd(counter, 1);
      last_s = prev == live_ctas - 1;
      if (last_s) atomicExch(counter, 0);  // ready for the next call or graph replay
    }
    __syncthreads();
    last = last_s;
    if (!last) return;
    __threadfence();
  }

  // Merge the live splits of this CTA's rows: M and the weight sum W per row
  // (a warp per row, lanes strided over the splits), then out = sum_s w_s o_s / W
  // in split order. Splits a row does not see weigh exactly 0, so a verify row
  // sums the same terms as its decode step.
  float* M_s = reinterpret_cast<float*>(smem_raw);  // [kRows]
  float* W_s = M_s + kRows;                          // [kRows]
  float* w_s = W_s + kRows;                          // [kRows][kMergeBatch]
  for (int r = warp; r < kRows; r += kWarps) {
    const int row = group * kRows + r;
    float M = -INFINITY, W = 0.0f;
    if (row < R) {
      const int64_t prow = int64_t(row / a.G) * a.H + kvh * a.G + row % a.G;
      const int64_t rows = int64_t(a.n) * a.H;
      for (int s = lane; s < live; s += 32) M = fmaxf(M, __ldcg(a.lse_part + s * rows + prow));
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
      if (M != -INFINITY)
        for (int s = lane; s < live; s += 32) W += exp2f(__ldcg(a.lse_part + s * rows + prow) - M);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) W += __shfl_xor_sync(0xffffffffu, W, off);
    }
    if (lane == 0) M_s[r] = M, W_s[r] = W;
  }
  constexpr int kEpt = kRows * D / kThreads;  // output elements per thread
  float acc[kEpt];
#pragma unroll
  for (int k = 0; k < kEpt; ++k) acc[k] = 0.0f;
  const int64_t rows = int64_t(a.n) * a.H;
  for (int s0 = 0; s0 < live; s0 += kMergeBatch) {
    const int nb = min(kMergeBatch, live - s0);
    __syncthreads();  // M_s / W_s written; the previous batch's weights consumed
    for (int i = tid; i < kRows * kMergeBatch; i += kThreads) {
      const int r = i / kMergeBatch, j = i % kMergeBatch;
      const int row = group * kRows + r;
      float w = 0.0f;
      if (row < R && j < nb && M_s[r] != -INFINITY) {
        const int64_t prow = int64_t(row / a.G) * a.H + kvh * a.G + row % a.G;
        w = exp2f(__ldcg(a.lse_part + (s0 + j) * rows + prow) - M_s[r]);
      }
      w_s[i] = w;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kEpt; ++k) {
      const int e = tid + k * kThreads, r = e / D, d = e % D;
      const int row = group * kRows + r;
      if (row >= R) continue;
      const int64_t prow = int64_t(row / a.G) * a.H + kvh * a.G + row % a.G;
      const float* src = a.o_part + (int64_t(s0) * rows + prow) * D + d;
      const float* w = w_s + r * kMergeBatch;
      float x = acc[k];
#pragma unroll 8
      for (int j = 0; j < nb; ++j) x = fmaf(w[j], __ldcg(src + int64_t(j) * rows * D), x);
      acc[k] = x;
    }
  }
#pragma unroll
  for (int k = 0; k < kEpt; ++k) {
    const int e = tid + k * kThreads, r = e / D, d = e % D;
    const int row = group * kRows + r;
    if (row >= R) continue;
    const int64_t prow = int64_t(row / a.G) * a.H + kvh * a.G + row % a.G;
    const float W = W_s[r];
    store_f32(static_cast<T*>(a.out) + prow * D + d, W > 0.0f ? acc[k] / W : 0.0f);
  }
}

int sm_count() {
  static int n = [] {
    int dev = 0, c = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev));
    return c > 0 ? c : 1;
  }();
  return n;
}

// Raises the shared-memory limit of an instantiation once per device (so the
// launch itself stays cheap) and returns how many of its CTAs fit on one SM.
template <class T, int D, int MT> int prepare_split_kernel() {
  constexpr size_t smem = split_smem_bytes<D, MT>();
  static std::atomic<int> per_sm[64];  // 0: not yet queried on that device
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int c = per_sm[dev & 63].load(std::memory_order_acquire);
  if (c == 0) {
    auto* kern = attention_split_kernel<T, D, MT>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c, kern, kThreads, smem));
    c = c > 0 ? c : 1;
    per_sm[dev & 63].store(c, std::memory_order_release);
  }
  return c;
}

int64_t bound_of(const AttentionDecodeParams& p) {
  const int64_t b = p.max_length > 0 ? p.max_length : p.capacity;
  return std::max<int64_t>(1, b < p.capacity ? b : p.capacity);
}

// One m16 tile per CTA for up to 16 query rows per kv head, else two (32 rows share each K/V tile).
int m_tiles_of(const AttentionDecodeParams& p) { return p.n * (p.num_heads / p.num_kv_heads) > 16 ? 2 : 1; }
int row_groups_of(const AttentionDecodeParams& p) {
  const int64_t rows = p.n * (p.num_heads / p.num_kv_heads), per = 16 * m_tiles_of(p);
  return int((rows + per - 1) / per);
}

int ctas_per_sm(const AttentionDecodeParams& p) {
  const int mt = m_tiles_of(p);
  int c = 1;
  TF_DISPATCH_HALF(p.dtype, T, {
    if (p.head_dim == 64) c = mt == 1 ? prepare_split_kernel<T, 64, 1>() : prepare_split_kernel<T, 64, 2>();
    else c = mt == 1 ? prepare_split_kernel<T, 128, 1>() : prepare_split_kernel<T, 128, 2>();
  });
  return c;
}

// The grid of a call: `splits` partials per row of `chunk` slots each, `spc`
// consecutive splits per CTA. Depends on the host-known bound only (never on
// the device length), so a captured launch stays valid as the cache grows.
struct Plan {
  int splits = 1, chunk = kTile, spc = 1;
  int ctas_y() const { return (splits + spc - 1) / spc; }
};

constexpr int64_t kMinSplitTiles = 4;  // automatic splits: at least this many tiles each (ramp amortised)
constexpr int64_t kRampTiles = 2;      // a CTA's pipeline fill, in tile times, for the wave cost model

// Splits per CTA for fixed-size splits: the fewest CTA waves times the
// longest CTA (its tiles plus a ramp), i.e. whole waves of equal CTAs.
int pick_splits_per_cta(int splits, int64_t split_tiles, int64_t row_ctas, int64_t wave) {
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int spc = 1; spc <= splits; ++spc) {
    const int64_t cy = (splits + spc - 1) / spc;
    if (spc > 1 && cy == (splits + spc - 2) / (spc - 1)) continue;  // same grid as spc - 1, longer CTAs
    const int64_t waves = (cy * row_ctas + wave - 1) / wave;
    const int64_t cost = waves * (spc * split_tiles + kRampTiles);
    if (cost < best_cost) best = spc, best_cost = cost;
    if (waves == 1) break;  // more splits per CTA only lengthen the one wave
  }
  return best;
}

Plan plan_of(const AttentionDecodeParams& p) {
  const int64_t bound = bound_of(p);
  const int64_t tiles = (bound + kTile - 1) / kTile;
  const int64_t kvh = p.num_kv_heads > 0 ? p.num_kv_heads : 1;
  Plan pl;
  if (p.split_slots > 0) {
    pl.chunk = int(p.split_slots);
    pl.splits = int((bound + p.split_slots - 1) / p.split_slots);
    if (p.splits_per_cta > 0) {
      pl.spc = std::min(p.splits_per_cta, pl.splits);
    } else if (pl.splits > 1) {
      const int64_t wave = int64_t(sm_count()) * ctas_per_sm(p);
      pl.spc = pick_splits_per_cta(pl.splits, p.split_slots / kTile, int64_t(row_groups_of(p)) * kvh, wave);
    }
    return pl;
  }
  int64_t s = p.num_splits;
  if (s <= 0) {
    // One wave: as many splits as leave every CTA slot of the GPU one CTA,
    // unless the splits would get shorter than kMinSplitTiles.
    const int64_t wave = int64_t(sm_count()) * ctas_per_sm(p);
    s = std::max<int64_t>(1, wave / (int64_t(row_groups_of(p)) * kvh));
    s = std::min(s, std::max<int64_t>(1, tiles / kMinSplitTiles));
  }
  s = std::max<int64_t>(1, std::min(s, tiles));
  const int64_t per = (tiles + s - 1) / s;
  pl.chunk = int(per * kTile);
  pl.splits = int((bound + pl.chunk - 1) / pl.chunk);  // no split is empty by construction
  return pl;
}

size_t counters_offset_floats(const AttentionDecodeParams& p, int splits) {
  return size_t(splits) * size_t(p.n) * size_t(p.num_heads) * size_t(p.head_dim + 1);
}

template <class T, int D, int MT>
void launch_split(const SplitArgs& a, int groups, int ctas_y, int kv_heads, cudaStream_t stream) {
  prepare_split_kernel<T, D, MT>();
  attention_split_kernel<T, D, MT><<<dim3(unsigned(groups), unsigned(ctas_y), unsigned(kv_heads)), kThreads,
                                     split_smem_bytes<D, MT>(), stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int attention_decode_num_splits(const AttentionDecodeParams& p) { return plan_of(p).splits; }
int attention_decode_splits_per_cta(const AttentionDecodeParams& p) { return plan_of(p).spc; }

size_t attention_decode_workspace_bytes(const AttentionDecodeParams& p) {
  // The partials, then one ticket counter per (kv head, row group): at most n * heads of them.
  return sizeof(float) * counters_offset_floats(p, attention_decode_num_splits(p)) +
         sizeof(int32_t) * size_t(p.n) * size_t(p.num_heads);
}

void attention_decode(const AttentionDecodeParams& p, cudaStream_t stream) {
  TF_CHECK(p.n >= 1 && p.n <= 32, "cuda::attention_decode: " << p.n << " query tokens (need 1..32)");
  TF_CHECK(p.head_dim == 64 || p.head_dim == 128, "cuda::attention_decode: head_dim " << p.head_dim
                                                                                       << " (need 64 or 128)");
  TF_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
           "cuda::attention_decode: " << p.num_heads << " heads is not a multiple of " << p.num_kv_heads
                                      << " kv heads");
  TF_CHECK(p.q && p.k_cache && p.v_cache && p.out && p.kv_length && p.workspace && p.capacity > 0,
           "cuda::attention_decode: null pointer or zero capacity");
  TF_CHECK(p.capacity < (int64_t(1) << 31) && p.num_kv_heads <= 65535,
           "cuda::attention_decode: capacity " << p.capacity << " or " << p.num_kv_heads << " kv heads too large");
  TF_CHECK(p.split_slots >= 0 && p.split_slots % kTile == 0,
           "cuda::attention_decode: split_slots " << p.split_slots << " must be a multiple of " << kTile);
  const int64_t G = p.num_heads / p.num_kv_heads;
  const int64_t hs = p.head_stride > 0 ? p.head_stride : p.capacity * p.head_dim;
  const int64_t ts = p.token_stride > 0 ? p.token_stride : p.head_dim;
  TF_CHECK(hs % 8 == 0 && ts % 8 == 0 &&
               ((reinterpret_cast<uintptr_t>(p.k_cache) | reinterpret_cast<uintptr_t>(p.v_cache) |
                 reinterpret_cast<uintptr_t>(p.q)) & 15) == 0,
           "cuda::attention_decode: q and KV must be 16-byte aligned with strides a multiple of 8 elements");
  const Plan pl = plan_of(p);
  TF_CHECK(pl.ctas_y() <= 65535, "cuda::attention_decode: " << pl.ctas_y() << " split CTAs (at most 65535)");
  const int64_t rows = p.n * p.num_heads;
  const int mt = m_tiles_of(p), groups = row_groups_of(p);
  SplitArgs a;
  a.q = p.q;
  a.k = p.k_cache;
  a.v = p.v_cache;
  a.kv_length = p.kv_length;
  a.q_positions = p.q_positions;
  a.out = p.out;
  a.o_part = p.workspace;
  a.lse_part = p.workspace + size_t(pl.splits) * size_t(rows) * size_t(p.head_dim);
  a.counters = reinterpret_cast<int*>(p.workspace + counters_offset_floats(p, pl.splits));
  a.n = int(p.n);
  a.H = int(p.num_heads);
  a.G = int(G);
  a.head_stride = hs;
  a.token_stride = ts;
  a.chunk = pl.chunk;
  a.splits = pl.splits;
  a.spc = pl.spc;
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  // The tickets of a grid with several CTAs per row group must start at zero;
  // each call leaves them at zero, so a caller that keeps its workspace may skip this.
  if (pl.ctas_y() > 1 && !p.counters_zeroed)
    CUDA_CHECK(cudaMemsetAsync(a.counters, 0, sizeof(int) * size_t(groups) * size_t(p.num_kv_heads), stream));
  TF_DISPATCH_HALF(p.dtype, T, {
    if (p.head_dim == 64) {
      if (mt == 1) launch_split<T, 64, 1>(a, groups, pl.ctas_y(), int(p.num_kv_heads), stream);
      else launch_split<T, 64, 2>(a, groups, pl.ctas_y(), int(p.num_kv_heads), stream);
    } else {
      if (mt == 1) launch_split<T, 128, 1>(a, groups, pl.ctas_y(), int(p.num_kv_heads), stream);
      else launch_split<T, 128, 2>(a, groups, pl.ctas_y(), int(p.num_kv_heads), stream);
    }
  });
}

}  // namespace tf::cuda
