// Rank 0's end of the step protocol: ops are queued, and a batch goes out when
// an op that makes the workers compute is queued (see step_protocol.h).
#pragma once
#include <vector>

#include "parallel/step_protocol.h"
#include "parallel/target_levels.h"

namespace tf::parallel {

class StepDriver {
 public:
  explicit StepDriver(StepChannel& channel) : ch_(&channel) {}
  // A new level: its id in the stream (workers create the same one).
  int32_t create(const LevelSpec& spec);
  // An id for something else the workers keep (a snapshot).
  int32_t new_id() { return next_id_++; }
  void queue(StepOp op);
  void flush();
  // Every rank's counters (rank-major; `mine` is rank 0's): see StepServer::counters.
  std::vector<int64_t> gather_stats(const std::vector<int64_t>& mine);
  // The last op; later calls are errors. Idempotent.
  void shutdown();
  bool is_shut_down() const { return down_; }
  const ChannelStats& stats() const { return ch_->stats(); }
  int64_t ops_queued() const { return ops_; }

 private:
  StepChannel* ch_;
  StepCodec codec_;
  std::vector<StepOp> pending_;
  int64_t ops_ = 0;
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
  // The workers run the same `logits` op (their forward and its collectives
  // are the same call); rank 0's level takes the ids as it can (on a
  // vocab-parallel shard: from the all-gathered logits).
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override;
  // The same for T > 0 rows kept on rank 0's device.
  bool distributions_on_device() const override { return local_->distributions_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override;
  void sync(const std::vector<int32_t>& context) override;
  void reset() override;
  void begin(const std::vector<int32_t>& prompt) override;
  void seed(const speculative::PrefillSnapshot& snap, int64_t n) override;
  void rebuild(const std::vector<int32_t>& context) override;
  void rebuild_from(const std::vector<int32_t>& context, TargetLevel& top) override;

 private:
  StepDriver* driver_;
  std::unique_ptr<TargetLevel> local_;
  int32_t id_;
};

// Announces a snapshot to the workers before the base class runs rank 0's
// prefill (bases are built in order), and drops their copies after it.
class SnapshotTicket {
 protected:
  SnapshotTicket(StepDriver& driver, const std::vector<int32_t>& prompt);
  ~SnapshotTicket();
  StepDriver* driver_;
  int32_t id_;
};

// A prefill snapshot on rank 0 whose mirror every worker holds.
class DrivenSnapshot : private SnapshotTicket, public speculative::PrefillSnapshot {
 public:
  DrivenSnapshot(StepDriver& driver, LlamaModel& target, const std::vector<int32_t>& prompt,
                 const speculative::PhaseClock& clock)
      : SnapshotTicket(driver, prompt), speculative::PrefillSnapshot(target, prompt, clock) {}
  int32_t mirror_id() const override { return id_; }
};

}  // namespace tf::parallel
