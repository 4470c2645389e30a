#include "dist/step_driver.h"

#include "core/check.h"

namespace tf::dist {

int32_t StepDriver::create(const LevelSpec& spec) {
  StepOp o;
  o.id = next_id_++;
  if (spec.kind == LevelSpec::Kind::full) {
    o.op = Op::create_full;
    o.args = {spec.capacity};
  } else {
    o.op = Op::create_retrieval;
    o.args = {spec.retrieval.budget, spec.retrieval.chunk, spec.tail_capacity};
  }
  queue(std::move(o));
  return next_id_ - 1;
}

void StepDriver::queue(StepOp op) {
  TF_CHECK(!down_, "step protocol: " << op_name(op.op) << " after shutdown");
  const bool computes = op_computes(op.op);
  if (op.op == Op::shutdown) down_ = true;
  pending_.push_back(std::move(op));
  if (computes) flush();
}

void StepDriver::flush() {
  if (pending_.empty()) return;
  ch_->send(codec_.encode(pending_));
  pending_.clear();
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

void DrivenLevel::rebuild(const std::vector<int32_t>& context) {
  driver_->queue(StepOp{Op::rebuild, id_, {}, context});
  local_->rebuild(context);
}

}  // namespace tf::dist
