// Device memory for Tensors. Host builds can name Device::CUDA but any attempt
// to allocate or copy there fails with one line; CUDA builds use cudaMalloc
// and copies on cuda::compute_stream(), the stream every forward launch goes
// on: a device-to-device copy is queued in order, and a copy with a host end
// waits for the stream, so a host reader never sees a half-finished copy.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tf {

bool cuda_available();  // built with CUDA and a device is visible

// Zero-initialised tensor on `dev`.
Tensor empty_tensor(Device dev, DType dt, std::vector<int64_t> shape);
// Byte copy between any two devices; dst.bytes() == src.bytes() required.
void copy_tensor(Tensor& dst, const Tensor& src);
// Raw byte copies (for caches and small uploads).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void fill_zero(Tensor& t);
// Page-locked host memory (Device::CPU), which a copy inside a CUDA graph needs;
// plain host memory on CPU builds.
Tensor pinned_tensor(DType dt, std::vector<int64_t> shape);
// A copy queued on the compute stream that does not wait (for captured work;
// the host end must be pinned and stay untouched until the stream is synced).
void copy_bytes_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
// Waits for the compute stream (no-op on CPU builds).
void stream_synchronize();
// A point of the compute stream the host can wait for (a CUDA event): lets
// the host refill a pinned buffer that an async copy reads, once that copy
// has run, instead of blocking on the copy itself. Copies of a StreamMark
// share its state (as copies of its owner share that owner's buffers): a wait
// through any of them waits for the last record through any. The event is
// made on the first record(), so a mark that is never recorded (a CPU model)
// touches no device. No-op without CUDA.
class StreamMark {
 public:
  StreamMark();
  void record();      // the stream's current end (never inside a graph capture)
  void wait() const;  // until the stream has passed the last record(); at once if none
 private:
  struct State;
  std::shared_ptr<State> s_;
};
// Waits for every queued device op (no-op on CPU builds).
void device_synchronize();
// Bytes free and total on the current CUDA device (0, 0 without CUDA).
void device_memory(size_t& free_bytes, size_t& total_bytes);
// Frees the process-lifetime device state (cuBLAS/cuBLASLt/cuDNN handles and
// workspaces, the split-KV and gather scratch, the KV offload staging slots)
// while the CUDA context is still alive: main and the GPU tests call it before
// exit so that compute-sanitizer's leak check reports only real leaks. Later
// use makes the state again. No-op without CUDA; never throws.
void release_device_state();

// A host f32 copy of any tensor (converts f16/bf16; i32 is not converted).
Tensor to_host_f32(const Tensor& t);
// A copy of a host f32 tensor on `dev` stored as `dt` (f32/f16/bf16).
Tensor to_device_as(const Tensor& host_f32, Device dev, DType dt);

}  // namespace tf
