#include "gemm_skinny_norm.cuh"

#include <mutex>
#include <set>

#include "common.cuh"
#include "gemm_skinny.cuh"
#include "gemm_skinny_epilogue.cuh"
#include "gemm_skinny_tile.cuh"
#include "pdl.cuh"
#include "rmsnorm_tile.cuh"
#include "tile_load.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxRows = int(kSkinnyGemmMaxRows);
// rmsnorm_vec8_rows reproduces a one-row block of up to 1024 threads holding
// kRmsMaxVecs vectors each.
constexpr int64_t kMaxIn = int64_t(kRmsMaxVecs) * 8 * 1024;
constexpr int kMaxRowWarps = 32;
// The normalized rows live in dynamic shared memory: n x (in + 8) elements, at
// most this much (the static part, up to ~18 KB, shares the SM's 227 KB): every
// n up to 32 at a hidden size of 2048, n <= 24 at 4096 (a 7B's steps of more
// rows take the two launches, which give the same bits).
constexpr size_t kMaxRowsBytes = 200 * 1024;
// The dynamic shared memory of n normalized rows of `in` 16-bit elements.
size_t rows_bytes(int64_t n, int64_t in) { return sizeof(uint16_t) * size_t(n) * size_t(in + 8); }

// What a block prefetches into L2 before the PDL wait (even without PDL: the
// blocks prefetch_blocks names, pdl.cuh): its tile's W rows, a weight no other
// kernel of the step reads, so the row loads of the norm overlap the tile's
// first weight bytes. The plain map's 16 rows are contiguous (the last tile
// clamped to W); a fused map's are two runs of 8, each inside W.
template <class T>
__device__ __forceinline__ void prefetch_tile(const T* w, const skinny::TileRows& rows, int64_t tile, int64_t in) {
  const int64_t j0 = tile * 16;
  if (j0 < rows.out) prefetch_rows(w, j0, min(int64_t(16), rows.out - j0), in);
}
template <class T, class RowMap>
__device__ __forceinline__ void prefetch_tile(const T* w, const RowMap& rows, int64_t tile, int64_t in) {
  prefetch_rows(w, rows.a(tile, 0), 8, in);
  prefetch_rows(w, rows.b(tile, 0), 8, in);
}

// grid.x = the tiles; KW warps. Dynamic shared memory: the n normalized rows,
// row stride in + 8 (16-byte aligned, fewer bank conflicts), as the
// persistent step kernel keeps them. The tile is skinny::mma_tile_mapped with
// the plain GEMM's rows and store (TileRows, StoreRows) or a fused epilogue's
// (gemm_skinny_epilogue.cuh): the same code the GEMM without the prologue
// runs, on the same values.
template <class T, int KW, int U, int NT, class RowMap, class Epilogue>
__global__ void __launch_bounds__(KW * 32) skinny_norm_mma_kernel(const __grid_constant__ SkinnyNormGemmParams p,
                                                                  RowMap rows, Epilogue epi, int norm_threads,
                                                                  unsigned prefetch_blocks) {
  const T* w = static_cast<const T*>(p.w);
  if (blockIdx.x < prefetch_blocks) prefetch_tile(w, rows, blockIdx.x, p.in);
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float red[kMaxRows * kMaxRowWarps], scale[kMaxRows];
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
  skinny::mma_tile_mapped<T, KW, U, NT>(xs, xs_ld, w, n, in, blockIdx.x, part, skinny::XShared{}, rows, epi);
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
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxRowsBytes)));
  }
}

template <class T, int KW, int U, int NT, class RowMap, class Epilogue>
void launch_nt(const SkinnyNormGemmParams& p, int64_t tiles, const RowMap& rows, const Epilogue& epi,
               cudaStream_t st) {
  auto* kern = skinny_norm_mma_kernel<T, KW, U, NT, RowMap, Epilogue>;
  const size_t smem = rows_bytes(p.n, p.in);
  allow_smem(reinterpret_cast<const void*>(kern));
  launch_step(kern, dim3(unsigned(tiles)), dim3(KW * 32), smem, st, p, rows, epi, rmsnorm_vec8_threads(p.in),
              prefetch_blocks(16, p.in * int64_t(sizeof(T))));
}

template <class T, int KW, int U, class RowMap, class Epilogue>
void launch_kw(const SkinnyNormGemmParams& p, int64_t tiles, const RowMap& rows, const Epilogue& epi,
               cudaStream_t st) {
  // The tile count only bounds the loop; a row's arithmetic is the same in each.
  if (p.n <= 8) launch_nt<T, KW, U, 1>(p, tiles, rows, epi, st);
  else if (p.n <= 16) launch_nt<T, KW, U, 2>(p, tiles, rows, epi, st);
  else launch_nt<T, KW, U, 4>(p, tiles, rows, epi, st);
}

// The variant's tile shape (KW warps, U steps), as gemm_skinny runs it.
template <class T, class RowMap, class Epilogue>
void launch(const SkinnyNormGemmParams& p, int64_t tiles, const RowMap& rows, const Epilogue& epi, cudaStream_t st) {
  const SkinnyVariant v = p.variant < 0 ? skinny_default_variant() : SkinnyVariant(p.variant);
  if (v == SkinnyVariant::mma_k4u8) launch_kw<T, 4, 8>(p, tiles, rows, epi, st);
  else launch_kw<T, 8, 4>(p, tiles, rows, epi, st);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

const char* gemm_skinny_norm_unsupported(int64_t n, int64_t in, DType dtype, int variant) {
  const SkinnyVariant v = variant < 0 ? skinny_default_variant() : SkinnyVariant(variant);
  if (v != SkinnyVariant::mma_k8u4 && v != SkinnyVariant::mma_k4u8) return "the skinny variant is not tensor-core";
  if (!is_half_dtype(dtype)) return "dtype is not f16/bf16";
  if (n < 1 || n > kMaxRows) return "rows outside 1..32";
  if (in % 8 != 0 || in < 8 || in > kMaxIn) return "row length is not a multiple of 8 up to 16384";
  if (rows_bytes(n, in) > kMaxRowsBytes) return "rows x (row length + 8) x 2 bytes exceed 200 KB";
  return nullptr;
}

namespace {
// The checks every entry shares (y: whether the entry writes p.y).
void check_params(const SkinnyNormGemmParams& p, const char* op, bool y) {
  const char* why = gemm_skinny_norm_unsupported(p.n, p.in, p.dtype, p.variant);
  TF_CHECK(!why, "cuda::" << op << ": " << why);
  TF_CHECK(p.residual && p.norm_weight && p.w && (p.y || !y) && p.out > 0,
           "cuda::" << op << ": null pointer or no rows");
  TF_CHECK(!p.sum_out || (p.sum_out != p.residual && p.sum_out != p.add),
           "cuda::" << op << ": sum_out aliases an input that other blocks still read");
  TF_CHECK(!p.sum_out || p.add, "cuda::" << op << ": sum_out without an add");
  for (const void* q : {p.residual, p.add, static_cast<const void*>(p.sum_out), p.norm_weight, p.w})
    TF_CHECK(!q || aligned16(q), "cuda::" << op << ": a pointer is not 16-byte aligned");
}
}  // namespace

void gemm_skinny_norm(const SkinnyNormGemmParams& p, cudaStream_t stream) {
  check_params(p, "gemm_skinny_norm", true);
  TF_DISPATCH_HALF(p.dtype, T, {
    launch<T>(p, (p.out + 15) / 16, skinny::TileRows{p.out}, skinny::StoreRows<T>{static_cast<T*>(p.y), p.out, p.out},
              stream);
  });
  CUDA_CHECK_LAUNCH();
}

void gemm_skinny_norm_gate_up_silu(const SkinnyNormGemmParams& p, cudaStream_t stream) {
  check_params(p, "gemm_skinny_norm_gate_up_silu", true);
  TF_CHECK(p.out % 16 == 0, "cuda::gemm_skinny_norm_gate_up_silu: out " << p.out << " = 2 inter, inter a multiple of 8");
  const int64_t inter = p.out / 2;
  TF_DISPATCH_HALF(p.dtype, T, {
    launch<T>(p, inter / 8, skinny::GateUpRows{inter}, skinny::GateUpSiluStore<T>{static_cast<T*>(p.y), inter},
              stream);
  });
  CUDA_CHECK_LAUNCH();
}

void gemm_skinny_norm_qkv_rope(const SkinnyNormGemmParams& p, const RopeQkvParams& r, cudaStream_t stream) {
  check_params(p, "gemm_skinny_norm_qkv_rope", false);
  check_qkv_rope_params("gemm_skinny_norm_qkv_rope", p.out, p.n, p.dtype, r);
  const int64_t half = r.head_dim / 2, per_head = half / 8;
  TF_DISPATCH_HALF(p.dtype, T, {
    launch<T>(p, p.out / 16, skinny::RopePairRows{half, per_head}, skinny::RopeQkvStore<T>{r, per_head}, stream);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
