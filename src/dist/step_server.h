// A worker's end of the step protocol: mirrors every level rank 0 creates on
// this rank's shard and applies each op to it, until shutdown.
#pragma once
#include <map>
#include <memory>

#include "dist/step_protocol.h"
#include "dist/target_levels.h"

namespace tf::dist {

class StepServer {
 public:
  StepServer(LlamaModel& model, StepChannel& channel) : model_(&model), ch_(&channel) {}
  // Serves batches until the shutdown op; returns the number of ops applied.
  int64_t run();

 private:
  void apply(const StepOp& op);
  TargetLevel& level(int32_t id);

  LlamaModel* model_;
  StepChannel* ch_;
  StepCodec codec_;
  std::map<int32_t, std::unique_ptr<TargetLevel>> levels_;
  bool done_ = false;
};

}  // namespace tf::dist
