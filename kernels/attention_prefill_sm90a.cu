// Causal prefill attention on Hopper warpgroup MMA (sm_90a only), head_dim 128,
// f16/bf16 with fp32 accumulation, MHA and GQA. Same contract as
// attention_prefill (queries are the last n of kv_length slots).
//
// One CTA = 128 query rows of one head = two warpgroups of 64 rows. Per 128-slot
// K/V tile, each warpgroup issues S = Q K^T as 8 wgmma m64n128k16 (Q and K from
// swizzled shared memory), runs the online softmax on the fp32 accumulators,
// converts P in registers to the A operand and issues O += P V as 8 more wgmma
// (V as the transposed B operand). K/V tiles stream through a cp.async
// multi-stage pipeline filled by all 256 threads. With one CTA per SM the two
// warpgroups interleave: one's softmax overlaps the other's MMAs. Masking only
// on tiles that cross a warpgroup's diagonal; query blocks run longest first.
#include <atomic>

#include "attention_mma.cuh"
#include "attention_prefill_detail.cuh"
#include "common.cuh"
#include "wgmma.cuh"

namespace tf::cuda::detail {
namespace {

constexpr int kD = 128, kBM = 128, kBN = 128, kThreads = 256;
constexpr uint32_t kQBytes = uint32_t(kBM) * kD * 2, kTileBytes = uint32_t(kBN) * kD * 2;
template <int STAGES> constexpr size_t smem_bytes() {
  return size_t(kQBytes) + size_t(STAGES) * 2 * kTileBytes + wgmma::kAtomBytes;  // + the 1024-B alignment slack
}
static_assert(smem_bytes<3>() <= 227 * 1024, "three stages fit the 227 KB opt-in limit");

// ROWS x 128 elements (row r at src + r * stride) -> a swizzled tile; rows at or
// past valid_rows are zero-filled (nothing read).
template <int ROWS, class T>
__device__ __forceinline__ void load_tile(unsigned char* dst, const T* src, int64_t stride, int valid_rows, int tid) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static_assert(ROWS * kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int it = 0; it < ROWS * kChunks / kThreads; ++it) {
    const int i = tid + it * kThreads;
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = r < valid_rows;
    mma::cp_async16(dst + wgmma::sw128_offset<ROWS>(r, c), ok ? src + int64_t(r) * stride + c : src, ok);
  }
}

template <class T, int STAGES>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_wgmma_kernel(PrefillArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace mma;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must be 1024-byte aligned in the shared window (the XOR uses address bits 4-9).
  const uint32_t raw_addr = smem_addr(smem_raw);
  unsigned char* smem = smem_raw + (((raw_addr + wgmma::kAtomBytes - 1) & ~(wgmma::kAtomBytes - 1)) - raw_addr);
  unsigned char* q_s = smem;
  auto k_stage = [&](int s) { return smem + kQBytes + uint32_t(s) * 2 * kTileBytes; };
  auto v_stage = [&](int s) { return smem + kQBytes + uint32_t(s) * 2 * kTileBytes + kTileBytes; };

  const int qb = int(gridDim.x) - 1 - int(blockIdx.x);
  const int h = blockIdx.y, kvh = h / a.G;
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wl = (tid >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
  const int q0 = qb * kBM;
  const int64_t off = a.kv_length - a.n;  // slot of query 0
  const int rows_valid = min(kBM, a.n - q0);
  const int64_t hi = off + q0 + rows_valid;  // this block sees slots [0, hi)
  const int ntiles = int((hi + kBN - 1) / kBN);
  const int64_t wg_first = off + q0 + 64 * wg;  // slot of this warpgroup's first query
  const bool wg_live = 64 * wg < rows_valid;
  // This thread's rows r = 0, 1: warpgroup row 16 wl + g + 8 r, query slot wg_first + 16 wl + g + 8 r.

  const T* Q = static_cast<const T*>(a.q) + (int64_t(q0) * a.H + h) * kD;
  const T* K = static_cast<const T*>(a.k) + int64_t(kvh) * a.head_stride;
  const T* V = static_cast<const T*>(a.v) + int64_t(kvh) * a.head_stride;

  load_tile<kBM>(q_s, Q, int64_t(a.H) * kD, rows_valid, tid);
  auto load_kv = [&](int tile) {
    const int stage = tile % STAGES;
    const int64_t j0 = int64_t(tile) * kBN;
    const int64_t left = hi - j0;
    const int valid = left < kBN ? int(left) : kBN;
    load_tile<kBN>(k_stage(stage), K + j0 * a.token_stride, a.token_stride, valid, tid);
    load_tile<kBN>(v_stage(stage), V + j0 * a.token_stride, a.token_stride, valid, tid);
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ntiles) load_kv(s);
    cp_async_commit();  // Q travels in the first group
  }

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const uint32_t q_addr = smem_addr(q_s);

  for (int tile = 0; tile < ntiles; ++tile) {
    if (tile + STAGES - 1 < ntiles) load_kv(tile + STAGES - 1);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    wgmma::fence_proxy_async();
    __syncthreads();

    const int stage = tile % STAGES;
    const int64_t j0 = int64_t(tile) * kBN;
    if (wg_live && j0 <= wg_first + 63) {  // else no row of this warpgroup sees a slot of this tile
      const uint32_t k_addr = smem_addr(k_stage(stage)), v_addr = smem_addr(v_stage(stage));
      float s[64];
      // S = Q K^T over the 8 k16 slices of head_dim; the first overwrites s.
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint64_t da =
            wgmma::make_desc(q_addr + wgmma::sw128_offset<kBM>(64 * wg, 16 * kk), 16, wgmma::kAtomBytes);
        const uint64_t db = wgmma::make_desc(k_addr + wgmma::sw128_offset<kBN>(0, 16 * kk), 16, wgmma::kAtomBytes);
        wgmma::mma_ss<T>(s, da, db, kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(s);

      if (j0 + kBN - 1 > wg_first) {  // the tile crosses this warpgroup's diagonal
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t slot = j0 + 8 * i + 2 * t4 + (e & 1);
            if (slot > wg_first + 16 * wl + g + 8 * (e >> 1)) s[4 * i + e] = -INFINITY;
          }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[r];
#pragma unroll
        for (int i = 0; i < 16; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Raw scores and maxima; the scale folds into one FFMA per exponent.
        const float mu = mx == -INFINITY ? 0.0f : mx * a.scale_log2;  // a row that sees nothing stays at zero
        const float alpha = fast_exp2(fmaf(m[r], a.scale_log2, -mu));
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          s[4 * i + 2 * r] = fast_exp2(fmaf(s[4 * i + 2 * r], a.scale_log2, -mu));
          s[4 * i + 2 * r + 1] = fast_exp2(fmaf(s[4 * i + 2 * r + 1], a.scale_log2, -mu));
          sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        }
        l[r] = l[r] * alpha + sum;  // per-thread partial; the quad is summed at the end
        m[r] = mx;
#pragma unroll
        for (int i = 0; i < 16; ++i) o[4 * i + 2 * r] *= alpha, o[4 * i + 2 * r + 1] *= alpha;
      }
      // P as the A operand: k16 slice ks is accumulator column blocks 2 ks and 2 ks + 1.
      uint32_t p[8][4];
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        p[ks][0] = pack2<T>(s[8 * ks + 0], s[8 * ks + 1]);
        p[ks][1] = pack2<T>(s[8 * ks + 2], s[8 * ks + 3]);
        p[ks][2] = pack2<T>(s[8 * ks + 4], s[8 * ks + 5]);
        p[ks][3] = pack2<T>(s[8 * ks + 6], s[8 * ks + 7]);
      }
      // O += P V over the 8 k16 slices of the tile's slots.
      wgmma::fence_regs(o);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks) {
        const uint64_t dv = wgmma::make_desc(v_addr + wgmma::sw128_offset<kBN>(16 * ks, 0),
                                             uint32_t(kBN) * wgmma::kRowBytes, wgmma::kAtomBytes);
        wgmma::mma_rs_tb<T>(o, p[ks], dv, 1);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(o);
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) wgmma::fence_regs(p[ks]);
    }
    __syncthreads();  // this stage is refilled STAGES - 1 iterations from now
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int row = q0 + 64 * wg + 16 * wl + g + 8 * r;
    if (row >= a.n) continue;
    T* dst = static_cast<T*>(a.out) + (int64_t(row) * a.H + h) * kD + 2 * t4;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<uint32_t*>(dst + 8 * i) = pack2<T>(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
  }
#else
  __trap();  // built for an architecture without wgmma: the dispatcher never launches this
#endif
}

template <class T, int STAGES> void launch(const PrefillArgs& a, cudaStream_t stream) {
  auto* kern = attention_prefill_wgmma_kernel<T, STAGES>;
  constexpr size_t smem = smem_bytes<STAGES>();
  // Raise the shared-memory limit once per device and instantiation, so the launch itself stays cheap.
  static std::atomic<uint64_t> attr_set{0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attr_set.fetch_or(bit, std::memory_order_release);
  }
  const unsigned qblocks = unsigned((a.n + kBM - 1) / kBM);
  kern<<<dim3(qblocks, unsigned(a.H)), kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_prefill_wgmma(const PrefillArgs& a, DType dtype, int stages, cudaStream_t stream) {
  if (stages == 3) {
    TF_DISPATCH_HALF(dtype, T, launch<T, 3>(a, stream));
  } else {
    TF_DISPATCH_HALF(dtype, T, launch<T, 2>(a, stream));
  }
}

}  // namespace tf::cuda::detail
