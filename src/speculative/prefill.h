// One prefill of the target shared by every method and every level that can
// use it (issue 6 §3: prefill once per (prompt, context length), reuse a
// snapshot for every grid point). The snapshot holds the target's K/V of the
// whole prompt and the last prompt token's post-RoPE query per layer, which
// is what the retrieval cache scores its chunks against. A method copies what it needs and never writes the snapshot:
//   ar                  the first P - 1 tokens, then the last one as a decode step (as the top level
//                       verifies it: the prefill's own rounding must not reach either)
//   top level (full)    the first P - 1 tokens (the chain re-forwards the last one with its proposals)
//   target@retrieval    chunks selected from the P - 1 tokens with last_query
//   target@streaming    sinks + last window of the P - 1 tokens
//   layerskip:K@full    the first K layers of the P - 1 tokens (the same weights and inputs)
#pragma once
#include <cstdint>
#include <vector>

#include "kv/full_cache.h"
#include "model/llama.h"
#include "speculative/phase_timer.h"

namespace tf::speculative {

class PrefillSnapshot {
 public:
  // Runs the prefill: one forward over the prompt (in the model's bounded chunks).
  // capacity: slots of the cache (at least the prompt), room for a level that
  // takes the cache over (take_cache) and keeps generating in it.
  PrefillSnapshot(LlamaModel& target, const std::vector<int32_t>& prompt, const PhaseClock& clock = PhaseClock(),
                  int64_t capacity = 0);
  virtual ~PrefillSnapshot() = default;
  PrefillSnapshot(const PrefillSnapshot&) = delete;
  PrefillSnapshot& operator=(const PrefillSnapshot&) = delete;

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const FullKVCache& cache() const { return cache_; }  // length P, capacity max(P, the constructor's)
  // Moves the cache out (once): an offloaded target's top level adopts it
  // instead of copying tens of GB of pinned memory. cache() is unusable after.
  FullKVCache take_cache();
  bool cache_taken() const { return taken_; }
  const std::vector<std::vector<float>>& last_query() const { return query_; }  // [layers][local heads * head_dim]
  int64_t prefill_ns() const { return prefill_ns_; }
  // The snapshot belongs to this model (same config, same rank's KV heads).
  bool fits(const LlamaModel& m) const;
  // Under a tensor-parallel job driven by rank 0: the id of the workers'
  // mirrors of this snapshot (parallel::TargetLevels::snapshot); -1: this rank's alone.
  virtual int32_t mirror_id() const { return -1; }

 private:
  std::vector<int32_t> prompt_;
  FullKVCache cache_;
  std::vector<std::vector<float>> query_;
  int64_t prefill_ns_ = 0;
  int64_t vocab_ = 0, layers_ = 0;
  bool taken_ = false;
};

// dst <- the first n slots of src (either may be offloaded: copied layer by
// layer between device and pinned host memory) (K/V of its first dst.num_layers() layers and
// the slots' positions); dst is reset first. Throws on a shape mismatch.
void copy_prefix(const FullKVCache& src, int64_t n, FullKVCache& dst);

}  // namespace tf::speculative
