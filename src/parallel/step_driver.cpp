#include "parallel/step_driver.h"

#include "core/check.h"

namespace tf::parallel {

int32_t StepDriver::create(const LevelSpec& spec) {
  StepOp o;
  o.id = new_id();
  switch (spec.kind) {
    case LevelSpec::Kind::full:
      o.op = Op::create_full;
      o.args = {spec.capacity};
      break;
    case LevelSpec::Kind::retrieval:
      o.op = Op::create_retrieval;
      o.args = {spec.retrieval.budget, spec.retrieval.chunk, spec.tail_capacity};
      break;
    case LevelSpec::Kind::streaming:
      o.op = Op::create_streaming;
      o.args = {spec.sink, spec.window, spec.tail_capacity};
      break;
  }
  const int32_t id = o.id;
  queue(std::move(o));
  return id;
}

void StepDriver::queue(StepOp op) {
  TF_CHECK(!down_, "step protocol: " << op_name(op.op) << " after shutdown");
  const bool computes = op_computes(op.op);
  if (op.op == Op::shutdown) down_ = true;
  ++ops_;
  pending_.push_back(std::move(op));
  if (computes) flush();
}

void StepDriver::flush() {
  if (pending_.empty()) return;
  ch_->send(codec_.encode(pending_));
  pending_.clear();
}

std::vector<int64_t> StepDriver::gather_stats(const std::vector<int64_t>& mine) {
  queue(StepOp{Op::stats, -1, {}, {}});
  return ch_->gather(mine);
}

void StepDriver::shutdown() {
  if (down_) return;
  queue(StepOp{Op::shutdown, -1, {}, {}});
}

DrivenLevel::DrivenLevel(StepDriver& driver, LlamaModel& model, const LevelSpec& spec)
    : driver_(&driver), local_(make_local_level(model, spec)), id_(driver.create(spec)) {}

DrivenLevel::~DrivenLevel() {
  if (!driver_->is_shut_down()) driver_->queue(StepOp{Op::destroy, id_, {}, {}});
}

Tensor DrivenLevel::logits(const std::vector<int32_t>& seq, int64_t n_out) {
  driver_->queue(StepOp{Op::logits, id_, {n_out}, seq});
  return local_->logits(seq, n_out);
}

void DrivenLevel::greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) {
  driver_->queue(StepOp{Op::logits, id_, {n_out}, seq});
  local_->greedy_ids(seq, n_out, ids);
}

void DrivenLevel::device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                                       Tensor& rows) {
  driver_->queue(StepOp{Op::logits, id_, {n_out}, seq});
  local_->device_distributions(seq, n_out, sp, rows);
}

void DrivenLevel::sync(const std::vector<int32_t>& context) {
  driver_->queue(StepOp{Op::sync, id_, {}, context});
  local_->sync(context);
}

void DrivenLevel::reset() {
  driver_->queue(StepOp{Op::reset, id_, {}, {}});
  local_->reset();
}

void DrivenLevel::begin(const std::vector<int32_t>& prompt) {
  driver_->queue(StepOp{Op::begin, id_, {}, prompt});
  local_->begin(prompt);
}

void DrivenLevel::seed(const speculative::PrefillSnapshot& snap, int64_t n) {
  TF_CHECK(snap.mirror_id() >= 0, "driven target level: seeded from a prefill snapshot the workers do not hold "
                                  "(take it with parallel::TargetLevels::snapshot)");
  driver_->queue(StepOp{Op::seed, id_, {snap.mirror_id(), n}, {}});
  local_->seed(snap, n);
}

void DrivenLevel::rebuild(const std::vector<int32_t>& context) {
  driver_->queue(StepOp{Op::rebuild, id_, {}, context});
  local_->rebuild(context);
}

void DrivenLevel::rebuild_from(const std::vector<int32_t>& context, TargetLevel& top) {
  auto* t = dynamic_cast<DrivenLevel*>(&top);
  TF_CHECK(t, "driven re-retrieval: the level to rebuild from is not driven");
  driver_->queue(StepOp{Op::rebuild_from, id_, {t->id_}, context});
  local_->rebuild_from(context, *t->local_);
}

SnapshotTicket::SnapshotTicket(StepDriver& driver, const std::vector<int32_t>& prompt)
    : driver_(&driver), id_(driver.new_id()) {
  driver.queue(StepOp{Op::snapshot, id_, {}, prompt});
}

SnapshotTicket::~SnapshotTicket() {
  if (!driver_->is_shut_down()) driver_->queue(StepOp{Op::drop_snapshot, id_, {}, {}});
}

}  // namespace tf::parallel
