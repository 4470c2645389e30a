#include "dist/step_server.h"

#include "core/check.h"

namespace tf::dist {

TargetLevel& StepServer::level(int32_t id) {
  auto it = levels_.find(id);
  TF_CHECK(it != levels_.end(), "step protocol: no target level " << id << " on this worker");
  return *it->second;
}

void StepServer::apply(const StepOp& o) {
  switch (o.op) {
    case Op::create_full:
    case Op::create_retrieval: {
      TF_CHECK(!levels_.count(o.id), "step protocol: target level " << o.id << " created twice");
      LevelSpec s;
      if (o.op == Op::create_full) {
        TF_CHECK(o.args.size() == 1, "step protocol: create_full takes 1 argument");
        s.kind = LevelSpec::Kind::full;
        s.capacity = o.args[0];
      } else {
        TF_CHECK(o.args.size() == 3, "step protocol: create_retrieval takes 3 arguments");
        s.kind = LevelSpec::Kind::retrieval;
        s.retrieval.budget = o.args[0];
        s.retrieval.chunk = o.args[1];
        s.tail_capacity = o.args[2];
      }
      levels_[o.id] = make_local_level(*model_, s);
      break;
    }
    case Op::destroy: levels_.erase(o.id); break;
    case Op::begin: level(o.id).begin(o.seq); break;
    case Op::logits:
      TF_CHECK(o.args.size() == 1, "step protocol: logits takes 1 argument");
      level(o.id).logits(o.seq, o.args[0]);  // the logits are rank 0's to use
      break;
    case Op::sync: level(o.id).sync(o.seq); break;
    case Op::reset: level(o.id).reset(); break;
    case Op::rebuild: level(o.id).rebuild(o.seq); break;
    case Op::shutdown: done_ = true; break;
  }
}

int64_t StepServer::run() {
  int64_t n = 0;
  while (!done_) {
    for (const StepOp& o : codec_.decode(ch_->receive())) {
      TF_CHECK(!done_, "step protocol: " << op_name(o.op) << " after shutdown");
      apply(o);
      ++n;
    }
  }
  return n;
}

}  // namespace tf::dist
