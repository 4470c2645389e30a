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

}  // namespace

void rope_qkv(const RopeQkvParams& p, cudaStream_t stream) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.q && p.q_out && p.cos && p.sin && p.rows,
           "cuda::rope_qkv: bad params head_dim=" << p.head_dim);
  TF_CHECK(p.kv_heads == 0 || (p.k && p.k_out && (!p.v || p.v_out)), "cuda::rope_qkv: k/v without a destination");
  TF_CHECK(is_half_dtype(p.dtype), "cuda::rope_qkv: dtype must be f16/bf16");
  const int64_t heads = p.q_heads + p.kv_heads + (p.v ? p.kv_heads : 0);
  if (p.n == 0 || heads == 0) return;
  const int64_t half = p.head_dim / 2;
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
