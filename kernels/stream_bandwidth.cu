#include "stream_bandwidth.cuh"

#include <cstdint>
#include <vector>

#include "common.cuh"
#include "device_buffer.cuh"
#include "device_props.cuh"
#include "gemm_skinny_tile.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 8;         // register mode: 16-byte loads a thread keeps in flight
constexpr int kStages = 4;                // bulk mode: shared-memory stages in the ring
constexpr int kStageBytes = 32 * 1024;    // bytes a bulk copy moves
constexpr int kRingBytes = kStages * kStageBytes;
constexpr uint32_t kFillWord = 0x01010101u;  // the buffer is memset to 0x01
constexpr int64_t kHbmBytes = int64_t(1) << 30;

// Wrapping sums, so the order of the additions does not matter.
__device__ __forceinline__ void add_block_sum(uint32_t s, uint32_t* sums) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(sums + blockIdx.x, s);
}

__global__ void __launch_bounds__(kThreads) stream_registers_kernel(const uint4* src, int64_t vecs_per_block,
                                                                    uint32_t* sums) {
  const uint4* p = src + int64_t(blockIdx.x) * vecs_per_block;
  uint32_t s = 0;
  for (int64_t base = 0; base < vecs_per_block; base += int64_t(kLoadsInFlight) * kThreads) {
    uint4 v[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
      v[u] = i < vecs_per_block ? skinny::ld_stream(p + i) : make_uint4(0, 0, 0, 0);  // the GEMM's weight load
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) s += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  add_block_sum(s, sums);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
// Polls the stage's mbarrier for the given phase parity; false after ~2^24 polls (a broken pipeline ends the
// probe with wrong sums instead of hanging the GPU).
__device__ __forceinline__ bool wait_stage(uint32_t bar, uint32_t parity) {
  for (int polls = 0; polls < (1 << 24); ++polls) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return true;
  }
  return false;
}
#endif

// Thread 0 keeps kStages bulk copies in flight; every thread waits for a
// stage's bytes on its mbarrier, sums its vectors of the stage, and the block
// syncs before the stage is refilled (the proxy fence orders those reads
// before the next copy's writes).
__global__ void __launch_bounds__(kThreads) stream_bulk_kernel(const char* src, int64_t bytes_per_block,
                                                               uint32_t* sums, unsigned* timeouts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[kStages];
  const char* p = src + int64_t(blockIdx.x) * bytes_per_block;
  const int64_t stages = bytes_per_block / kStageBytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int64_t k) {
    const int s = int(k % kStages);
    const uint32_t bar = smem_u32(&bars[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(kStageBytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            smem_u32(ring + s * kStageBytes)),
        "l"(p + k * kStageBytes), "r"(kStageBytes), "r"(bar)
        : "memory");
  };
  if (threadIdx.x == 0)
    for (int64_t k = 0; k < stages && k < kStages; ++k) issue(k);
  uint32_t sum = 0;
  bool ok = true;
  for (int64_t k = 0; k < stages; ++k) {
    const int s = int(k % kStages);
    ok = ok && wait_stage(smem_u32(&bars[s]), uint32_t((k / kStages) & 1));
    const uint4* st = reinterpret_cast<const uint4*>(ring + s * kStageBytes);
    for (int i = threadIdx.x; i < kStageBytes / 16; i += kThreads) {
      const uint4 v = st[i];
      sum += v.x + v.y + v.z + v.w;
    }
    __syncthreads();
    if (threadIdx.x == 0 && k + kStages < stages) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      issue(k + kStages);
    }
  }
  if (!ok && threadIdx.x == 0) atomicAdd(timeouts, 1u);
  add_block_sum(sum, sums);
#else
  if (threadIdx.x == 0) atomicAdd(timeouts, 1u);
#endif
}

}  // namespace

double stream_us(int blocks, int64_t bytes_per_block, StreamMode mode, bool from_l2) {
  const int sms = current_sm_count();
  TF_CHECK(blocks >= 1 && blocks <= sms, "stream_us: " << blocks << " blocks (one an SM, at most " << sms << ")");
  TF_CHECK(bytes_per_block > 0 && bytes_per_block % kStageBytes == 0,
           "stream_us: " << bytes_per_block << " bytes a block (a multiple of " << kStageBytes << ")");
  TF_CHECK(2 * int64_t(blocks) * bytes_per_block <= kHbmBytes,
           "stream_us: " << blocks << " x " << bytes_per_block << " bytes, twice, exceed the " << kHbmBytes << "-byte buffer");
  if (mode == kBulkCopies && current_cc_major() < 9) return -1.0;
  DeviceBuffer buf{size_t(kHbmBytes)}, sums{sizeof(uint32_t) * size_t(blocks)}, timeouts{sizeof(unsigned)};
  CUDA_CHECK(cudaMemset(buf.get(), 0x01, size_t(kHbmBytes)));
  CUDA_CHECK(cudaMemset(timeouts.get(), 0, sizeof(unsigned)));
  // Both modes take the ring's shared memory, so that two blocks never share an SM.
  const size_t smem = size_t(kRingBytes);
  CUDA_CHECK(cudaFuncSetAttribute(stream_registers_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(stream_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const char* base = static_cast<const char*>(buf.get());
  const int64_t region = int64_t(blocks) * bytes_per_block;
  auto launch = [&](const char* src) {
    if (mode == kRegisterLoads)
      stream_registers_kernel<<<blocks, kThreads, smem>>>(reinterpret_cast<const uint4*>(src), bytes_per_block / 16,
                                                          sums.as<uint32_t>());
    else
      stream_bulk_kernel<<<blocks, kThreads, smem>>>(src, bytes_per_block, sums.as<uint32_t>(),
                                                     timeouts.as<unsigned>());
    CUDA_CHECK_LAUNCH();
  };
  // From HBM: the warm-up reads the buffer's last region, the timed run its first, which the 1 GiB fill
  // wrote long before its tail (L2 holds tens of MB). From L2: the warm-up reads the very region timed.
  launch(from_l2 ? base : base + (kHbmBytes - region) / 16 * 16);
  CUDA_CHECK(cudaMemset(sums.get(), 0, sums.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer t;
  t.start();
  launch(base);
  const double us = t.stop_us();
  std::vector<uint32_t> got(static_cast<size_t>(blocks));
  sums.download(got.data(), got.size() * sizeof(uint32_t));
  unsigned stalls = 0;
  timeouts.download(&stalls, sizeof(stalls));
  TF_CHECK(stalls == 0, "stream_us: a bulk-copy stage never completed (" << stalls << " blocks)");
  const uint32_t want = uint32_t(uint64_t(bytes_per_block / 4) * kFillWord);
  for (int i = 0; i < blocks; ++i)
    TF_CHECK(got[size_t(i)] == want, "stream_us: block " << i << " summed " << got[size_t(i)] << ", expected " << want
                                                         << ": it did not read every byte once");
  return us;
}

}  // namespace tf::cuda
