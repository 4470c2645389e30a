// Target levels: the target model on one kind of cache, as a verifying level of
// a speculative chain (spec::Verifier). In one process they are the spec
// runners over the model. On rank 0 of a tensor-parallel job each level also
// drives its mirror on every worker through the step protocol: a call is
// broadcast first, then run on rank 0's shard (the model's own collectives
// meet the workers' mirrored forward).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/retrieval_cache.h"
#include "model/llama.h"
#include "spec/drafter.h"

namespace tf::dist {

class TargetLevel : public spec::Verifier {
 public:
  // Re-retrieval from the committed context (levels on a retrieval cache only).
  virtual void rebuild(const std::vector<int32_t>& context);
};

// Enough for a worker to build the mirror of a level.
struct LevelSpec {
  enum class Kind { full, retrieval };
  Kind kind = Kind::full;
  int64_t capacity = 0;       // full: KV slots
  RetrievalOptions retrieval;  // retrieval: budget and chunk
  int64_t tail_capacity = 0;  // retrieval: generated + speculative tokens
};

// The level on this rank's shard alone (logits: this rank's vocab slice).
std::unique_ptr<TargetLevel> make_local_level(LlamaModel& model, const LevelSpec& spec);

// Builds the target's levels for a method: local levels in one process; on
// rank 0 under tensor parallelism, levels that drive the workers.
class TargetLevels {
 public:
  explicit TargetLevels(LlamaModel& target) : target_(&target) {}
  std::unique_ptr<TargetLevel> full(int64_t capacity);
  std::unique_ptr<TargetLevel> retrieval(const RetrievalOptions& opt, int64_t tail_capacity);
  // The layer-skip draft (the target's first K layers and its head). One
  // process: it shares the target's weights. Tensor-parallel: rank 0 reads
  // the first K layers whole from the target's checkpoint (the draft runs on
  // rank 0 alone, so it must not be a shard).
  std::unique_ptr<LlamaModel> layer_skip_draft(const std::string& checkpoint, int64_t K);

 private:
  std::unique_ptr<TargetLevel> make(const LevelSpec& spec);
  LlamaModel* target_;
};

}  // namespace tf::dist
