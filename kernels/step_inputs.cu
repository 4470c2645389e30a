#include "common.cuh"
#include "pdl.cuh"
#include "step_inputs.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;  // elements a thread moves, all loaded before the wait
int64_t g_launches = 0;

// Block b moves elements [b, b + 1) x kThreads x kPerThread (ints first, then
// rows). Every load is issued before the PDL wait, so a block pays one round
// trip over the bus, however many elements it moves. The staging is the
// host's: no kernel writes it, so by kernels/pdl.cuh's rule it may be read
// before the wait; ld.global.cv fetches it again at every launch rather than
// trusting a cached line.
__global__ void __launch_bounds__(kThreads) step_inputs_kernel(StepInputsParams p) {
  const int64_t total = p.n_ints + p.n_rows, base = int64_t(blockIdx.x) * kThreads * kPerThread + threadIdx.x;
  uint32_t v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * kThreads;
    v[k] = i < p.n_ints ? uint32_t(__ldcv(p.ints_host + i))
           : i < total  ? __float_as_uint(__ldcv(p.rows_host + (i - p.n_ints)))
                        : 0u;
  }
  pdl_wait();  // the previous step's argmax wrote *token; a queued kernel may still read the buffers
  pdl_trigger();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * kThreads;
    if (i < p.n_ints) p.ints[i] = i == 0 && p.token ? *p.token : int32_t(v[k]);
    else if (i < total) p.rows[i - p.n_ints] = __uint_as_float(v[k]);
  }
}

// A pinned host buffer as the kernel addresses it: under unified addressing
// the host pointer itself (cudaMallocHost memory needs no
// cudaHostGetDevicePointer there). Memory that is not pinned is refused.
template <class T>
const T* mapped(const T* host, const char* what) {
  static const bool uva = [] {
    int dev = 0, on = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&on, cudaDevAttrUnifiedAddressing, dev) == cudaSuccess && on == 1;
  }();
  TF_CHECK(uva, "cuda::step_inputs: the device has no unified addressing, so it cannot read " << what);
  cudaPointerAttributes a{};
  // A query, not stream work: relaxed, so that a step graph's capture on this thread allows it.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t e = cudaPointerGetAttributes(&a, host);
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (e != cudaSuccess) cudaGetLastError();
  TF_CHECK(e == cudaSuccess && a.type == cudaMemoryTypeHost,
           "cuda::step_inputs: " << what << " is not pinned host memory");
  return host;
}

}  // namespace

void step_inputs(const StepInputsParams& p, cudaStream_t stream) {
  TF_CHECK(p.n_ints >= 0 && p.n_rows >= 0 && (p.n_ints == 0 || (p.ints_host && p.ints)) &&
               (p.n_rows == 0 || (p.rows_host && p.rows)) && (!p.token || p.n_ints > 0),
           "cuda::step_inputs: bad params (n_ints " << p.n_ints << ", n_rows " << p.n_rows << ")");
  if (p.n_ints + p.n_rows == 0) return;
  StepInputsParams q = p;
  if (q.n_ints) q.ints_host = mapped(p.ints_host, "the staged ints");
  if (q.n_rows) q.rows_host = mapped(p.rows_host, "the staged cos/sin rows");
  const int64_t per_block = int64_t(kThreads) * kPerThread;
  launch_step(step_inputs_kernel, dim3(unsigned((p.n_ints + p.n_rows + per_block - 1) / per_block)), dim3(kThreads), 0,
              stream, q);
  CUDA_CHECK_LAUNCH();
  __atomic_add_fetch(&g_launches, 1, __ATOMIC_RELAXED);
}

int64_t step_inputs_launches() { return __atomic_load_n(&g_launches, __ATOMIC_RELAXED); }

}  // namespace tf::cuda
