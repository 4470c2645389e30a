#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "attention_decode.cuh"
#include "attention_decode_tile.cuh"
#include "attention_mma.cuh"
#include "common.cuh"
#include "device_props.cuh"
#include "device_release.cuh"
#include "pdl.cuh"

namespace tf::cuda {
namespace {

using namespace attn;

// grid = (row groups, splits, kv heads); block = the split tile's 32 W threads
// (attention_decode_tile.cuh), which the persistent step kernel runs too.
// arrivals (combine_in_split): a zeroed word per KV head; the last block of a
// head to finish (groups x splits of them, the early-exit splits included)
// resets it and merges the head's rows with attention_combine_rows, as the
// persistent step's fused attention does, into out.
template <class T, int D, int MT, int W>
__global__ void __launch_bounds__(kSplitThreads<W>) attention_split_kernel(SplitArgs a, unsigned* arrivals, T* out) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  attention_split_tile<T, D, MT, W>(a, blockIdx.x, blockIdx.y, blockIdx.z, smem_raw, threadIdx.x, 0);
  if (!arrivals) return;
  __shared__ bool last;
  __syncthreads();  // every partial of this block is written (an early-exit split wrote none)
  if (threadIdx.x == 0) {
    __threadfence();  // cumulative: the block's partials are visible device-wide before the arrival
    const unsigned arrived = atomicAdd(arrivals + blockIdx.z, 1u) + 1;
    last = arrived == gridDim.x * gridDim.y;
    if (last) atomicExch(arrivals + blockIdx.z, 0u);  // every block of the head has arrived
    __threadfence();
  }
  __syncthreads();
  if (!last) return;
  const int G = a.G, H = a.H;
  const int64_t base = int64_t(blockIdx.z) * G;
  attention_combine_rows<T, LoadCoherent>(
      a.o_part, a.lse_part, out, int(gridDim.y), a.n * H, a.n * G,
      [=](int i) { return int64_t(i / G) * H + base + i % G; }, D, a.kv_length, a.chunk,
      reinterpret_cast<float*>(smem_raw), int(threadIdx.x), kSplitThreads<W>, [] { __syncthreads(); });
}

// grid = n * H rows, block = 4 * D threads: one row each (attention_combine_rows).
template <class T>
__global__ void attention_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                         T* __restrict__ out, int grid_splits, int rows, int D,
                                         const int32_t* __restrict__ kv_length, int chunk) {
  pdl_wait();  // kernels/pdl.cuh: nothing above reads activations or writes
  pdl_trigger();
  __shared__ float sm[combine_smem_floats(1, 128)];
  const int64_t row = blockIdx.x;
  attention_combine_rows<T, LoadPlain>(
      o_part, lse_part, out, grid_splits, rows, 1, [row](int) { return row; }, D, kv_length, chunk, sm,
      int(threadIdx.x), int(blockDim.x), [] { __syncthreads(); });
}

std::atomic<int64_t> direct_launches{0};

int sm_count() {
  static const int n = current_sm_count();  // asked once: the split choice runs per call
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

// A zeroed arrival word per KV head for combine_in_split, per device, made
// once outside stream capture (null inside a capture that would make it: the
// caller then launches the combine kernel).
constexpr int kMaxArrivalWords = 65536;
unsigned* arrival_words[64] = {};

void release_arrival_counters() {  // errors ignored: it runs at exit
  for (unsigned*& w : arrival_words)
    if (w) cudaFree(w), w = nullptr;
}

unsigned* arrival_counters(cudaStream_t stream) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  unsigned*& w = arrival_words[dev & 63];
  if (w) return w;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
  if (cs != cudaStreamCaptureStatusNone) return nullptr;
  CUDA_CHECK(cudaMalloc(&w, sizeof(unsigned) * kMaxArrivalWords));
  CUDA_CHECK(cudaMemset(w, 0, sizeof(unsigned) * kMaxArrivalWords));
  CUDA_CHECK(cudaDeviceSynchronize());
  at_device_release(release_arrival_counters);  // compute-sanitizer's leak check found it kept past exit
  return w;
}

template <class T, int D, int MT, int W>
void launch_split(const SplitArgs& a, int groups, int splits, int kv_heads, cudaStream_t stream,
                  unsigned* arrivals, T* out) {
  constexpr size_t smem = split_smem_bytes<D, MT, W>();
  auto* kern = attention_split_kernel<T, D, MT, W>;
  // Raise the shared-memory limit once per device and instantiation, so the launch itself stays cheap.
  static std::atomic<uint64_t> attr_set{0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attr_set.fetch_or(bit, std::memory_order_release);
  }
  launch_step(kern, dim3(unsigned(groups), unsigned(splits), unsigned(kv_heads)), dim3(unsigned(kSplitThreads<W>)),
              smem, stream, a, arrivals, out);
  CUDA_CHECK_LAUNCH();
}

template <class T, int D, int W>
void launch_split_rows(const SplitArgs& a, int mt, int groups, int splits, int kv_heads, cudaStream_t stream,
                       unsigned* arrivals, T* out) {
  if (mt == 1) launch_split<T, D, 1, W>(a, groups, splits, kv_heads, stream, arrivals, out);
  else launch_split<T, D, 2, W>(a, groups, splits, kv_heads, stream, arrivals, out);
}

// TRIFORCE_ATTN_SPLIT_WARPS: auto (the measured choice per head dim), 4 or 8.
int split_warps_from_env() {
  static const int v = [] {
    const char* s = std::getenv("TRIFORCE_ATTN_SPLIT_WARPS");
    if (!s || !*s || std::strcmp(s, "auto") == 0) return 0;
    if (std::strcmp(s, "4") == 0) return 4;
    if (std::strcmp(s, "8") == 0) return 8;
    TF_FAIL("TRIFORCE_ATTN_SPLIT_WARPS=" << s << ": expected auto, 4 or 8");
  }();
  return v;
}

}  // namespace

int attention_decode_split_warps(int64_t head_dim) {
  if (head_dim != 64) return kWarps;  // the wide tile's stages would not fit two CTAs an SM at D = 128
  const int v = split_warps_from_env();
  return v > 0 ? v : kDefaultSplitWarpsD64;
}

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

int64_t attention_decode_direct_launches() { return direct_launches.load(std::memory_order_relaxed); }

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
  TF_CHECK(p.split_warps == 0 || p.split_warps == kWarps || (p.split_warps == kWideWarps && p.head_dim == 64),
           "cuda::attention_decode: split_warps " << p.split_warps << " at head_dim " << p.head_dim
                                                  << " (need 0, 4, or 8 at head_dim 64)");
  const int W = p.split_warps > 0 ? p.split_warps : attention_decode_split_warps(p.head_dim);
  // The in-split combine merges a head's n G rows in the split's shared memory.
  const size_t split_smem =
      p.head_dim == 64
          ? (W == kWideWarps ? (mt == 1 ? split_smem_bytes<64, 1, kWideWarps>() : split_smem_bytes<64, 2, kWideWarps>())
                             : (mt == 1 ? split_smem_bytes<64, 1>() : split_smem_bytes<64, 2>()))
          : (mt == 1 ? split_smem_bytes<128, 1>() : split_smem_bytes<128, 2>());
  // One split: it writes the output itself (SplitArgs::out), the same bits, one launch fewer.
  const bool direct = splits == 1 && p.direct_single_split;
  if (direct) {
    a.out = p.out;
    direct_launches.fetch_add(1, std::memory_order_relaxed);
  }
  unsigned* arrivals = nullptr;
  if (!direct && p.combine_in_split && sizeof(float) * size_t(combine_smem_floats(int(R), int(p.head_dim))) <= split_smem &&
      p.num_kv_heads <= kMaxArrivalWords)
    arrivals = arrival_counters(stream);
  TF_DISPATCH_HALF(p.dtype, T, {
    T* out = static_cast<T*>(p.out);
    const int kvh = int(p.num_kv_heads);
    if (p.head_dim == 128) launch_split_rows<T, 128, kWarps>(a, mt, groups, splits, kvh, stream, arrivals, out);
    else if (W == kWideWarps) launch_split_rows<T, 64, kWideWarps>(a, mt, groups, splits, kvh, stream, arrivals, out);
    else launch_split_rows<T, 64, kWarps>(a, mt, groups, splits, kvh, stream, arrivals, out);
    if (!direct && !arrivals)  // else the one split wrote the rows, or the last split block of each head combined
      launch_step(attention_combine_kernel<T>, dim3(unsigned(rows)), dim3(unsigned(kCombineGroups * p.head_dim)), 0,
                  stream, static_cast<const float*>(a.o_part), static_cast<const float*>(a.lse_part),
                  static_cast<T*>(p.out), splits, int(rows), int(p.head_dim), p.kv_length, a.chunk);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace tf::cuda
