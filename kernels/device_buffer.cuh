// Host-side helpers for driving the kernels from plain C++ (tests, later the
// CUDA ops): an owning device buffer and f32 <-> f16/bf16 host conversion.
// No CUDA-only syntax: g++ compiles this against cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common.cuh"
#include "core/half.h"
#include "core/tensor.h"

namespace tf::cuda {

// cudaMalloc'd bytes, freed on destruction; movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_, bytes_ = o.bytes_;
      o.ptr_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void* get() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* src, size_t n) { CUDA_CHECK(cudaMemcpy(ptr_, src, n, cudaMemcpyHostToDevice)); }
  void download(void* dst, size_t n) const { CUDA_CHECK(cudaMemcpy(dst, ptr_, n, cudaMemcpyDeviceToHost)); }
  // Every byte 0xFF: NaN for f32, f16 and bf16 alike (poison before a launch).
  void poison() { if (bytes_) CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_)); }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline uint16_t to_half_bits(float x, DType t) { return t == DType::F16 ? f32_to_f16(x) : f32_to_bf16(x); }
inline float from_half_bits(uint16_t h, DType t) { return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h); }

inline std::vector<uint16_t> to_half(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = to_half_bits(x[i], t);
  return o;
}
inline std::vector<float> from_half(const std::vector<uint16_t>& x, DType t) {
  std::vector<float> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = from_half_bits(x[i], t);
  return o;
}
// Round each value to dtype in place (so host references see what the device sees).
inline void round_to(std::vector<float>& x, DType t) {
  for (auto& v : x) v = from_half_bits(to_half_bits(v, t), t);
}

// Device copy of host values stored as dtype (f16/bf16) or f32/i32 as given.
inline DeviceBuffer upload_as(const std::vector<float>& x, DType t) {
  if (t == DType::F32) {
    DeviceBuffer b(x.size() * 4);
    b.upload(x.data(), x.size() * 4);
    return b;
  }
  auto h = to_half(x, t);
  DeviceBuffer b(h.size() * 2);
  b.upload(h.data(), h.size() * 2);
  return b;
}
inline std::vector<float> download_as(const DeviceBuffer& b, size_t count, DType t) {
  if (t == DType::F32) {
    std::vector<float> o(count);
    b.download(o.data(), count * 4);
    return o;
  }
  std::vector<uint16_t> h(count);
  b.download(h.data(), count * 2);
  return from_half(h, t);
}

}  // namespace tf::cuda
