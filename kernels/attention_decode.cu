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
  float* o_part;    // [splits, n, H, D]
  float* lse_part;  // [splits, n, H] (log2 domain)
  int n, H, G;      // G = heads per kv head
  int64_t head_stride, token_stride;
  int chunk;        // slots per split, a multiple of kTile
  float scale_log2;
};

template <int D, int MT> constexpr size_t split_smem_bytes() {
  constexpr int rows = 16 * MT;
  const size_t tiles = sizeof(uint16_t) * (size_t(rows) * D + size_t(kStages) * 2 * kTile * D);
  const size_t merge = sizeof(float) * size_t(kWarps) * rows * (D + 2);
  return tiles > merge ? tiles : merge;
}

// grid = (row groups, splits, kv heads); block = 4 warps. Query row r of kv
// head kvh is token r / G, head kvh * G + r % G; the CTA takes rows
// [16 MT group, 16 MT (group + 1)) as MT mma M tiles, so the whole GQA group
// (and every verify token) shares each K/V tile it loads. The groups of one
// split sit next to each other in the grid and read the same tiles through L2.
// Warp w scores and accumulates slots [16w, 16w + 16) of each tile with its
// own online softmax; the four warps merge in shared memory at the end.
template <class T, int D, int MT>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(SplitArgs a) {
  using namespace mma;
  constexpr int kRows = 16 * MT;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);   // [kRows * D] swizzled
  T* k_s = q_s + kRows * D;                  // [kStages][kTile * D]
  T* v_s = k_s + kStages * kTile * D;        // [kStages][kTile * D]

  const int group = blockIdx.x, split = blockIdx.y, kvh = blockIdx.z;
  // A grid sized for more slots than the cache holds (a captured graph sized
  // for its capacity bucket): splits past the length do nothing, and the
  // combine reads only the splits below it, so the result is the one of a
  // grid sized for the length. Split 0 always runs (an empty cache gives zeros).
  if (split > 0 && split * a.chunk >= *a.kv_length) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = a.n * a.G;
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
    __syncthreads();

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
    __syncthreads();  // this stage is refilled kStages - 1 iterations from now
  }
  cp_async_wait<0>();
  __syncthreads();  // tiles are dead: reuse shared memory for the merge

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
  __syncthreads();
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
    const int64_t out_row = (int64_t(split) * a.n + t) * a.H + h;
    a.o_part[out_row * D + d] = any ? O / L : 0.0f;
    if (d == 0) a.lse_part[out_row] = any ? M + log2f(L) : -INFINITY;
  }
}

// grid = n * H rows, block = 4 * D threads: LSE-weighted merge of the splits.
// Thread (sg, d) sums splits sg, sg + 4, ... of dim d so that four independent
// loads per dim are in flight; the four partial sums meet in shared memory.
constexpr int kCombineGroups = 4;
template <class T>
__global__ void attention_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                         T* __restrict__ out, int grid_splits, int rows, int D,
                                         const int32_t* __restrict__ kv_length, int chunk) {
  __shared__ float part[kCombineGroups][128];
  const int row = blockIdx.x, tid = threadIdx.x, sg = tid / D, d = tid % D;
  // The splits that ran: those starting below the device length (at least one).
  const int live = max(1, (*kv_length + chunk - 1) / chunk);
  const int splits = min(grid_splits, live);
  float mx = -INFINITY;
  for (int s = tid; s < splits; s += blockDim.x) mx = fmaxf(mx, lse_part[int64_t(s) * rows + row]);
  const float M = block_max(mx);
  float acc = 0.0f, wsum = 0.0f;
  if (M != -INFINITY) {
#pragma unroll 4
    for (int s = sg; s < splits; s += kCombineGroups) {
      const float w = exp2f(lse_part[int64_t(s) * rows + row] - M);  // 0 for an empty split
      wsum += w;
      acc = fmaf(w, o_part[(int64_t(s) * rows + row) * D + d], acc);
    }
  }
  part[sg][d] = acc;
  // Every thread of a group has the same wsum; the groups' sums add up via the block reduction.
  const float W = block_sum(d == 0 ? wsum : 0.0f);
  __syncthreads();
  if (sg == 0) {
    float o = 0.0f;
#pragma unroll
    for (int g = 0; g < kCombineGroups; ++g) o += part[g][d];
    store_f32(out + int64_t(row) * D + d, W > 0.0f ? o / W : 0.0f);
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

int64_t bound_of(const AttentionDecodeParams& p) {
  const int64_t b = p.max_length > 0 ? p.max_length : p.capacity;
  return b < p.capacity ? b : p.capacity;
}

// Slots per split for `splits` splits over the bound.
int chunk_of(const AttentionDecodeParams& p, int splits) {
  const int64_t tiles = (bound_of(p) + kTile - 1) / kTile;
  const int64_t per = (tiles + splits - 1) / splits;
  return int((per > 0 ? per : 1) * kTile);
}

template <class T, int D, int MT>
void launch_split(const SplitArgs& a, int groups, int splits, int kv_heads, cudaStream_t stream) {
  constexpr size_t smem = split_smem_bytes<D, MT>();
  auto* kern = attention_split_kernel<T, D, MT>;
  // Raise the shared-memory limit once per device and instantiation, so the launch itself stays cheap.
  static std::atomic<uint64_t> attr_set{0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attr_set.fetch_or(bit, std::memory_order_release);
  }
  kern<<<dim3(unsigned(groups), unsigned(splits), unsigned(kv_heads)), kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int attention_decode_num_splits(const AttentionDecodeParams& p) {
  if (p.split_slots > 0) return int((std::max<int64_t>(1, bound_of(p)) + p.split_slots - 1) / p.split_slots);
  const int64_t tiles = (bound_of(p) + kTile - 1) / kTile;
  int64_t s = p.num_splits;
  if (s <= 0) {
    // About four KV streams per SM (two CTAs resident per SM, two waves), each
    // at least 8 tiles long so the pipeline start-up is amortised.
    const int64_t kvh = p.num_kv_heads > 0 ? p.num_kv_heads : 1;
    s = (4 * int64_t(sm_count()) + kvh - 1) / kvh;
    const int64_t min_tiles = 8;
    if (s > tiles / min_tiles) s = tiles / min_tiles;
  }
  if (s > tiles) s = tiles;
  if (s < 1) s = 1;
  // Re-derive from the chunk so that no split is empty by construction.
  const int chunk = chunk_of(p, int(s));
  const int64_t bound = bound_of(p) > 0 ? bound_of(p) : 1;
  return int((bound + chunk - 1) / chunk);
}

size_t attention_decode_workspace_bytes(const AttentionDecodeParams& p) {
  return sizeof(float) * size_t(attention_decode_num_splits(p)) * size_t(p.n) * size_t(p.num_heads) *
         size_t(p.head_dim + 1);
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
  const int64_t G = p.num_heads / p.num_kv_heads;
  const int64_t R = p.n * G;
  const int64_t hs = p.head_stride > 0 ? p.head_stride : p.capacity * p.head_dim;
  const int64_t ts = p.token_stride > 0 ? p.token_stride : p.head_dim;
  TF_CHECK(hs % 8 == 0 && ts % 8 == 0 &&
               ((reinterpret_cast<uintptr_t>(p.k_cache) | reinterpret_cast<uintptr_t>(p.v_cache) |
                 reinterpret_cast<uintptr_t>(p.q)) & 15) == 0,
           "cuda::attention_decode: q and KV must be 16-byte aligned with strides a multiple of 8 elements");
  const int splits = attention_decode_num_splits(p);
  TF_CHECK(splits <= 65535, "cuda::attention_decode: " << splits << " splits (at most 65535)");
  const int64_t rows = p.n * p.num_heads;
  SplitArgs a;
  a.q = p.q;
  a.k = p.k_cache;
  a.v = p.v_cache;
  a.kv_length = p.kv_length;
  a.q_positions = p.q_positions;
  a.o_part = p.workspace;
  a.lse_part = p.workspace + size_t(splits) * size_t(rows) * size_t(p.head_dim);
  a.n = int(p.n);
  a.H = int(p.num_heads);
  a.G = int(G);
  a.head_stride = hs;
  a.token_stride = ts;
  TF_CHECK(p.split_slots >= 0 && p.split_slots % kTile == 0,
           "cuda::attention_decode: split_slots " << p.split_slots << " must be a multiple of " << kTile);
  a.chunk = p.split_slots > 0 ? int(p.split_slots) : chunk_of(p, splits);
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  // One m16 tile per CTA for up to 16 query rows per kv head, else two (32 rows share each K/V tile).
  const int mt = R > 16 ? 2 : 1;
  const int groups = int((R + 16 * mt - 1) / (16 * mt));
  TF_DISPATCH_HALF(p.dtype, T, {
    if (p.head_dim == 64) {
      if (mt == 1) launch_split<T, 64, 1>(a, groups, splits, int(p.num_kv_heads), stream);
      else launch_split<T, 64, 2>(a, groups, splits, int(p.num_kv_heads), stream);
    } else {
      if (mt == 1) launch_split<T, 128, 1>(a, groups, splits, int(p.num_kv_heads), stream);
      else launch_split<T, 128, 2>(a, groups, splits, int(p.num_kv_heads), stream);
    }
    attention_combine_kernel<T><<<unsigned(rows), unsigned(kCombineGroups * p.head_dim), 0, stream>>>(
        a.o_part, a.lse_part, static_cast<T*>(p.out), splits, int(rows), int(p.head_dim), p.kv_length, a.chunk);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
