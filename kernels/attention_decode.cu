#include <climits>

#include "attention_decode.cuh"
#include "common.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;   // warps per split CTA
constexpr int kTile = 32;   // KV slots per shared-memory tile (one per lane when scoring)
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

// grid = (splits, kv_heads); block = kWarps warps. Query row r of the CTA is
// token r / G, head kvh * G + r % G; warp w owns rows [w * RPW, (w + 1) * RPW).
template <class T, int D, int RPW>
__global__ void __launch_bounds__(kWarps * 32) attention_split_kernel(SplitArgs a) {
  constexpr int PL = D / 32;  // output dims per lane
  extern __shared__ float smem[];
  float* q_s = smem;                       // [kWarps * RPW][D], pre-scaled by scale * log2(e)
  float* k_s = q_s + kWarps * RPW * D;     // [kTile][D + 1]
  float* v_s = k_s + kTile * (D + 1);      // [kTile][D]

  const int split = blockIdx.x, kvh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int R = a.n * a.G;
  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k) + int64_t(kvh) * a.head_stride;
  const T* V = static_cast<const T*>(a.v) + int64_t(kvh) * a.head_stride;

  for (int idx = tid; idx < kWarps * RPW * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    float x = 0.0f;
    if (r < R) {
      const int t = r / a.G, h = kvh * a.G + r % a.G;
      x = to_f32(Q[(int64_t(t) * a.H + h) * D + d]) * a.scale_log2;
    }
    q_s[idx] = x;
  }

  const int len = *a.kv_length;
  int max_pos = INT_MIN;
  int lim[RPW];
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr) {
    const int r = warp * RPW + rr;
    lim[rr] = INT_MIN;
    if (r < R) lim[rr] = a.q_positions ? a.q_positions[r / a.G] : INT_MAX;
  }
  for (int t = 0; t < a.n; ++t) max_pos = max(max_pos, a.q_positions ? a.q_positions[t] : INT_MAX);
  const int begin = split * a.chunk;
  int end = min(len, begin + a.chunk);
  if (max_pos < INT_MAX) end = min(end, max_pos + 1);

  float acc[RPW][PL];
  float m[RPW], l[RPW];
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < PL; ++i) acc[rr][i] = 0.0f;
  }

  for (int j0 = begin; j0 < end; j0 += kTile) {
    __syncthreads();  // previous tile consumed (and q_s written, first time)
    for (int idx = tid; idx < kTile * (D / 8); idx += blockDim.x) {
      const int tok = idx / (D / 8), c = (idx % (D / 8)) * 8;
      const int slot = j0 + tok;
      float kv[8], vv[8];
      if (slot < end) {
        load8_f32(K + int64_t(slot) * a.token_stride + c, kv);
        load8_f32(V + int64_t(slot) * a.token_stride + c, vv);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kv[i] = vv[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        k_s[tok * (D + 1) + c + i] = kv[i];
        v_s[tok * D + c + i] = vv[i];
      }
    }
    __syncthreads();
    const int slot = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) {
      const int r = warp * RPW + rr;
      if (r >= R) break;  // warp-uniform
      const float* qr = q_s + r * D;
      const float* kr = k_s + lane * (D + 1);
      float s = 0.0f;
#pragma unroll 16
      for (int d = 0; d < D; ++d) s = fmaf(qr[d], kr[d], s);
      const bool valid = slot < end && slot <= lim[rr];
      s = valid ? s : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(s));
      if (m_new == -INFINITY) continue;  // this row sees nothing yet (warp-uniform)
      const float p = valid ? exp2f(s - m_new) : 0.0f;
      const float alpha = exp2f(m[rr] - m_new);  // 0 when m was -inf
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int i = 0; i < PL; ++i) acc[rr][i] *= alpha;
#pragma unroll 8
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int i = 0; i < PL; ++i) acc[rr][i] = fmaf(pj, v_s[j * D + lane + 32 * i], acc[rr][i]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < RPW; ++rr) {
    const int r = warp * RPW + rr;
    if (r >= R) break;
    const int t = r / a.G, h = kvh * a.G + r % a.G;
    const int64_t row = (int64_t(split) * a.n + t) * a.H + h;
    const bool any = l[rr] > 0.0f;
    const float inv = any ? 1.0f / l[rr] : 0.0f;
#pragma unroll
    for (int i = 0; i < PL; ++i) a.o_part[row * D + lane + 32 * i] = acc[rr][i] * inv;
    if (lane == 0) a.lse_part[row] = any ? m[rr] + log2f(l[rr]) : -INFINITY;
  }
}

// grid = n * H rows, block = D threads: LSE-weighted merge of the splits.
template <class T>
__global__ void attention_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                         T* __restrict__ out, int splits, int rows, int D) {
  const int row = blockIdx.x, d = threadIdx.x;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, lse_part[int64_t(s) * rows + row]);
  float o = 0.0f;
  if (M != -INFINITY) {
    float wsum = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float lse = lse_part[int64_t(s) * rows + row];
      if (lse == -INFINITY) continue;
      const float w = exp2f(lse - M);
      wsum += w;
      o = fmaf(w, o_part[(int64_t(s) * rows + row) * D + d], o);
    }
    o /= wsum;
  }
  store_f32(out + int64_t(row) * D + d, o);
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

template <class T, int D, int RPW>
void launch_split(const SplitArgs& a, int splits, int kv_heads, cudaStream_t stream) {
  const size_t smem = sizeof(float) * (size_t(kWarps) * RPW * D + size_t(kTile) * (D + 1) + size_t(kTile) * D);
  auto* kern = attention_split_kernel<T, D, RPW>;
  CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kern<<<dim3(unsigned(splits), unsigned(kv_heads)), kWarps * 32, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <class T, int D>
void dispatch_rpw(const SplitArgs& a, int rpw, int splits, int kv_heads, cudaStream_t stream) {
  switch (rpw) {
    case 1: return launch_split<T, D, 1>(a, splits, kv_heads, stream);
    case 2: return launch_split<T, D, 2>(a, splits, kv_heads, stream);
    case 4: return launch_split<T, D, 4>(a, splits, kv_heads, stream);
    case 8: return launch_split<T, D, 8>(a, splits, kv_heads, stream);
    case 16: return launch_split<T, D, 16>(a, splits, kv_heads, stream);
    case 32: return launch_split<T, D, 32>(a, splits, kv_heads, stream);
  }
  TF_FAIL("cuda::attention_decode: " << rpw << " rows per warp is not supported");
}

}  // namespace

int attention_decode_num_splits(const AttentionDecodeParams& p) {
  const int64_t tiles = (bound_of(p) + kTile - 1) / kTile;
  int64_t s = p.num_splits;
  if (s <= 0) {
    const int64_t kvh = p.num_kv_heads > 0 ? p.num_kv_heads : 1;
    s = (2 * int64_t(sm_count()) + kvh - 1) / kvh;  // about two CTAs per SM
    const int64_t min_tiles = 4;                       // keep each split's K/V stream long enough
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
  const int64_t G = p.num_heads / p.num_kv_heads;
  const int64_t R = p.n * G;
  TF_CHECK(R <= 32 * kWarps, "cuda::attention_decode: " << R << " query rows per kv head (n * heads/kv_heads) > "
                                                        << 32 * kWarps);
  const int64_t hs = p.head_stride > 0 ? p.head_stride : p.capacity * p.head_dim;
  const int64_t ts = p.token_stride > 0 ? p.token_stride : p.head_dim;
  TF_CHECK(hs % 8 == 0 && ts % 8 == 0 && (reinterpret_cast<uintptr_t>(p.k_cache) & 15) == 0 &&
               (reinterpret_cast<uintptr_t>(p.v_cache) & 15) == 0,
           "cuda::attention_decode: KV must be 16-byte aligned with strides a multiple of 8 elements");
  const int splits = attention_decode_num_splits(p);
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
  a.chunk = chunk_of(p, splits);
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  int rpw = 1;
  while (rpw * kWarps < R) rpw *= 2;
  TF_DISPATCH_HALF(p.dtype, T, {
    if (p.head_dim == 64)
      dispatch_rpw<T, 64>(a, rpw, splits, int(p.num_kv_heads), stream);
    else
      dispatch_rpw<T, 128>(a, rpw, splits, int(p.num_kv_heads), stream);
    attention_combine_kernel<T><<<unsigned(rows), unsigned(p.head_dim), 0, stream>>>(
        a.o_part, a.lse_part, static_cast<T*>(p.out), splits, int(rows), int(p.head_dim));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
