// Target levels: the target model on one kind of cache, as a verifying level of
// a speculative chain (speculative::Verifier). speculative::run_method makes every level that
// runs the target (and the target's prefill snapshot) through TargetLevels:
// in one process, and on every rank of a lockstep tensor-parallel job, they are
// the spec runners over this rank's model. On rank 0 of a driven job
// (tp_mode() == driven) each level and snapshot also drives its mirror on every
// worker through the step protocol: a call is broadcast first, then run on
// rank 0's shard (the model's own collectives meet the workers' mirrored
// forward).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/retrieval_cache.h"
#include "model/llama.h"
#include "speculative/drafter.h"
#include "speculative/phase_timer.h"
#include "speculative/prefill.h"

namespace tf::parallel {

class TargetLevel : public speculative::Verifier {
 public:
  // Start from the target's prefill instead of prefilling: a full level keeps
  // the snapshot's first n tokens; a retrieval level selects its chunks from
  // the prompt's first P - 1 tokens with the captured query; a streaming
  // level keeps their sinks and last window (n: ignored by the last two).
  virtual void seed(const speculative::PrefillSnapshot& snap, int64_t n) = 0;
  // Re-retrieval (retrieval levels only) by its own prefill of the context.
  virtual void rebuild(const std::vector<int32_t>& context);
  // Re-retrieval (retrieval levels only) from `top`, a full level: its cache
  // holds the committed context but its last token, whose query it computes.
  virtual void rebuild_from(const std::vector<int32_t>& context, TargetLevel& top);
  // A full level's runner on this rank (nullptr for the other kinds and for a
  // driven level, whose forwards must go through the protocol).
  virtual speculative::ModelRunner* full_runner() { return nullptr; }
};

// Enough for a worker to build the mirror of a level.
struct LevelSpec {
  enum class Kind { full, retrieval, streaming };
  Kind kind = Kind::full;
  int64_t capacity = 0;       // full: KV slots
  RetrievalOptions retrieval;  // retrieval: budget and chunk
  int64_t tail_capacity = 0;  // retrieval: generated + speculative tokens; streaming: the most uncommitted tokens
  int64_t sink = 0, window = 0;  // streaming
};

// The level on this rank's shard alone (logits: the full vocabulary, all-gathered).
std::unique_ptr<TargetLevel> make_local_level(LlamaModel& model, const LevelSpec& spec);

// Builds the target's levels and snapshots: local ones in one process and in
// lockstep mode; on rank 0 of a driven job, ones that drive the workers.
class TargetLevels {
 public:
  explicit TargetLevels(LlamaModel& target) : target_(&target) {}
  // Rank 0 of a driven tensor-parallel job.
  bool driven() const;
  std::unique_ptr<TargetLevel> full(int64_t capacity);
  std::unique_ptr<TargetLevel> retrieval(const RetrievalOptions& opt, int64_t tail_capacity);
  std::unique_ptr<TargetLevel> streaming(int64_t sink, int64_t window, int64_t max_tail);
  // A full level that adopts `cache` holding `tokens` (an offloaded target's
  // snapshot cache, so tens of GB of pinned KV are not copied). Local only.
  std::unique_ptr<TargetLevel> full_adopting(FullKVCache cache, const std::vector<int32_t>& tokens);
  // The target's prefill of `prompt`; driven: the workers take theirs too.
  // capacity (local only): room in the snapshot's cache for a level that adopts it.
  std::unique_ptr<speculative::PrefillSnapshot> snapshot(const std::vector<int32_t>& prompt,
                                                  const speculative::PhaseClock& clock = speculative::PhaseClock(),
                                                  int64_t capacity = 0);
  // The layer-skip draft (the target's first K layers and its head). One
  // process and lockstep: it shares the target's weights (a shard runs with
  // its ranks). Driven: rank 0 reads the first K layers whole from the
  // target's checkpoint (the draft runs on rank 0 alone, so it must not be a shard).
  std::unique_ptr<LlamaModel> layer_skip_draft(const std::string& checkpoint, int64_t K);

 private:
  std::unique_ptr<TargetLevel> make(const LevelSpec& spec);
  LlamaModel* target_;
};

}  // namespace tf::parallel
