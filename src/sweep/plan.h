// What --dry-run prints for each point: the memory the run holds at its peak
// and a rough time estimate. Memory: the target's weights, its full KV cache
// (prompt + generated + speculation room), the prefill snapshot (shared by the
// points of one prompt and context), each speculative level's cache and a
// layer-skip or checkpoint draft. Time: prefill at `flops`, decoding bound by
// reading the weights and the KV cache at `bytes_per_s` per token. Both
// assume every method decodes at ar's rate (speedups are what the sweep
// measures), so a speculative point costs about as much as its baseline.
#pragma once
#include <cstdint>

#include "model/config.h"
#include "sweep/grid.h"

namespace tf::sweep {

struct MemoryPlan {
  double weights = 0, full_kv = 0, snapshot = 0, levels = 0, draft_weights = 0, scratch = 0;
  double total() const { return weights + full_kv + snapshot + levels + draft_weights + scratch; }
};

struct Throughput {
  double flops = 2e10;        // sustained prefill FLOP/s
  double bytes_per_s = 5e9;  // sustained memory bandwidth while decoding
  double elem_bytes = 4;      // f32 on CPU, 2 on GPU
};

// draft_cfg: the config of a model:PATH draft (nullptr otherwise).
MemoryPlan memory_plan(const ModelConfig& target, const Point& p, const Throughput& tp,
                       const ModelConfig* draft_cfg = nullptr);
double estimate_prefill_s(const ModelConfig& target, int64_t context, const Throughput& tp);
double estimate_decode_s(const ModelConfig& target, const Point& p, const Throughput& tp);

}  // namespace tf::sweep
