#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common.cuh"
#include "device_release.cuh"
#include "gemm.cuh"

namespace tf::cuda {
namespace {

// Which policy a process starts with when TRIFORCE_GEMM_ALGO is unset.
constexpr GemmAlgo kDefaultGemmAlgo = GemmAlgo::Cublas;
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // what cuBLAS recommends on Hopper
constexpr double kTieFraction = 0.02;                   // tuned: the lowest candidate within 2% of the best
constexpr int kAutoUntimed = -3;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F32: return CUDA_R_32F;
    default: TF_FAIL("cuda::gemm: unsupported dtype " << dtype_name(t));
  }
}

int current_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  TF_CHECK(dev >= 0 && dev < 64, "cuda::gemm: device index " << dev << " out of range");
  return dev;
}

// One handle per device for the process (cuBLAS handles are expensive to make).
cublasHandle_t cublas_handles[64] = {};

void release_cublas_handles() {  // errors ignored: it runs at exit
  for (cublasHandle_t& h : cublas_handles)
    if (h) cublasDestroy(h), h = nullptr;
}

cublasHandle_t handle_for_current_device() {
  const int dev = current_device();
  if (!cublas_handles[dev]) {
    CUBLAS_CHECK(cublasCreate(&cublas_handles[dev]));
    CUBLAS_CHECK(cublasSetMathMode(cublas_handles[dev], CUBLAS_DEFAULT_MATH));
    at_device_release(release_cublas_handles);
  }
  return cublas_handles[dev];
}

void run_cublas(const GemmParams& p, cudaStream_t stream) {
  cublasHandle_t h = handle_for_current_device();
  CUBLAS_CHECK(cublasSetStream(h, stream));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(p.out), int(p.n), int(p.in), &alpha, p.w,
                            cuda_type(p.dtype), int(p.in), p.x, cuda_type(p.dtype), int(p.in), &beta, p.y,
                            cuda_type(p.y_dtype), int(p.out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The largest power of two (<= 256) dividing every operand address: cuBLASLt's algorithms
// assume the alignment the heuristic was told, so it is part of the shape.
int64_t alignment_of(const GemmParams& p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.w) |
                      reinterpret_cast<uintptr_t>(p.y);
  int64_t al = 256;
  while (al > 1 && (a & uintptr_t(al - 1))) al >>= 1;
  return al;
}

using ShapeKey = std::array<int64_t, 7>;

// A shape's cuBLASLt descriptors and heuristic candidates (kept for the process).
struct LtShape {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  int tuned = -2;  // -2: not timed yet; -1: none; else the candidate index
  int auto_pick = kAutoUntimed;  // auto: kGemmChoiceCublas or a candidate index, once timed
};

struct LtState {
  std::mutex mu;
  cublasLtHandle_t handles[64] = {};
  void* workspaces[64] = {};
  std::map<ShapeKey, LtShape> shapes;
};
LtState& lt_state() {
  static LtState* s = new LtState;  // never destroyed: release_lt_state frees its contents before exit
  return *s;
}

void release_lt_state() {  // errors ignored: it runs at exit
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [key, sh] : s.shapes) {
    cublasLtMatrixLayoutDestroy(sh.a), cublasLtMatrixLayoutDestroy(sh.b), cublasLtMatrixLayoutDestroy(sh.c);
    cublasLtMatmulDescDestroy(sh.desc);
  }
  s.shapes.clear();
  for (int d = 0; d < 64; ++d) {
    if (s.workspaces[d]) cudaFree(s.workspaces[d]), s.workspaces[d] = nullptr;
    if (s.handles[d]) cublasLtDestroy(s.handles[d]), s.handles[d] = nullptr;
  }
}

// The shape's descriptors and candidates, made on first sight. Called with s.mu held.
LtShape& lt_shape(LtState& s, const GemmParams& p, int dev) {
  const int64_t align = alignment_of(p);
  const ShapeKey key{dev, int64_t(p.dtype), int64_t(p.y_dtype), p.n, p.in, p.out, align};
  auto it = s.shapes.find(key);
  if (it != s.shapes.end()) return it->second;
  if (!s.handles[dev]) CUBLAS_CHECK(cublasLtCreate(&s.handles[dev]));
  if (!s.workspaces[dev]) CUDA_CHECK(cudaMalloc(&s.workspaces[dev], kLtWorkspaceBytes));
  at_device_release(release_lt_state);
  LtShape sh;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&sh.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(sh.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(sh.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major: A = W as stored [in, out] (op T), B = x [in, n], C = D = y [out, n].
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh.a, cuda_type(p.dtype), uint64_t(p.in), uint64_t(p.out), p.in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh.b, cuda_type(p.dtype), uint64_t(p.in), uint64_t(p.n), p.in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh.c, cuda_type(p.y_dtype), uint64_t(p.out), uint64_t(p.n), p.out));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  const uint32_t al = uint32_t(align);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
  // Split-K partial sums reduced in the output type (bf16/f16) or in place in the output buffer round
  // each partial: on the H200 such a candidate missed the fp32-accumulation tolerance by 3 bf16 ulps
  // (test_kernels_gemm_algo, n=77 in=264 out=136). Only unsplit or fp32-reduced algorithms are offered.
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                    sizeof(reductions)));
  sh.candidates.resize(kGemmLtCandidates);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s.handles[dev], sh.desc, sh.a, sh.b, sh.c, sh.c, pref,
                                                           kGemmLtCandidates, sh.candidates.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  sh.candidates.resize(st == CUBLAS_STATUS_SUCCESS ? size_t(found) : 0);
  return s.shapes.emplace(key, std::move(sh)).first->second;
}

void run_lt(LtState& s, const LtShape& sh, int index, const GemmParams& p, int dev, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(s.handles[dev], sh.desc, &alpha, p.w, sh.a, p.x, sh.b, &beta, p.y, sh.c, p.y, sh.c,
                              &sh.candidates[size_t(index)].algo, s.workspaces[dev], kLtWorkspaceBytes, stream));
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
  return cap != cudaStreamCaptureStatusNone;
}

// The median of 3 timed runs of `run` (after 1 warm-up) on stream, in ms.
template <class Run>
float median_ms(Run run, cudaStream_t stream) {
  cudaEvent_t e[2];
  for (auto& ev : e) CUDA_CHECK(cudaEventCreate(&ev));
  run();  // warm-up
  float t[3];
  for (int r = 0; r < 3; ++r) {
    CUDA_CHECK(cudaEventRecord(e[0], stream));
    run();
    CUDA_CHECK(cudaEventRecord(e[1], stream));
    CUDA_CHECK(cudaEventSynchronize(e[1]));
    CUDA_CHECK(cudaEventElapsedTime(&t[r], e[0], e[1]));
  }
  for (auto& ev : e) cudaEventDestroy(ev);
  std::sort(t, t + 3);
  return t[1];
}

// The medians of every cuBLASLt candidate of sh on p's buffers.
std::vector<float> time_candidates(LtState& s, const LtShape& sh, const GemmParams& p, int dev, cudaStream_t stream) {
  std::vector<float> ms(sh.candidates.size());
  for (size_t i = 0; i < sh.candidates.size(); ++i)
    ms[i] = median_ms([&] { run_lt(s, sh, int(i), p, dev, stream); }, stream);
  return ms;
}

// Times every candidate of sh on p's buffers (1 warm-up + 3 runs each, the median); sets sh.tuned.
void tune(LtState& s, LtShape& sh, const GemmParams& p, int dev, cudaStream_t stream) {
  if (sh.candidates.empty() || capturing(stream)) {  // nothing to time, or no timing allowed
    sh.tuned = sh.candidates.empty() ? -1 : 0;
    return;
  }
  const std::vector<float> best = time_candidates(s, sh, p, dev, stream);
  const float fastest = *std::min_element(best.begin(), best.end());
  sh.tuned = 0;
  while (best[size_t(sh.tuned)] > fastest * float(1.0 + kTieFraction)) ++sh.tuned;
}

// auto: cublasGemmEx and every cuBLASLt candidate timed on p's buffers; the
// fastest kept for the shape. cublasGemmEx wins any tie within kTieFraction
// (the default stays unless a candidate is clearly faster), then the lowest
// candidate, so near-ties resolve the same way run after run. Under stream
// capture nothing can be timed: cublasGemmEx, and timed at the next eager call.
int auto_choice(LtState& s, LtShape& sh, const GemmParams& p, int dev, cudaStream_t stream) {
  if (sh.auto_pick != kAutoUntimed) return sh.auto_pick;
  if (capturing(stream)) return kGemmChoiceCublas;
  const float cublas_ms = median_ms([&] { run_cublas(p, stream); }, stream);
  const std::vector<float> lt = time_candidates(s, sh, p, dev, stream);
  const float fastest = std::min(cublas_ms, lt.empty() ? cublas_ms : *std::min_element(lt.begin(), lt.end()));
  const float limit = fastest * float(1.0 + kTieFraction);
  sh.auto_pick = kGemmChoiceCublas;
  if (cublas_ms > limit) {
    int i = 0;
    while (lt[size_t(i)] > limit) ++i;
    sh.auto_pick = i;
  }
  return sh.auto_pick;
}

void check(const GemmParams& p) {
  TF_CHECK(p.x && p.w && p.y && p.in > 0, "cuda::gemm: bad params");
  TF_CHECK(p.y_dtype == p.dtype || p.y_dtype == DType::F32, "cuda::gemm: y must be the input dtype or f32");
}

std::atomic<int> g_algo{-1};  // -1: not read yet; else a GemmAlgo

}  // namespace

GemmAlgo parse_gemm_algo(const char* e) {
  if (!e || !*e) return kDefaultGemmAlgo;
  if (std::strcmp(e, "cublas") == 0) return GemmAlgo::Cublas;
  if (std::strcmp(e, "lt") == 0) return GemmAlgo::Lt;
  if (std::strcmp(e, "tuned") == 0) return GemmAlgo::Tuned;
  if (std::strcmp(e, "auto") == 0) return GemmAlgo::Auto;
  TF_FAIL("TRIFORCE_GEMM_ALGO=" << e << ": expected cublas, lt, tuned or auto");
}

GemmAlgo gemm_algo() {
  int a = g_algo.load(std::memory_order_acquire);
  if (a < 0) {
    a = int(parse_gemm_algo(std::getenv("TRIFORCE_GEMM_ALGO")));
    g_algo.store(a, std::memory_order_release);
  }
  return GemmAlgo(a);
}

void set_gemm_algo(GemmAlgo a) { g_algo.store(int(a), std::memory_order_release); }

const char* gemm_algo_name(GemmAlgo a) {
  return a == GemmAlgo::Lt ? "lt" : a == GemmAlgo::Tuned ? "tuned" : a == GemmAlgo::Auto ? "auto" : "cublas";
}

int gemm_lt_candidates(const GemmParams& p) {
  check(p);
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return int(lt_shape(s, p, current_device()).candidates.size());
}

int gemm_tuned_candidate(const GemmParams& p, cudaStream_t stream) {
  check(p);
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int dev = current_device();
  LtShape& sh = lt_shape(s, p, dev);
  if (sh.tuned == -2) tune(s, sh, p, dev, stream);
  return sh.tuned;
}

int gemm_auto_choice(const GemmParams& p, cudaStream_t stream) {
  check(p);
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int dev = current_device();
  return auto_choice(s, lt_shape(s, p, dev), p, dev, stream);
}

void gemm_choice(const GemmParams& p, int choice, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  check(p);
  if (choice == kGemmChoiceCublas) return run_cublas(p, stream);
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int dev = current_device();
  LtShape& sh = lt_shape(s, p, dev);
  if (choice == kGemmChoiceAuto) {
    choice = auto_choice(s, sh, p, dev, stream);
    if (choice == kGemmChoiceCublas) return run_cublas(p, stream);
  }
  if (choice == kGemmChoiceTuned) {
    if (sh.tuned == -2) tune(s, sh, p, dev, stream);
    if (sh.tuned < 0) return run_cublas(p, stream);
    choice = sh.tuned;
  }
  TF_CHECK(choice >= 0 && choice < int(sh.candidates.size()),
           "cuda::gemm: cuBLASLt candidate " << choice << " of " << sh.candidates.size() << " for n=" << p.n
                                             << " in=" << p.in << " out=" << p.out);
  run_lt(s, sh, choice, p, dev, stream);
}

void gemm(const GemmParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.out == 0) return;
  check(p);
  switch (gemm_algo()) {
    case GemmAlgo::Cublas: return run_cublas(p, stream);
    case GemmAlgo::Tuned: return gemm_choice(p, kGemmChoiceTuned, stream);
    case GemmAlgo::Auto: return gemm_choice(p, kGemmChoiceAuto, stream);
    case GemmAlgo::Lt: {
      LtState& s = lt_state();
      std::lock_guard<std::mutex> lock(s.mu);
      const int dev = current_device();
      const LtShape& sh = lt_shape(s, p, dev);
      if (sh.candidates.empty()) return run_cublas(p, stream);
      return run_lt(s, sh, 0, p, dev, stream);
    }
  }
}

}  // namespace tf::cuda
