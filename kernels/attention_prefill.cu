#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attention_mma.cuh"
#include "attention_prefill.cuh"
#include "attention_prefill_cudnn.cuh"
#include "attention_prefill_detail.cuh"
#include "common.cuh"

namespace tf::cuda {
namespace {

using detail::PrefillArgs;

// One tile configuration: MT m16 tiles per warp (K/V fragments reused for 16 MT
// rows), WARPS warps, BN KV slots per pipeline stage, STAGES stages in flight.
template <int D_, int MT_, int WARPS_, int BN_, int STAGES_, int MINB_> struct Cfg {
  static constexpr int D = D_, MT = MT_, WARPS = WARPS_, BN = BN_, STAGES = STAGES_, MINB = MINB_;
  static constexpr int RW = 16 * MT, BM = RW * WARPS, THREADS = WARPS * 32;
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t(BM) * D + size_t(STAGES) * 2 * BN * D);
};
// The defaults: 32 rows per warp, 4 warps, and at head_dim 128 32-slot stages, which keep S and O
// (192 fp32) in registers without spills and leave room for two CTAs per SM.
using Cfg128 = Cfg<128, 2, 4, 32, 3, 2>;
using Cfg64 = Cfg<64, 2, 4, 64, 3, 2>;
constexpr float kLog2e = 1.4426950408889634f;

// grid = (query blocks, heads); block = 4 warps of 32 query rows each. Query
// blocks run last-first, so the longest (most keys) start first and the short
// ones fill the tail; the blocks in flight walk the same K/V head in step, so
// its tiles come from L2.
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) attention_prefill_kernel(PrefillArgs a) {
  using namespace mma;
  constexpr int D = C::D, kMT = C::MT, kRW = C::RW, kBM = C::BM, kBN = C::BN, kThreads = C::THREADS;
  constexpr int kStages = C::STAGES;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + kBM * D;                 // [kStages][kBN * D]
  T* v_s = k_s + kStages * kBN * D;       // [kStages][kBN * D]

  const int qb = int(gridDim.x) - 1 - int(blockIdx.x);
  const int h = blockIdx.y, kvh = h / a.G;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q0 = qb * kBM;
  const int64_t off = a.kv_length - a.n;  // slot of query 0
  const int rows_valid = min(kBM, a.n - q0);
  // Slots this block can see: [0, hi).
  const int64_t hi = off + q0 + rows_valid;
  const int ntiles = int((hi + kBN - 1) / kBN);

  const T* Q = static_cast<const T*>(a.q) + (int64_t(q0) * a.H + h) * D;
  const T* K = static_cast<const T*>(a.k) + int64_t(kvh) * a.head_stride;
  const T* V = static_cast<const T*>(a.v) + int64_t(kvh) * a.head_stride;

  load_tile_async<D, kBM, kThreads>(q_s, Q, int64_t(a.H) * D, rows_valid, tid);
  auto load_kv = [&](int tile) {
    const int stage = tile % kStages;
    const int64_t j0 = int64_t(tile) * kBN;
    const int64_t left = hi - j0;
    const int valid = left < kBN ? int(left) : kBN;
    load_tile_async<D, kBN, kThreads>(k_s + stage * kBN * D, K + j0 * a.token_stride, a.token_stride, valid, tid);
    load_tile_async<D, kBN, kThreads>(v_s + stage * kBN * D, V + j0 * a.token_stride, a.token_stride, valid, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ntiles) load_kv(s);
    cp_async_commit();  // Q travels in the first group
  }

  const int g = lane >> 2, t4 = lane & 3;
  const int wrow = warp * kRW;              // this warp's first row in the block
  const int64_t diag = off + q0 + wrow;     // slot of this warp's first query
  // Thread rows: m-tile mt, half r -> block row wrow + 16 mt + g + 8 r, query slot diag + 16 mt + g + 8 r.

  float o[kMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

  for (int tile = 0; tile < ntiles; ++tile) {
    if (tile + kStages - 1 < ntiles) load_kv(tile + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();

    const int stage = tile % kStages;
    const T* kt = k_s + stage * kBN * D;
    const T* vt = v_s + stage * kBN * D;
    const int64_t j0 = int64_t(tile) * kBN;
    if (j0 <= diag + kRW - 1) {  // else every slot of this tile is after every row of this warp
      float s[kMT][kBN / 8][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
      // S = Q K^T: per k-step, the A fragments of both m-tiles from shared memory, each K fragment used twice.
      const auto* qbase = reinterpret_cast<const uint16_t*>(q_s);
      const auto* kbase = reinterpret_cast<const uint16_t*>(kt);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
          ldmatrix_x4(af[mt], qbase + swz<D>(wrow + 16 * mt + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int nt = 0; nt < kBN / 8; nt += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, kbase + swz<D>(nt * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma16816<T>(s[mt][nt], af[mt], b[0], b[1]);
            mma16816<T>(s[mt][nt + 1], af[mt], b[2], b[3]);
          }
        }
      }

      const bool masked = j0 + kBN - 1 > diag;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = s[mt][nt][e];
            if (masked) {
              const int64_t slot = j0 + nt * 8 + 2 * t4 + (e & 1);
              if (slot > diag + 16 * mt + g + 8 * (e >> 1)) x = -INFINITY;
            }
            s[mt][nt][e] = x;
          }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = m[mt][r];
#pragma unroll
          for (int nt = 0; nt < kBN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // Raw scores and maxima; the scale folds into one FFMA per exponent.
          const float mu = mx == -INFINITY ? 0.0f : mx * a.scale_log2;  // a row that sees nothing stays at zero
          const float alpha = fast_exp2(fmaf(m[mt][r], a.scale_log2, -mu));
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kBN / 8; ++nt) {
            s[mt][nt][2 * r] = fast_exp2(fmaf(s[mt][nt][2 * r], a.scale_log2, -mu));
            s[mt][nt][2 * r + 1] = fast_exp2(fmaf(s[mt][nt][2 * r + 1], a.scale_log2, -mu));
            sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
          }
          l[mt][r] = l[mt][r] * alpha + sum;  // per-thread partial; the quad is summed at the end
          m[mt][r] = mx;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
        }
      }
      // O += P V: each V fragment (ldmatrix.trans) serves both m-tiles.
      const auto* vbase = reinterpret_cast<const uint16_t*>(vt);
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks) {
        uint32_t pa[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          pa[mt][0] = pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
          pa[mt][1] = pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
          pa[mt][2] = pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
          pa[mt][3] = pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
        }
        const int slot = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vbase + swz<D>(slot, dt * 8 + (lane >> 4) * 8));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma16816<T>(o[mt][dt], pa[mt], b[0], b[1]);
            mma16816<T>(o[mt][dt + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // this stage is refilled kStages - 1 iterations from now
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = q0 + wrow + 16 * mt + g + 8 * r;
      if (row >= a.n) continue;
      T* dst = static_cast<T*>(a.out) + (int64_t(row) * a.H + h) * D + 2 * t4;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(dst + dt * 8) = pack2<T>(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
    }
}

template <class T, class C>
void launch(const PrefillArgs& a, int64_t n, int64_t heads, cudaStream_t stream) {
  auto* kern = attention_prefill_kernel<T, C>;
  // Raise the shared-memory limit once per device and instantiation, so the launch itself stays cheap.
  static std::atomic<uint64_t> attr_set{0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::smem_bytes)));
    attr_set.fetch_or(bit, std::memory_order_release);
  }
  const int64_t qblocks = (n + C::BM - 1) / C::BM;
  kern<<<dim3(unsigned(qblocks), unsigned(heads)), C::THREADS, C::smem_bytes, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

// mma.sync tuning variants (bench only); anything else runs the default of each head_dim.
template <class T>
void launch_config(const PrefillArgs& a, int64_t n, int64_t heads, int64_t D, int config, cudaStream_t stream) {
  if (D == 64) return launch<T, Cfg64>(a, n, heads, stream);
  switch (config) {
    case 1: return launch<T, Cfg<128, 2, 4, 64, 2, 1>>(a, n, heads, stream);
    case 2: return launch<T, Cfg<128, 2, 8, 32, 3, 1>>(a, n, heads, stream);
    case 3: return launch<T, Cfg<128, 2, 4, 32, 4, 2>>(a, n, heads, stream);
    case 4: return launch<T, Cfg<128, 2, 4, 32, 2, 2>>(a, n, heads, stream);
    case 5: return launch<T, Cfg<128, 1, 8, 64, 3, 1>>(a, n, heads, stream);
    default: return launch<T, Cfg128>(a, n, heads, stream);
  }
}

#ifdef TRIFORCE_PREFILL_WGMMA
// The wgmma kernel runs only on compute capability 9.0 exactly: sm_90a code
// loads on no other device. Cached per device (the property query is slow).
bool device_is_sm90() {
  static std::atomic<uint64_t> known{0}, yes{0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(known.load(std::memory_order_acquire) & bit)) {
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major == 9 && minor == 0) yes.fetch_or(bit, std::memory_order_release);
    known.fetch_or(bit, std::memory_order_release);
  }
  return (yes.load(std::memory_order_acquire) & bit) != 0;
}
#endif

// TRIFORCE_PREFILL_KERNEL=mma keeps the mma.sync kernel even where wgmma runs
// (a fallback without rebuilding); read once.
bool env_forces_mma() {
  static const bool forced = [] {
    const char* e = std::getenv("TRIFORCE_PREFILL_KERNEL");
    return e && std::strcmp(e, "mma") == 0;
  }();
  return forced;
}

std::atomic<int> g_backend{-1};  // -1: not read yet; else a PrefillBackend

}  // namespace

PrefillBackend parse_prefill_backend(const char* e) {
  if (!e || !*e || std::strcmp(e, "auto") == 0) return PrefillBackend::Auto;
  if (std::strcmp(e, "cudnn") == 0) return PrefillBackend::Cudnn;
  if (std::strcmp(e, "ours") == 0) return PrefillBackend::Ours;
  TF_FAIL("TRIFORCE_PREFILL_ATTENTION=" << e << ": expected auto, cudnn or ours");
}

PrefillBackend prefill_attention_backend() {
  int b = g_backend.load(std::memory_order_acquire);
  if (b < 0) {
    b = int(parse_prefill_backend(std::getenv("TRIFORCE_PREFILL_ATTENTION")));
    g_backend.store(b, std::memory_order_release);
  }
  return PrefillBackend(b);
}

void set_prefill_attention_backend(PrefillBackend b) { g_backend.store(int(b), std::memory_order_release); }

const char* prefill_backend_name(PrefillBackend b) {
  return b == PrefillBackend::Cudnn ? "cudnn" : b == PrefillBackend::Ours ? "ours" : "auto";
}

bool attention_prefill_uses_cudnn(const AttentionPrefillParams& p) {
  switch (prefill_attention_backend()) {
    case PrefillBackend::Ours: return false;
    case PrefillBackend::Cudnn: return true;
    default: return attention_prefill_cudnn_plan(p);
  }
}

bool attention_prefill_wgmma_available(int64_t head_dim) {
#ifdef TRIFORCE_PREFILL_WGMMA
  return head_dim == 128 && device_is_sm90();
#else
  (void)head_dim;
  return false;
#endif
}

double attention_prefill_flops(const AttentionPrefillParams& p) {
  // Query i sees off + i + 1 keys; two matrix products of 2 * head_dim FLOPs per (query, key, head).
  const double n = double(p.n), off = double(p.kv_length - p.n);
  const double pairs = n * off + n * (n + 1) / 2;
  return 4.0 * pairs * double(p.head_dim) * double(p.num_heads);
}

void attention_prefill_config(const AttentionPrefillParams& p, int config, cudaStream_t stream) {
  TF_CHECK(p.head_dim == 64 || p.head_dim == 128,
           "cuda::attention_prefill: head_dim " << p.head_dim << " (need 64 or 128)");
  TF_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
           "cuda::attention_prefill: " << p.num_heads << " heads is not a multiple of " << p.num_kv_heads
                                       << " kv heads");
  TF_CHECK(p.n >= 1 && p.kv_length >= p.n && p.capacity >= p.kv_length,
           "cuda::attention_prefill: need 1 <= n (" << p.n << ") <= kv_length (" << p.kv_length
                                                   << ") <= capacity (" << p.capacity << ")");
  TF_CHECK(p.kv_length < (int64_t(1) << 31) && p.num_heads <= 65535,
           "cuda::attention_prefill: kv_length " << p.kv_length << " or " << p.num_heads << " heads too large");
  TF_CHECK(p.q && p.k_cache && p.v_cache && p.out, "cuda::attention_prefill: null pointer");
  const int64_t hs = p.head_stride > 0 ? p.head_stride : p.capacity * p.head_dim;
  const int64_t ts = p.token_stride > 0 ? p.token_stride : p.head_dim;
  TF_CHECK(hs % 8 == 0 && ts % 8 == 0 && ts >= p.head_dim &&
               ((reinterpret_cast<uintptr_t>(p.k_cache) | reinterpret_cast<uintptr_t>(p.v_cache) |
                 reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.out)) & 15) == 0,
           "cuda::attention_prefill: q/out/KV must be 16-byte aligned with KV strides a multiple of 8 elements");
  if (config == kPrefillCudnn || (config == 0 && attention_prefill_uses_cudnn(p))) {
    if (config == 0 && !attention_prefill_cudnn_plan(p))  // TRIFORCE_PREFILL_ATTENTION=cudnn, and it cannot
      TF_FAIL("TRIFORCE_PREFILL_ATTENTION=cudnn: cuDNN cannot run this prefill attention ("
              << (cudnn_attention_available() ? cudnn_attention_stats().last_refusal : cudnn_attention_version())
              << "); use auto or ours");
    return attention_prefill_cudnn(p, stream);
  }
  if (config == kPrefillOurs) config = 0;
  PrefillArgs a;
  a.q = p.q;
  a.k = p.k_cache;
  a.v = p.v_cache;
  a.out = p.out;
  a.n = int(p.n);
  a.H = int(p.num_heads);
  a.G = int(p.num_heads / p.num_kv_heads);
  a.kv_length = p.kv_length;
  a.head_stride = hs;
  a.token_stride = ts;
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  const bool wgmma_ok = attention_prefill_wgmma_available(p.head_dim);
  if (config == kPrefillWgmma || config == kPrefillWgmma3)
    TF_CHECK(wgmma_ok, "cuda::attention_prefill: config " << config << " needs the sm_90a wgmma kernel (head_dim 128, "
                                                          << "an sm_90 device, a build with 90 among the CUDA architectures)");
  const bool use_wgmma =
      config == kPrefillWgmma || config == kPrefillWgmma3 || (config == 0 && wgmma_ok && !env_forces_mma());
#ifdef TRIFORCE_PREFILL_WGMMA
  if (use_wgmma) return detail::attention_prefill_wgmma(a, p.dtype, config == kPrefillWgmma3 ? 3 : 2, stream);
#else
  (void)use_wgmma;
#endif
  TF_DISPATCH_HALF(p.dtype, T, launch_config<T>(a, p.n, p.num_heads, p.head_dim, config, stream));
}

void attention_prefill(const AttentionPrefillParams& p, cudaStream_t stream) {
  attention_prefill_config(p, 0, stream);
}

}  // namespace tf::cuda
