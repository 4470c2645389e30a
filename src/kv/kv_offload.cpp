#include "kv/kv_offload.h"

#include <fstream>
#include <sstream>
#include <string>

#include "core/check.h"

#ifdef TRIFORCE_HAVE_CUDA
#include <cuda_runtime.h>

#include "device_release.cuh"
#include "stream.cuh"
#endif

namespace tf::kv_offload {

double host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

#ifndef TRIFORCE_HAVE_CUDA

namespace {
[[noreturn]] void no_cuda() { TF_FAIL("--offload-kv: this build has no CUDA backend"); }
}  // namespace

std::shared_ptr<void> alloc_pinned(size_t) { no_cuda(); }
void* staging_k(int) { no_cuda(); }
void* staging_v(int) { no_cuda(); }
void reserve(size_t) { no_cuda(); }
void begin_chunk(const HostLayout&, int64_t) { no_cuda(); }
void before_layer(const HostLayout&, int64_t, int64_t) { no_cuda(); }
void after_layer(const HostLayout&, int64_t, int64_t, int64_t) { no_cuda(); }
void stage(const HostLayout&, int64_t, int64_t) { no_cuda(); }
void release_staged() {}
void synchronize() {}
void copy_2d(void*, size_t, const void*, size_t, size_t, size_t) { no_cuda(); }

#else

namespace {

#define OFFLOAD_CHECK(expr) check_at((expr), __FILE__, __LINE__, #expr)
void check_at(cudaError_t e, const char* file, int line, const char* expr) {
  if (e != cudaSuccess)
    ::tf::fail_at(file, line,
                  std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + expr);
}

// The process-wide pipeline state: one copy stream, two staging slots of K and
// V, the arrival event of each slot and one event for "the compute stream got here".
struct Pipeline {
  cudaStream_t copy = nullptr;
  void* k[2] = {nullptr, nullptr};
  void* v[2] = {nullptr, nullptr};
  size_t bytes = 0;
  cudaEvent_t arrived[2] = {nullptr, nullptr};
  cudaEvent_t compute_mark = nullptr;
  int64_t prefetched = -1;  // the layer whose H2D was issued last in this chunk

  Pipeline() {
    // Non-blocking: the legacy stream must not serialize with the copies,
    // or nothing overlaps; the order comes from events alone.
    OFFLOAD_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    for (auto& e : arrived) OFFLOAD_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    OFFLOAD_CHECK(cudaEventCreateWithFlags(&compute_mark, cudaEventDisableTiming));
  }
  // Never destroyed: the process exit tears the context down, and freeing
  // after the CUDA runtime's own teardown fails. The staging slots are freed
  // before exit by release_staging_slots (release_device_state); the stream and
  // events stay, as pinned buffers freed later still wait on the copy stream.
};

Pipeline& pipe() {
  static Pipeline* p = new Pipeline();
  return *p;
}

void release_staging_slots() {  // errors ignored: it runs at exit
  Pipeline& p = pipe();
  cudaStreamSynchronize(p.copy);
  for (int s = 0; s < 2; ++s) {
    if (p.k[s]) cudaFree(p.k[s]);
    if (p.v[s]) cudaFree(p.v[s]);
    p.k[s] = p.v[s] = nullptr;
  }
  p.bytes = 0;
}

cudaStream_t compute() { return tf::cuda::compute_stream(); }

// The copy stream waits for everything queued on the compute stream so far.
void copy_after_compute() {
  Pipeline& p = pipe();
  OFFLOAD_CHECK(cudaEventRecord(p.compute_mark, compute()));
  OFFLOAD_CHECK(cudaStreamWaitEvent(p.copy, p.compute_mark, 0));
}

char* at(void* base, size_t off) { return static_cast<char*>(base) + off; }

// H2D of rows [0, len) of `layer` into its staging slot; records its arrival.
void fetch(const HostLayout& lay, int64_t layer, int64_t len, int slot) {
  Pipeline& p = pipe();
  const size_t off = size_t(layer - lay.first_layer) * lay.layer_bytes();
  if (len > 0) {
    const size_t w = size_t(len) * lay.row_bytes();
    OFFLOAD_CHECK(cudaMemcpy2DAsync(p.k[slot], lay.pitch(), at(lay.host_k, off), lay.pitch(), w,
                                    size_t(lay.kv_heads), cudaMemcpyHostToDevice, p.copy));
    OFFLOAD_CHECK(cudaMemcpy2DAsync(p.v[slot], lay.pitch(), at(lay.host_v, off), lay.pitch(), w,
                                    size_t(lay.kv_heads), cudaMemcpyHostToDevice, p.copy));
  }
  OFFLOAD_CHECK(cudaEventRecord(p.arrived[slot], p.copy));
}

}  // namespace

std::shared_ptr<void> alloc_pinned(size_t bytes) {
  void* ptr = nullptr;
  if (bytes == 0) return {};
  // Not zero-filled: only slots below the cache's length are ever read, and
  // each of those was written first (touching 70 GB would cost seconds).
  const cudaError_t e = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::ostringstream os;
    os << "--offload-kv: cannot pin " << double(bytes) / (1024.0 * 1024.0 * 1024.0)
       << " GiB of host memory for the KV cache (" << cudaGetErrorString(e) << "); lower --context or keep more "
       << "layers on the GPU (--on-chip-layers)";
    TF_FAIL(os.str());
  }
  // Queued D2H copies may still write into it; no throwing in a deleter.
  return std::shared_ptr<void>(ptr, [](void* q) {
    cudaStreamSynchronize(pipe().copy);
    cudaFreeHost(q);
  });
}

void reserve(size_t bytes) {
  Pipeline& p = pipe();
  if (bytes <= p.bytes) return;
  // The old slots may still be read by queued work.
  OFFLOAD_CHECK(cudaDeviceSynchronize());
  for (int s = 0; s < 2; ++s) {
    if (p.k[s]) OFFLOAD_CHECK(cudaFree(p.k[s]));
    if (p.v[s]) OFFLOAD_CHECK(cudaFree(p.v[s]));
    p.k[s] = p.v[s] = nullptr;
  }
  p.bytes = 0;
  for (int s = 0; s < 2; ++s) {
    for (void** d : {&p.k[s], &p.v[s]}) {
      const cudaError_t e = cudaMalloc(d, bytes);
      if (e != cudaSuccess) {
        cudaGetLastError();
        TF_FAIL("--offload-kv: cannot allocate the device staging buffers (4 x " << bytes
                                                                              << " bytes): " << cudaGetErrorString(e));
      }
    }
  }
  p.bytes = bytes;
  tf::cuda::at_device_release(release_staging_slots);
}

void* staging_k(int slot) { return pipe().k[slot]; }
void* staging_v(int slot) { return pipe().v[slot]; }

void begin_chunk(const HostLayout& lay, int64_t old_len) {
  reserve(lay.layer_bytes());
  Pipeline& p = pipe();
  p.prefetched = -1;
  if (lay.first_layer >= lay.layers) return;
  // The previous user of slot 0 (an earlier forward or a stage()) finished
  // with a D2H or a release on the copy stream, so this H2D follows it.
  fetch(lay, lay.first_layer, old_len, lay.slot_of(lay.first_layer));
  p.prefetched = lay.first_layer;
}

void before_layer(const HostLayout& lay, int64_t layer, int64_t old_len) {
  if (layer < lay.first_layer) return;
  Pipeline& p = pipe();
  TF_CHECK(p.prefetched >= layer, "KV offload: layer " << layer << " was never fetched (begin_chunk missing)");
  OFFLOAD_CHECK(cudaStreamWaitEvent(compute(), p.arrived[lay.slot_of(layer)], 0));
  const int64_t next = layer + 1;
  if (next < lay.layers && p.prefetched < next) {
    // The other slot was last read by layer - 1, whose D2H (behind its
    // attention) is already on the copy stream ahead of this H2D.
    fetch(lay, next, old_len, lay.slot_of(next));
    p.prefetched = next;
  }
}

void after_layer(const HostLayout& lay, int64_t layer, int64_t slot0, int64_t n) {
  if (layer < lay.first_layer) return;
  Pipeline& p = pipe();
  copy_after_compute();  // the write and the attention of this layer
  if (n <= 0) return;
  const int s = lay.slot_of(layer);
  const size_t off = size_t(layer - lay.first_layer) * lay.layer_bytes() + size_t(slot0) * lay.row_bytes();
  const size_t soff = size_t(slot0) * lay.row_bytes(), w = size_t(n) * lay.row_bytes();
  OFFLOAD_CHECK(cudaMemcpy2DAsync(at(lay.host_k, off), lay.pitch(), at(p.k[s], soff), lay.pitch(), w,
                                  size_t(lay.kv_heads), cudaMemcpyDeviceToHost, p.copy));
  OFFLOAD_CHECK(cudaMemcpy2DAsync(at(lay.host_v, off), lay.pitch(), at(p.v[s], soff), lay.pitch(), w,
                                  size_t(lay.kv_heads), cudaMemcpyDeviceToHost, p.copy));
}

void stage(const HostLayout& lay, int64_t layer, int64_t len) {
  TF_CHECK(layer >= lay.first_layer && layer < lay.layers, "KV offload: layer " << layer << " is not offloaded");
  reserve(lay.layer_bytes());
  Pipeline& p = pipe();
  const int s = lay.slot_of(layer);
  fetch(lay, layer, len, s);
  OFFLOAD_CHECK(cudaStreamWaitEvent(compute(), p.arrived[s], 0));
}

void release_staged() { copy_after_compute(); }

void synchronize() { OFFLOAD_CHECK(cudaStreamSynchronize(pipe().copy)); }

void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
  if (width == 0 || height == 0) return;
  synchronize();
  OFFLOAD_CHECK(cudaStreamSynchronize(compute()));
  OFFLOAD_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, compute()));
  OFFLOAD_CHECK(cudaStreamSynchronize(compute()));
}

#endif

}  // namespace tf::kv_offload
