#include "common.cuh"
#include "pdl.cuh"
#include "rope.cuh"
#include "rope_tile.cuh"

namespace tf::cuda {
namespace {

// grid.x = token, grid.y covers the heads: q heads, then k heads, then v heads
// (when v is given); threadIdx.x runs over half the head, threadIdx.y over
// heads. The row itself is rope_qkv_row (rope_tile.cuh), shared with the
// persistent step kernel. q_out, k_out and v_out may be their inputs (in place).
template <class T>
__global__ void rope_qkv_kernel(RopeQkvParams p) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  const int64_t h = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  rope_qkv_row<T, LoadPlain>(p, blockIdx.x, h, int(threadIdx.x), int(blockDim.x));
}

// Prefill chunks (RopeQkvParams::vec8): a thread owns 8 consecutive pairs
// (j .. j + 7, j + half .. j + half + 7) of one (token, head) row, as two
// 16-byte loads and two float4 pairs of the tables. Each pair is rope_pair, as
// in the kernel above, so the two give the same bits. Heads as there: q, k, v.
template <class T>
__global__ void rope_qkv_vec8_kernel(RopeQkvParams p, int64_t heads) {
  const int64_t D = p.head_dim, half = D / 2, per_row = half / 8, qh = p.q_heads, kh = p.kv_heads;
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = g / per_row;
  if (row >= p.n * heads) return;
  const int64_t t = row / heads, h = row % heads, j = (g % per_row) * 8;
  const int32_t r = p.rows[t];
  const bool ok = r >= 0 && r < p.table_rows;
  float c[8], s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) c[i] = s[i] = NAN;
  if (ok) {
    const float4* cr = reinterpret_cast<const float4*>(p.cos + int64_t(r) * half + j);
    const float4* sr = reinterpret_cast<const float4*>(p.sin + int64_t(r) * half + j);
    const float4 c0 = cr[0], c1 = cr[1], s0 = sr[0], s1 = sr[1];
    c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
    s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w, s[4] = s1.x, s[5] = s1.y, s[6] = s1.z, s[7] = s1.w;
  }
  const T* src;
  T* dst;
  bool rotate = true;
  if (h < qh) {
    src = static_cast<const T*>(p.q) + t * p.q_ld + h * D;
    dst = static_cast<T*>(p.q_out) + (t * qh + h) * D;
  } else {
    const int64_t slot = p.slots ? int64_t(p.slots[t]) : t;
    if (slot < 0 || slot >= p.slot_limit) return;  // never write outside the destination
    const bool is_k = h < qh + kh;
    const int64_t hk = is_k ? h - qh : h - qh - kh;
    src = is_k ? static_cast<const T*>(p.k) + t * p.k_ld + hk * D : static_cast<const T*>(p.v) + t * p.v_ld + hk * D;
    dst = static_cast<T*>(is_k ? p.k_out : p.v_out) + hk * p.out_head_stride + slot * p.out_slot_stride;
    rotate = is_k;
  }
  uint4 a = *reinterpret_cast<const uint4*>(src + j), b = *reinterpret_cast<const uint4*>(src + j + half);
  if (rotate) {
    const T* ae = reinterpret_cast<const T*>(&a);
    const T* be = reinterpret_cast<const T*>(&b);
    uint4 ya, yb;
    T* yae = reinterpret_cast<T*>(&ya);
    T* ybe = reinterpret_cast<T*>(&yb);
#pragma unroll
    for (int i = 0; i < 8; ++i) rope_pair(to_f32(ae[i]), to_f32(be[i]), c[i], s[i], yae[i], ybe[i]);
    a = ya, b = yb;
  }
  *reinterpret_cast<uint4*>(dst + j) = a;
  *reinterpret_cast<uint4*>(dst + j + half) = b;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether p can take the 16-byte kernel: every row start and stride a multiple of 8 elements
// (16 bytes), the tables' rows of a multiple of 4 floats.
bool vec8_fits(const RopeQkvParams& p) {
  const int64_t half = p.head_dim / 2;
  if (half % 8 != 0 || p.q_ld % 8 || !aligned16(p.q) || !aligned16(p.q_out) || !aligned16(p.cos) ||
      !aligned16(p.sin))
    return false;
  if (p.kv_heads == 0) return true;
  if (p.k_ld % 8 || p.out_head_stride % 8 || p.out_slot_stride % 8 || !aligned16(p.k) || !aligned16(p.k_out))
    return false;
  return !p.v || (p.v_ld % 8 == 0 && aligned16(p.v) && aligned16(p.v_out));
}

}  // namespace

void rope_qkv(const RopeQkvParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.q_out && p.cos && p.sin && p.rows,
           "cuda::rope_qkv: bad params head_dim=" << p.head_dim);
  TF_CHECK(p.kv_heads == 0 || (p.k && p.k_out && (!p.v || p.v_out)), "cuda::rope_qkv: k/v without a destination");
  TF_CHECK(is_half_dtype(p.dtype), "cuda::rope_qkv: dtype must be f16/bf16");
  const int64_t heads = p.q_heads + p.kv_heads + (p.v ? p.kv_heads : 0);
  if (p.n == 0 || heads == 0) return;
  const int64_t half = p.head_dim / 2;
  if (p.vec8 && vec8_fits(p)) {
    const int threads = 256;
    const int64_t total = p.n * heads * (half / 8);
    TF_DISPATCH_HALF(p.dtype, T, {
      rope_qkv_vec8_kernel<T><<<unsigned((total + threads - 1) / threads), threads, 0, stream>>>(p, heads);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int tx = half >= 64 ? 64 : 32;
  const int ty = 256 / tx;
  dim3 block(tx, ty);
  dim3 grid(unsigned(p.n), unsigned((heads + ty - 1) / ty));
  TF_DISPATCH_HALF(p.dtype, T, { launch_step(rope_qkv_kernel<T>, grid, block, 0, stream, p); });
  CUDA_CHECK_LAUNCH();
}

void rope(const RopeParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.cos && p.sin && p.positions,
           "cuda::rope: bad params head_dim=" << p.head_dim);
  const int64_t kh = p.k ? p.k_heads : 0;
  RopeQkvParams r;
  r.q = r.q_out = p.q, r.q_ld = p.q_heads * p.head_dim;
  r.k = r.k_out = p.k, r.k_ld = kh * p.head_dim;
  r.out_head_stride = p.head_dim, r.out_slot_stride = kh * p.head_dim, r.slot_limit = p.n;
  r.cos = p.cos, r.sin = p.sin, r.rows = p.positions, r.table_rows = p.table_rows;
  r.n = p.n, r.q_heads = p.q_heads, r.kv_heads = kh, r.head_dim = p.head_dim, r.dtype = p.dtype;
  rope_qkv(r, stream);
}

}  // namespace tf::cuda
