#include "gemm_skinny_norm.cuh"

#include <mutex>
#include <set>

#include "common.cuh"
#include "gemm_skinny.cuh"
#include "gemm_skinny_tile.cuh"
#include "pdl.cuh"
#include "rmsnorm_tile.cuh"
#include "tile_load.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxRows = int(kSkinnyGemmMaxRows);
constexpr int kMaxIn = 2048;  // rmsnorm_vec8_rows' one-row block of <= 256 threads

// grid.x = ceil(out / 16); KW warps. Dynamic shared memory: the n normalized
// rows, row stride in + 8 (16-byte aligned, fewer bank conflicts), as the
// persistent step kernel keeps them.
template <class T, int KW, int U, int NT>
__global__ void __launch_bounds__(KW * 32) skinny_norm_mma_kernel(const __grid_constant__ SkinnyNormGemmParams p,
                                                                  int norm_threads, bool prefetch) {
  const T* w = static_cast<const T*>(p.w);
  prefetch_rows_then_wait(w, int64_t(blockIdx.x) * 16, 16, p.in, p.out, prefetch);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float red[kMaxRows * 8], scale[kMaxRows];
  __shared__ float part[skinny::MmaPart<KW, NT>::kFloats];
  T* xs = reinterpret_cast<T*>(smem);
  const int64_t in = p.in, xs_ld = in + 8;
  const int n = int(p.n);
  const T* residual = static_cast<const T*>(p.residual);
  const T* add = static_cast<const T*>(p.add);
  T* sum_out = blockIdx.x == 0 ? static_cast<T*>(p.sum_out) : nullptr;
  // As the add_rmsnorm kernel: the row loaded is `add`, the residual added to
  // it (the same float sum either way round), the rounded sum stored.
  if (add) {
    rmsnorm_vec8_rows<T, LoadPlain>(
        n, [&](int i) { return add + i * in; }, [&](int i) { return residual + i * in; },
        [&](int i) { return sum_out ? sum_out + i * in : static_cast<T*>(nullptr); },
        [&](int i) { return xs + i * xs_ld; }, static_cast<const T*>(p.norm_weight), in, p.eps, p.rounded_sum,
        norm_threads, red, scale);
  } else {
    rmsnorm_vec8_rows<T, LoadPlain>(
        n, [&](int i) { return residual + i * in; }, [](int) { return static_cast<const T*>(nullptr); },
        [](int) { return static_cast<T*>(nullptr); }, [&](int i) { return xs + i * xs_ld; },
        static_cast<const T*>(p.norm_weight), in, p.eps, false, norm_threads, red, scale);
  }
  skinny::mma_tile<T, T, KW, U, NT, skinny::XShared>(xs, xs_ld, w, static_cast<T*>(p.y), p.out, n, in, p.out,
                                                     blockIdx.x, part);
}

// The dynamic shared memory a kernel may take, raised once per (kernel, device)
// whatever this launch needs: the 48 KB default bounds static plus dynamic
// shared memory together, and the static part (the warps' partial sums, up to
// 15 KB) already pushed n = 32 rows of 576 over it.
void allow_smem(const void* kernel) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> raised;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (raised.insert({kernel, dev}).second) {
    const size_t most = sizeof(uint16_t) * size_t(kMaxRows) * size_t(kMaxIn + 8);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(most)));
  }
}

template <class T, int KW, int U, int NT>
void launch_nt(const SkinnyNormGemmParams& p, cudaStream_t st) {
  auto* kern = skinny_norm_mma_kernel<T, KW, U, NT>;
  const size_t smem = sizeof(T) * size_t(p.n) * size_t(p.in + 8);
  allow_smem(reinterpret_cast<const void*>(kern));
  const unsigned blocks = unsigned((p.out + 15) / 16);
  launch_step(kern, dim3(blocks), dim3(KW * 32), smem, st, p, rmsnorm_vec8_threads(p.in), pdl_scope_on());
}

template <class T, int KW, int U>
void launch(const SkinnyNormGemmParams& p, cudaStream_t st) {
  // The tile count only bounds the loop; a row's arithmetic is the same in each.
  if (p.n <= 8) launch_nt<T, KW, U, 1>(p, st);
  else if (p.n <= 16) launch_nt<T, KW, U, 2>(p, st);
  else launch_nt<T, KW, U, 4>(p, st);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

const char* gemm_skinny_norm_unsupported(int64_t n, int64_t in, DType dtype, int variant) {
  const SkinnyVariant v = variant < 0 ? skinny_default_variant() : SkinnyVariant(variant);
  if (v != SkinnyVariant::mma_k8u4 && v != SkinnyVariant::mma_k4u8) return "the skinny variant is not tensor-core";
  if (!is_half_dtype(dtype)) return "dtype is not f16/bf16";
  if (n < 1 || n > kMaxRows) return "rows outside 1..32";
  if (in % 8 != 0 || in < 8 || in > kMaxIn) return "row length is not a multiple of 8 up to 2048";
  return nullptr;
}

void gemm_skinny_norm(const SkinnyNormGemmParams& p, cudaStream_t stream) {
  const char* why = gemm_skinny_norm_unsupported(p.n, p.in, p.dtype, p.variant);
  TF_CHECK(!why, "cuda::gemm_skinny_norm: " << why);
  TF_CHECK(p.residual && p.norm_weight && p.w && p.y && p.out > 0, "cuda::gemm_skinny_norm: null pointer or no rows");
  TF_CHECK(!p.sum_out || (p.sum_out != p.residual && p.sum_out != p.add),
           "cuda::gemm_skinny_norm: sum_out aliases an input that other blocks still read");
  TF_CHECK(!p.sum_out || p.add, "cuda::gemm_skinny_norm: sum_out without an add");
  for (const void* q : {p.residual, p.add, static_cast<const void*>(p.sum_out), p.norm_weight, p.w})
    TF_CHECK(!q || aligned16(q), "cuda::gemm_skinny_norm: a pointer is not 16-byte aligned");
  const SkinnyVariant v = p.variant < 0 ? skinny_default_variant() : SkinnyVariant(p.variant);
  TF_DISPATCH_HALF(p.dtype, T, {
    if (v == SkinnyVariant::mma_k4u8) launch<T, 4, 8>(p, stream);
    else launch<T, 8, 4>(p, stream);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
