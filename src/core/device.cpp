#include "core/device.h"

#include <cstring>

#include "core/half.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "device_release.cuh"
#include "stream.cuh"
#endif

namespace tf {

namespace {

#ifdef TRIFORCE_HAVE_CUDA
void cuda_ok(cudaError_t e, const char* what, size_t bytes = 0) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorMemoryAllocation)
    TF_FAIL("CUDA out of memory: " << what << " of " << bytes << " bytes failed (the memory plan should have "
                                   << "refused this request; see `triforce info`)");
  TF_FAIL("CUDA error " << cudaGetErrorName(e) << " in " << what << ": " << cudaGetErrorString(e));
}
cudaMemcpyKind kind_of(Device dst, Device src) {
  if (dst == Device::CUDA && src == Device::CUDA) return cudaMemcpyDeviceToDevice;
  if (dst == Device::CUDA) return cudaMemcpyHostToDevice;
  if (src == Device::CUDA) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}
#else
[[noreturn]] void no_cuda(const char* what) {
  TF_FAIL(what << ": Device::CUDA requested but triforce was built without CUDA");
}
#endif

}  // namespace

bool cuda_available() {
#ifdef TRIFORCE_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

Tensor empty_tensor(Device dev, DType dt, std::vector<int64_t> shape) {
  if (dev == Device::CPU) return Tensor::cpu(dt, std::move(shape));
  Tensor t;
  t.dtype = dt;
  t.device = Device::CUDA;
  t.shape = std::move(shape);
#ifdef TRIFORCE_HAVE_CUDA
  void* p = nullptr;
  const size_t bytes = t.bytes();
  if (bytes) {
    cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc", bytes);
    cuda_ok(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) {
    if (q) cudaFree(q);
  });
  return t;
#else
  no_cuda("empty_tensor");
#endif
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef TRIFORCE_HAVE_CUDA
  cudaStream_t s = cuda::compute_stream();
  cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind_of(dst_dev, src_dev), s), "cudaMemcpyAsync");
  // A host source may be reused and a host destination read as soon as we return.
  if (dst_dev == Device::CPU || src_dev == Device::CPU) cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
#else
  no_cuda("copy_bytes");
#endif
}

void copy_bytes_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
#ifdef TRIFORCE_HAVE_CUDA
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind_of(dst_dev, src_dev), cuda::compute_stream()), "cudaMemcpyAsync");
#else
  copy_bytes(dst, dst_dev, src, src_dev, bytes);
#endif
}

void release_device_state() {
#ifdef TRIFORCE_HAVE_CUDA
  cuda::release_device_state();
#endif
}

void stream_synchronize() {
#ifdef TRIFORCE_HAVE_CUDA
  if (cuda_available()) cuda_ok(cudaStreamSynchronize(cuda::compute_stream()), "cudaStreamSynchronize");
#endif
}

struct StreamMark::State {
  void* event = nullptr;  // cudaEvent_t, made on the first record
  bool recorded = false;
  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
#ifdef TRIFORCE_HAVE_CUDA
    if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
#endif
  }
};

StreamMark::StreamMark() : s_(std::make_shared<State>()) {}

void StreamMark::record() {
#ifdef TRIFORCE_HAVE_CUDA
  if (!s_->event) {
    cudaEvent_t e = nullptr;
    cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    s_->event = e;
  }
  cuda_ok(cudaEventRecord(static_cast<cudaEvent_t>(s_->event), cuda::compute_stream()), "cudaEventRecord");
  s_->recorded = true;
#endif
}

void StreamMark::wait() const {
#ifdef TRIFORCE_HAVE_CUDA
  if (s_->recorded) cuda_ok(cudaEventSynchronize(static_cast<cudaEvent_t>(s_->event)), "cudaEventSynchronize");
#endif
}

Tensor pinned_tensor(DType dt, std::vector<int64_t> shape) {
#ifdef TRIFORCE_HAVE_CUDA
  Tensor t;
  t.dtype = dt;
  t.device = Device::CPU;
  t.shape = std::move(shape);
  void* p = nullptr;
  const size_t bytes = t.bytes();
  if (bytes) {
    cuda_ok(cudaMallocHost(&p, bytes), "cudaMallocHost", bytes);
    std::memset(p, 0, bytes);
  }
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) {
    if (q) cudaFreeHost(q);
  });
  return t;
#else
  return Tensor::cpu(dt, std::move(shape));
#endif
}

void copy_tensor(Tensor& dst, const Tensor& src) {
  TF_CHECK(dst.bytes() == src.bytes(), "copy_tensor: " << shape_str(src.shape) << " " << dtype_name(src.dtype)
                                                       << " into " << shape_str(dst.shape) << " "
                                                       << dtype_name(dst.dtype));
  copy_bytes(dst.data, dst.device, src.data, src.device, src.bytes());
}

void fill_zero(Tensor& t) {
  if (t.device == Device::CPU) {
    std::memset(t.data, 0, t.bytes());
    return;
  }
#ifdef TRIFORCE_HAVE_CUDA
  cuda_ok(cudaMemsetAsync(t.data, 0, t.bytes(), cuda::compute_stream()), "cudaMemsetAsync");
#else
  no_cuda("fill_zero");
#endif
}

void device_synchronize() {
#ifdef TRIFORCE_HAVE_CUDA
  if (cuda_available()) cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

void device_memory(size_t& free_bytes, size_t& total_bytes) {
  free_bytes = total_bytes = 0;
#ifdef TRIFORCE_HAVE_CUDA
  if (cuda_available()) cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
#endif
}

Tensor to_host_f32(const Tensor& t) {
  Tensor h = Tensor::cpu(t.dtype, t.shape);
  copy_bytes(h.data, Device::CPU, t.data, t.device, t.bytes());
  if (t.dtype == DType::F32 || t.dtype == DType::I32) return h;
  Tensor f = Tensor::cpu(DType::F32, t.shape);
  const uint16_t* s = h.ptr<uint16_t>();
  float* d = f.ptr<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) d[i] = t.dtype == DType::F16 ? f16_to_f32(s[i]) : bf16_to_f32(s[i]);
  return f;
}

Tensor to_device_as(const Tensor& host, Device dev, DType dt) {
  TF_CHECK(host.device == Device::CPU && host.dtype == DType::F32,
           "to_device_as: expected a host f32 tensor, got " << dtype_name(host.dtype));
  Tensor out = empty_tensor(dev, dt, host.shape);
  if (dt == DType::F32) {
    copy_tensor(out, host);
    return out;
  }
  TF_CHECK(dt == DType::F16 || dt == DType::BF16, "to_device_as: unsupported dtype " << dtype_name(dt));
  std::vector<uint16_t> h(static_cast<size_t>(host.numel()));
  const float* s = host.ptr<float>();
  for (size_t i = 0; i < h.size(); ++i) h[i] = dt == DType::F16 ? f32_to_f16(s[i]) : f32_to_bf16(s[i]);
  copy_bytes(out.data, dev, h.data(), Device::CPU, h.size() * 2);
  return out;
}

}  // namespace tf
