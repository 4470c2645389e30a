// Rank 0's end of the step protocol: ops are queued, and a batch goes out when
// an op that makes the workers compute is queued (see step_protocol.h).
#pragma once
#include <vector>

#include "dist/step_protocol.h"
#include "dist/target_levels.h"

namespace tf::dist {

class StepDriver {
 public:
  explicit StepDriver(StepChannel& channel) : ch_(&channel) {}
  // A new level: its id in the stream (workers create the same one).
  int32_t create(const LevelSpec& spec);
  void queue(StepOp op);
  void flush();
  // The last op; later calls are errors. Idempotent.
  void shutdown();
  bool is_shut_down() const { return down_; }
  const ChannelStats& stats() const { return ch_->stats(); }

 private:
  StepChannel* ch_;
  StepCodec codec_;
  std::vector<StepOp> pending_;
  int32_t next_id_ = 0;
  bool down_ = false;
};

// A level on rank 0 that runs every call on the workers' mirrors too.
class DrivenLevel : public TargetLevel {
 public:
  DrivenLevel(StepDriver& driver, LlamaModel& model, const LevelSpec& spec);
  ~DrivenLevel() override;
  int64_t vocab() const override { return local_->vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  void begin(const std::vector<int32_t>& prompt) override;
  void rebuild(const std::vector<int32_t>& context) override;

 private:
  StepDriver* driver_;
  std::unique_ptr<TargetLevel> local_;
  int32_t id_;
};

}  // namespace tf::dist
