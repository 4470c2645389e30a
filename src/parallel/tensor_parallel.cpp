#include "parallel/tensor_parallel.h"

#include <cstdlib>

#include "core/check.h"
#include "parallel/launch.h"
#include "parallel/mpi_comm.h"
#include "parallel/step_driver.h"
#include "parallel/step_server.h"

namespace tf::parallel {

namespace {
// Process-wide, created on first use under tensor parallelism (never in one process).
struct TpState {
  TpMode mode = TpMode::driven;
  std::unique_ptr<MpiCommunicator> comm;
  std::unique_ptr<StepChannel> channel;
  std::unique_ptr<StepDriver> driver;  // rank 0, driven mode only
  // Drivers of earlier serve sessions: kept, since a level may still point at one.
  std::vector<std::unique_ptr<StepDriver>> past_drivers;
};
TpState& state() {
  static TpState s;
  return s;
}
}  // namespace

bool tp_active() { return world().size > 1; }
bool is_worker() { return tp_active() && world().rank != 0; }
bool writes_outputs() { return !is_worker(); }

TpMode parse_tp_mode(const std::string& s) {
  if (s == "driven") return TpMode::driven;
  if (s == "lockstep") return TpMode::lockstep;
  TF_FAIL("--tp-mode " << s << ": expected driven (rank 0 runs the method, workers serve its target steps) or "
                       << "lockstep (every rank runs the method)");
}
void set_tp_mode(TpMode m) { state().mode = m; }
TpMode tp_mode() { return state().mode; }
bool tp_driven() { return tp_active() && state().mode == TpMode::driven; }

void check_tp_option(int64_t tp) {
  if (tp == 0) return;
  const int n = world().size;
  TF_CHECK(tp >= 1, "--tp " << tp << ": expected a positive tensor-parallel size");
  TF_CHECK(tp == n, "--tp " << tp << ": the tensor-parallel size is the number of MPI ranks, and this job has " << n
                            << (n == 1 ? "; start it as mpirun -np " + std::to_string(tp) + " triforce ..."
                                       : " (mpirun -np " + std::to_string(n) + ")"));
}

ShardSpec tp_shard(const ModelConfig& cfg, const std::string& path) {
  const int64_t n = world().size;
  TF_CHECK(cfg.num_kv_heads >= n, "--tp " << n << ": " << path << " has " << cfg.num_kv_heads << " KV heads ("
                                           << cfg.num_heads
                                           << " query heads); the tensor-parallel size must not exceed them");
  TF_CHECK(cfg.intermediate_size % n == 0, "--tp " << n << ": " << path << " has intermediate_size "
                                                   << cfg.intermediate_size
                                                   << "; the tensor-parallel size must divide it");
  ShardSpec s;
  s.rank = world().rank;
  s.size = n;
  // Measurement knob (docs/ARCHITECTURE.md): every rank computes the whole lm_head instead of its slice.
  if (const char* h = std::getenv("TRIFORCE_TP_LM_HEAD")) s.vocab_parallel_head = std::string(h) != "replicated";
  return s;
}

namespace {
// Both communicators are duplicated at once, at the first model load: MPI_Comm_dup
// is collective, and this is a point every rank reaches in the same order.
void make_communicators() {
  TpState& s = state();
  if (s.comm) return;
  s.comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  s.channel = std::make_unique<StepChannel>(MPI_COMM_WORLD);
}
StepChannel& channel() {
  make_communicators();
  return *state().channel;
}
}  // namespace

Communicator* tp_communicator() {
  if (!tp_active()) return nullptr;
  make_communicators();
  return state().comm.get();
}

std::unique_ptr<LlamaModel> load_model_shard(const Checkpoint& ck, int64_t max_chunk) {
  const ShardSpec shard = tp_shard(ck.config, ck.path);
  return std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config, shard), max_chunk,
                                      tp_communicator());
}

StepDriver& step_driver() {
  TF_CHECK(tp_active() && !is_worker(), "step driver: only rank 0 of a tensor-parallel job drives");
  TpState& s = state();
  // After a shutdown the workers' next serve_steps starts a new session (new ids, new sequence deltas).
  if (s.driver && s.driver->is_shut_down()) s.past_drivers.push_back(std::move(s.driver));
  if (!s.driver) s.driver = std::make_unique<StepDriver>(channel());
  return *s.driver;
}

std::vector<int64_t> rank_counters(const LlamaModel& target) {
  if (!tp_active()) return StepServer::counters(target, 0);
  if (tp_driven()) {
    if (is_worker()) return {};  // a worker answers from its serve loop
    StepDriver& d = step_driver();
    return d.gather_stats(StepServer::counters(target, d.ops_queued() + 1));  // + the stats op
  }
  return channel().gather(StepServer::counters(target, 0));
}

int64_t serve_steps(LlamaModel& model) {
  TF_CHECK(is_worker(), "serve_steps: only workers serve");
  StepServer server(model, channel());
  return server.run();
}

void shutdown_workers() {
  TpState& s = state();
  if (!s.driver || s.driver->is_shut_down()) return;
  s.driver->shutdown();
}

}  // namespace tf::parallel
