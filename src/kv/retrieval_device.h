// The retrieval cache's build on the device (CUDA full cache, head_dim a
// multiple of 8): the chunk scores of every (layer, KV head) in one launch,
// the top-k per row and its slot list in a second (kernels/retrieval_select),
// then one kv_gather from those device slots. No host sort, no sync between
// the launches, no allocation once the scratch has grown to the context; the
// chosen chunk ids stay on the device until someone asks for them.
//
// An offloaded full cache runs the same kernels one layer at a time, each
// layer streamed into its staging slot once (scores, selection and gather all
// read that one copy); that costs the layer transfers, about KV bytes / the
// host link (~1.2 s for a 7B model at 128K at 55 GB/s).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kv/full_cache.h"

namespace tf {

struct RetrievalOptions;

// Device scratch of the build, grown (never shrunk) to the largest context seen.
struct RetrievalDeviceScratch {
  Tensor q_sum;   // f32 [layers * kv_heads * head_dim]
  Tensor scores;  // f32 [layers * kv_heads * num_chunks]
  Tensor chunks;  // i32 [layers * kv_heads * keep]
  Tensor slots;   // i32 [layers * kv_heads * region]
};

// Whether build_from can take the device path for this full cache.
bool retrieval_on_device(const FullKVCache& full);

// What a build over n_tokens keeps: chunk 0 and the best others, keep chunks
// of `chunk` tokens in all, and the trailing `remainder` tokens.
struct RetrievalShape {
  int64_t chunk = 8, num_chunks = 0, remainder = 0, keep = 0;
  int64_t region() const { return keep * chunk + remainder; }
};
RetrievalShape retrieval_shape(int64_t n_tokens, const RetrievalOptions& opt);

// Scores and selects over slots [0, n_tokens) of `full` with the queries q
// ([layers][num_heads * head_dim] on the host), and gathers the selected K/V
// into slots [0, shape.region()) of `dst` (already claimed).
void select_and_gather_on_device(const FullKVCache& full, FullKVCache& dst, const RetrievalShape& shape,
                                 const std::vector<std::vector<float>>& q, int64_t num_heads,
                                 RetrievalDeviceScratch& scratch);

// The chunk ids of the last select_and_gather_on_device: [rows][keep] (one copy to the host).
std::vector<std::vector<int64_t>> download_chunks(const RetrievalDeviceScratch& scratch, int64_t rows, int64_t keep);

}  // namespace tf
