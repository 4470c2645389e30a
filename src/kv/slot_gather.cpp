#include "kv/slot_gather.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "device_release.cuh"
#include "kv_gather.cuh"
#include "stream.cuh"
#endif

namespace tf {

namespace {

// Keys are stored post-RoPE; RoPE rotates each pair (i, i + half), so one more
// rotation by delta moves a key from position p to p + delta.
void rerotate(float* k, const std::vector<float>& inv_freq, int64_t delta) {
  const int64_t half = int64_t(inv_freq.size());
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(inv_freq[size_t(i)]) * double(delta);
    const double c = std::cos(a), s = std::sin(a);
    const double x1 = k[i], x2 = k[i + half];
    k[i] = float(x1 * c - x2 * s);
    k[i + half] = float(x2 * c + x1 * s);
  }
}

#ifdef TRIFORCE_HAVE_CUDA
// The gather's index arrays go to one grow-only device buffer per process, copied
// in stream order: a cudaMalloc + cudaFree (and a device sync) per call made every
// StreamingLLM eviction of the draft cost hundreds of microseconds. Kept for the
// process and freed by release_device_state before exit (a static destructor would
// run after the CUDA context is gone).
Tensor* index_scratch_buf = nullptr;

void release_index_scratch() {
  delete index_scratch_buf;
  index_scratch_buf = nullptr;
}

uint8_t* index_scratch(size_t bytes) {
  Tensor*& buf = index_scratch_buf;
  if (!buf || size_t(buf->bytes()) < bytes) {
    if (buf) {
      device_synchronize();  // earlier gathers may still read the old buffer
      delete buf;
      buf = nullptr;
    }
    buf = new Tensor(empty_tensor(Device::CUDA, DType::I32, {int64_t((std::max<size_t>(bytes, 1 << 16) + 3) / 4)}));
    cuda::at_device_release(release_index_scratch);
  }
  return static_cast<uint8_t*>(buf->data);
}

size_t align16(size_t n) { return (n + 15) / 16 * 16; }
#endif

}  // namespace

void gather_slots(const FullKVCache& src, FullKVCache& dst, const SlotGather& g) {
  const int64_t L = dst.num_layers(), H = src.num_kv_heads(), D = src.head_dim();
  TF_CHECK(&src != &dst, "gather_slots: source and destination are the same cache");
  TF_CHECK(src.num_layers() >= L && dst.num_kv_heads() == H && dst.head_dim() == D && src.device() == dst.device() &&
               src.dtype() == dst.dtype(),
           "gather_slots: caches of different geometry, device or dtype");
  TF_CHECK(int64_t(g.src_slots.size()) == (g.per_head ? L * H * g.m : g.m), "gather_slots: slot list size");
  TF_CHECK(g.rotate_delta.empty() || (int64_t(g.rotate_delta.size()) == g.m && int64_t(g.inv_freq.size()) == D / 2),
           "gather_slots: rotation needs m deltas and head_dim/2 frequencies");
  TF_CHECK(g.dst_slot0 >= 0 && g.dst_slot0 + g.m <= dst.length(),
           "gather_slots: destination slots [" << g.dst_slot0 << ", " << g.dst_slot0 + g.m << ") beyond length "
                                               << dst.length());
  for (int32_t s : g.src_slots)
    TF_CHECK(s >= 0 && s < src.length(), "gather_slots: source slot " << s << " beyond length " << src.length());
  if (g.m == 0) return;
  if (src.device() == Device::CPU) {
    auto& s = const_cast<FullKVCache&>(src);  // k_at is non-const; read only
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < g.m; ++j) {
          const int64_t from = g.src_slots[size_t(g.per_head ? (l * H + h) * g.m + j : j)];
          float* kd = dst.k_at(l, h, g.dst_slot0 + j);
          std::copy_n(s.k_at(l, h, from), D, kd);
          std::copy_n(s.v_at(l, h, from), D, dst.v_at(l, h, g.dst_slot0 + j));
          if (!g.rotate_delta.empty() && g.rotate_delta[size_t(j)] != 0)
            rerotate(kd, g.inv_freq, g.rotate_delta[size_t(j)]);
        }
    return;
  }
#ifdef TRIFORCE_HAVE_CUDA
  TF_CHECK(!dst.offloaded(), "gather_slots: the destination is an offloaded cache (only copy_prefix writes one)");
  const size_t n_slots = g.src_slots.size() * sizeof(int32_t);
  const size_t n_delta = g.rotate_delta.size() * sizeof(int32_t), n_freq = g.inv_freq.size() * sizeof(float);
  const bool rotate = !g.rotate_delta.empty();
  uint8_t* scratch = index_scratch(align16(n_slots) + (rotate ? align16(n_delta) + n_freq : 0));
  int32_t* d_slots = reinterpret_cast<int32_t*>(scratch);
  int32_t* d_delta = rotate ? reinterpret_cast<int32_t*>(scratch + align16(n_slots)) : nullptr;
  float* d_freq = rotate ? reinterpret_cast<float*>(scratch + align16(n_slots) + align16(n_delta)) : nullptr;
  copy_bytes_async(d_slots, Device::CUDA, g.src_slots.data(), Device::CPU, n_slots);
  if (rotate) {
    copy_bytes_async(d_delta, Device::CUDA, g.rotate_delta.data(), Device::CPU, n_delta);
    copy_bytes_async(d_freq, Device::CUDA, g.inv_freq.data(), Device::CPU, n_freq);
  }
  cuda::KvGatherParams p;
  p.layers = L, p.kv_heads = H, p.head_dim = D, p.src_capacity = src.capacity(), p.dst_capacity = dst.capacity();
  p.m = g.m, p.src_slots = d_slots, p.per_head = g.per_head, p.dst_slot0 = g.dst_slot0;
  p.rotate_delta = d_delta;
  p.inv_freq = d_freq;
  p.dtype = src.dtype();
  if (!src.offloaded()) {
    p.src_k = src.layer_k(0).data, p.src_v = src.layer_v(0).data;
    p.dst_k = dst.layer_k(0).data, p.dst_v = dst.layer_v(0).data;
    cuda::kv_gather(p, cuda::compute_stream());
  } else {
    // An offloaded source's layers are not one array: one layer at a time,
    // each offloaded one streamed into its staging slot first.
    p.layers = 1;
    for (int64_t l = 0; l < L; ++l) {
      src.stage_layer(l);
      p.src_k = src.layer_k(l).data, p.src_v = src.layer_v(l).data;
      p.dst_k = dst.layer_k(l).data, p.dst_v = dst.layer_v(l).data;
      p.src_slots = d_slots + (g.per_head ? l * H * g.m : 0);
      cuda::kv_gather(p, cuda::compute_stream());
      kv_offload::release_staged();
    }
  }
#endif
}

std::vector<double> chunk_scores(const FullKVCache& cache, int64_t layer, const std::vector<double>& q_sum,
                                 int64_t chunk, int64_t num_chunks) {
  const int64_t H = cache.num_kv_heads(), D = cache.head_dim();
  TF_CHECK(int64_t(q_sum.size()) == H * D, "chunk_scores: q_sum has " << q_sum.size() << " values, expected " << H * D);
  TF_CHECK(num_chunks * chunk <= cache.length(), "chunk_scores: chunks beyond the cache length");
  std::vector<double> out(static_cast<size_t>(H * num_chunks), 0.0);
  if (cache.device() == Device::CPU) {
    auto& c = const_cast<FullKVCache&>(cache);
    std::vector<double> mean(static_cast<size_t>(D));
    for (int64_t g = 0; g < H; ++g)
      for (int64_t ci = 0; ci < num_chunks; ++ci) {
        std::fill(mean.begin(), mean.end(), 0.0);
        for (int64_t t = ci * chunk; t < (ci + 1) * chunk; ++t) {
          const float* kr = c.k_at(layer, g, t);
          for (int64_t d = 0; d < D; ++d) mean[size_t(d)] += kr[d];
        }
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q_sum[size_t(g * D + d)] * mean[size_t(d)] / double(chunk);
        out[size_t(g * num_chunks + ci)] = dot;
      }
    return out;
  }
#ifdef TRIFORCE_HAVE_CUDA
  if (num_chunks == 0) return out;
  Tensor qh = Tensor::cpu(DType::F32, {H * D});
  for (int64_t i = 0; i < H * D; ++i) qh.ptr<float>()[i] = float(q_sum[size_t(i)]);
  Tensor qd = empty_tensor(Device::CUDA, DType::F32, qh.shape);
  copy_tensor(qd, qh);
  Tensor sd = empty_tensor(Device::CUDA, DType::F32, {H * num_chunks});
  cache.stage_layer(layer);  // an offloaded layer into its staging slot; a no-op otherwise
  cuda::ChunkScoreParams p;
  p.k = cache.layer_k(layer).data, p.q_sum = qd.ptr<float>(), p.scores = sd.ptr<float>();
  p.kv_heads = H, p.head_dim = D, p.capacity = cache.capacity(), p.chunk = chunk, p.num_chunks = num_chunks;
  p.dtype = cache.dtype();
  cuda::chunk_scores(p, cuda::compute_stream());
  kv_offload::release_staged();
  Tensor sh = to_host_f32(sd);
  for (int64_t i = 0; i < H * num_chunks; ++i) out[size_t(i)] = sh.ptr<float>()[i];
#endif
  return out;
}

}  // namespace tf
