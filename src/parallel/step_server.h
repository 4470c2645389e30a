// A worker's end of the step protocol: mirrors every level and prefill
// snapshot rank 0 creates on this rank's shard and applies each op to it,
// until shutdown.
#pragma once
#include <map>
#include <memory>

#include "parallel/step_protocol.h"
#include "parallel/target_levels.h"

namespace tf::parallel {

class StepServer {
 public:
  StepServer(LlamaModel& model, StepChannel& channel) : model_(&model), ch_(&channel) {}
  // Serves batches until the shutdown op; returns the number of ops applied.
  int64_t run();
  // What a stats op reports, the same on every rank: tokens forwarded by every
  // model of the process, tokens forwarded by the target (shard), ops applied.
  static std::vector<int64_t> counters(const LlamaModel& target, int64_t ops);

 private:
  void apply(const StepOp& op);
  TargetLevel& level(int32_t id);
  const speculative::PrefillSnapshot& snapshot(int32_t id);

  LlamaModel* model_;
  StepChannel* ch_;
  StepCodec codec_;
  std::map<int32_t, std::unique_ptr<TargetLevel>> levels_;
  std::map<int32_t, std::unique_ptr<speculative::PrefillSnapshot>> snapshots_;
  int64_t applied_ = 0;
  bool done_ = false;
};

}  // namespace tf::parallel
