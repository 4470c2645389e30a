#include "parallel/step_server.h"

#include "core/check.h"

namespace tf::parallel {

std::vector<int64_t> StepServer::counters(const LlamaModel& target, int64_t ops) {
  return {LlamaModel::process_forwarded_tokens(), target.forwarded_tokens(), ops};
}

TargetLevel& StepServer::level(int32_t id) {
  auto it = levels_.find(id);
  TF_CHECK(it != levels_.end(), "step protocol: no target level " << id << " on this worker");
  return *it->second;
}

const speculative::PrefillSnapshot& StepServer::snapshot(int32_t id) {
  auto it = snapshots_.find(id);
  TF_CHECK(it != snapshots_.end(), "step protocol: no prefill snapshot " << id << " on this worker");
  return *it->second;
}

namespace {
void need_args(const StepOp& o, size_t n) {
  TF_CHECK(o.args.size() == n, "step protocol: " << op_name(o.op) << " takes " << n << " argument(s), got "
                                                 << o.args.size());
}
}  // namespace

void StepServer::apply(const StepOp& o) {
  switch (o.op) {
    case Op::create_full:
    case Op::create_retrieval:
    case Op::create_streaming: {
      TF_CHECK(!levels_.count(o.id), "step protocol: target level " << o.id << " created twice");
      LevelSpec s;
      if (o.op == Op::create_full) {
        need_args(o, 1);
        s.kind = LevelSpec::Kind::full;
        s.capacity = o.args[0];
      } else if (o.op == Op::create_retrieval) {
        need_args(o, 3);
        s.kind = LevelSpec::Kind::retrieval;
        s.retrieval.budget = o.args[0];
        s.retrieval.chunk = o.args[1];
        s.tail_capacity = o.args[2];
      } else {
        need_args(o, 3);
        s.kind = LevelSpec::Kind::streaming;
        s.sink = o.args[0];
        s.window = o.args[1];
        s.tail_capacity = o.args[2];
      }
      levels_[o.id] = make_local_level(*model_, s);
      break;
    }
    case Op::destroy: levels_.erase(o.id); break;
    case Op::begin: level(o.id).begin(o.seq); break;
    case Op::logits:
      need_args(o, 1);
      level(o.id).logits(o.seq, o.args[0]);  // the logits are rank 0's to use
      break;
    case Op::sync: level(o.id).sync(o.seq); break;
    case Op::reset: level(o.id).reset(); break;
    case Op::rebuild: level(o.id).rebuild(o.seq); break;
    case Op::shutdown: done_ = true; break;
    case Op::snapshot:
      TF_CHECK(!snapshots_.count(o.id), "step protocol: prefill snapshot " << o.id << " taken twice");
      snapshots_[o.id] = std::make_unique<speculative::PrefillSnapshot>(*model_, o.seq);
      break;
    case Op::drop_snapshot: snapshots_.erase(o.id); break;
    case Op::seed:
      need_args(o, 2);
      level(o.id).seed(snapshot(int32_t(o.args[0])), o.args[1]);
      break;
    case Op::rebuild_from:
      need_args(o, 1);
      level(o.id).rebuild_from(o.seq, level(int32_t(o.args[0])));
      break;
    case Op::stats: ch_->gather(counters(*model_, applied_)); break;
  }
}

int64_t StepServer::run() {
  while (!done_) {
    for (const StepOp& o : codec_.decode(ch_->receive())) {
      TF_CHECK(!done_, "step protocol: " << op_name(o.op) << " after shutdown");
      ++applied_;  // before apply: a stats op counts itself, as on rank 0
      apply(o);
    }
  }
  return applied_;
}

}  // namespace tf::parallel
