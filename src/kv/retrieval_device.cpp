#include "kv/retrieval_device.h"

#include <algorithm>

#include "core/check.h"
#include "core/device.h"
#include "kv/retrieval_cache.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "kv_gather.cuh"
#include "retrieval_select.cuh"
#include "stream.cuh"
#endif

namespace tf {

#ifdef TRIFORCE_HAVE_CUDA
namespace {

// `t` holds at least `count` elements of dt on the device; regrown with a
// quarter of headroom, so a context that grows by a few tokens per
// re-retrieval does not allocate every time.
Tensor& ensure(Tensor& t, DType dt, int64_t count) {
  if (!t.data || t.numel() < count) t = empty_tensor(Device::CUDA, dt, {std::max<int64_t>(1, count + count / 4)});
  return t;
}

}  // namespace
#endif

bool retrieval_on_device(const FullKVCache& full) {
  return full.device() == Device::CUDA && full.head_dim() % 8 == 0;
}

RetrievalShape retrieval_shape(int64_t n_tokens, const RetrievalOptions& opt) {
  TF_CHECK(opt.chunk >= 1 && opt.budget >= opt.chunk && opt.budget % opt.chunk == 0,
           "retrieval: budget " << opt.budget << " must be a positive multiple of chunk " << opt.chunk);
  RetrievalShape s;
  s.chunk = opt.chunk;
  s.num_chunks = n_tokens / opt.chunk;
  s.remainder = n_tokens % opt.chunk;
  s.keep = std::min(s.num_chunks, opt.budget / opt.chunk);
  return s;
}

void select_and_gather_on_device(const FullKVCache& full, FullKVCache& dst, const RetrievalShape& shape,
                                 const std::vector<std::vector<float>>& q, int64_t num_heads,
                                 RetrievalDeviceScratch& scratch) {
  const int64_t L = full.num_layers(), KH = full.num_kv_heads(), D = full.head_dim();
  TF_CHECK(retrieval_on_device(full) && dst.device() == Device::CUDA && !dst.offloaded() &&
               dst.num_layers() == L && dst.num_kv_heads() == KH && dst.head_dim() == D && dst.dtype() == full.dtype(),
           "retrieval: the device build needs CUDA caches of one geometry and dtype, head_dim a multiple of 8");
  TF_CHECK(num_heads % KH == 0 && int64_t(q.size()) == L,
           "retrieval: " << num_heads << " query heads for " << KH << " KV heads, queries of " << q.size()
                         << " layers for " << L);
  TF_CHECK(shape.num_chunks * shape.chunk + shape.remainder <= full.length() && shape.region() <= dst.length(),
           "retrieval: " << shape.num_chunks * shape.chunk + shape.remainder << " tokens to select from, the cache holds "
                         << full.length());
  const int64_t region = shape.region();
  if (region == 0) return;
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t rows = L * KH;
  // The group's query summed over its heads, in double then rounded once (as the per-layer path did).
  const int64_t group = num_heads / KH;
  std::vector<float> qs(size_t(rows * D));
  for (int64_t l = 0; l < L; ++l) {
    TF_CHECK(int64_t(q[size_t(l)].size()) == num_heads * D,
             "retrieval: layer " << l << "'s query has " << q[size_t(l)].size() << " values, expected " << num_heads * D);
    for (int64_t g = 0; g < KH; ++g)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) acc += q[size_t(l)][size_t(h * D + d)];
        qs[size_t((l * KH + g) * D + d)] = float(acc);
      }
  }
  ensure(scratch.q_sum, DType::F32, rows * D);
  ensure(scratch.scores, DType::F32, rows * std::max<int64_t>(1, shape.num_chunks));
  ensure(scratch.chunks, DType::I32, rows * std::max<int64_t>(1, shape.keep));
  ensure(scratch.slots, DType::I32, rows * region);
  copy_bytes(scratch.q_sum.data, Device::CUDA, qs.data(), Device::CPU, qs.size() * sizeof(float));

  cudaStream_t stream = cuda::compute_stream();
  cuda::RetrievalScoreParams sp;
  sp.q_sum = scratch.q_sum.ptr<float>(), sp.scores = scratch.scores.ptr<float>();
  sp.head_dim = D, sp.capacity = full.capacity(), sp.chunk = shape.chunk, sp.num_chunks = shape.num_chunks;
  sp.dtype = full.dtype();
  cuda::RetrievalSelectParams rp;
  rp.scores = scratch.scores.ptr<float>(), rp.chunks = scratch.chunks.ptr<int32_t>();
  rp.slots = scratch.slots.ptr<int32_t>();
  rp.num_chunks = shape.num_chunks, rp.keep = shape.keep, rp.chunk = shape.chunk, rp.remainder = shape.remainder;
  cuda::KvGatherParams gp;
  gp.kv_heads = KH, gp.head_dim = D, gp.src_capacity = full.capacity(), gp.dst_capacity = dst.capacity();
  gp.m = region, gp.per_head = true, gp.dst_slot0 = 0, gp.dtype = full.dtype();
  gp.src_slots = scratch.slots.ptr<int32_t>();
  // Rows [l0, l0 + layers * KH): on a device cache all layers in one go; an
  // offloaded one a layer at a time from its staging slot. Each launch reads
  // the rows' offsets of the scratch, so the outputs land where one launch would put them.
  auto run = [&](int64_t l0, int64_t layers) {
    const int64_t r0 = l0 * KH, n = layers * KH;
    sp.k = full.layer_k(l0).data, sp.rows = n;
    sp.q_sum = scratch.q_sum.ptr<float>() + r0 * D;
    sp.scores = scratch.scores.ptr<float>() + r0 * shape.num_chunks;
    cuda::retrieval_scores(sp, stream);
    rp.rows = n, rp.scores = sp.scores;
    rp.chunks = scratch.chunks.ptr<int32_t>() + r0 * shape.keep;
    rp.slots = scratch.slots.ptr<int32_t>() + r0 * region;
    cuda::retrieval_select(rp, stream);
    gp.layers = layers, gp.src_slots = rp.slots;
    gp.src_k = full.layer_k(l0).data, gp.src_v = full.layer_v(l0).data;
    gp.dst_k = dst.layer_k(l0).data, gp.dst_v = dst.layer_v(l0).data;
    cuda::kv_gather(gp, stream);
  };
  if (!full.offloaded()) {
    run(0, L);
    return;
  }
  for (int64_t l = 0; l < L; ++l) {
    full.stage_layer(l);  // an offloaded layer into its staging slot; a no-op for the on-chip ones
    run(l, 1);
    kv_offload::release_staged();
  }
#else
  TF_FAIL("retrieval: a CUDA cache in a build without CUDA");
#endif
}

std::vector<std::vector<int64_t>> download_chunks(const RetrievalDeviceScratch& scratch, int64_t rows, int64_t keep) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rows));
  if (keep == 0) return out;
  std::vector<int32_t> h(size_t(rows * keep));
  copy_bytes(h.data(), Device::CPU, scratch.chunks.data, Device::CUDA, h.size() * sizeof(int32_t));
  for (int64_t r = 0; r < rows; ++r) out[size_t(r)].assign(h.begin() + r * keep, h.begin() + (r + 1) * keep);
  return out;
}

}  // namespace tf
