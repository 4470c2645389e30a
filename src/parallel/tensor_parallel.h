// Tensor parallelism for one process of the job: one MPI rank per shard of
// the target (per GPU); the TP size is the world size, and one process
// without mpirun is TP 1.
//
// How the ranks stay in step (docs/ARCHITECTURE.md, "Tensor parallelism"),
// two modes:
//   driven (the default): rank 0 holds the draft and runs the method; every
//     target level and prefill snapshot it makes (TargetLevels) is mirrored on
//     the workers, which serve the ops rank 0 broadcasts (step_driver.h,
//     step_server.h) until shutdown. Rank 0 decides; workers only follow.
//   lockstep: every rank runs the same command on its own shard. The model
//     all-reduces after o and down and all-gathers the vocab-parallel logits,
//     so every rank holds bit-identical logits, draws the same Philox numbers
//     and therefore takes the same accept/reject path, with no further messages.
// Only rank 0 writes: the workers' stdout and stderr are closed at launch
// (errors still reach the terminal) and commands write files only where
// writes_outputs() holds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "model/checkpoint.h"
#include "model/llama.h"

namespace tf::parallel {

class StepDriver;

bool tp_active();  // world size > 1
enum class TpMode { driven, lockstep };
// --tp-mode driven|lockstep; a one-line error otherwise.
TpMode parse_tp_mode(const std::string& s);
void set_tp_mode(TpMode m);  // before the first model is loaded; default driven
TpMode tp_mode();
bool tp_driven();  // tp_active() and tp_mode() == driven
bool is_worker();  // tp_active() and rank != 0
bool writes_outputs();  // rank 0: the one rank that prints and writes files
// --tp N (0: not given) must equal the world size; a one-line error otherwise.
void check_tp_option(int64_t tp);
// This rank's shard of the model at `path`; one-line error naming --tp, the
// model and its head counts when the TP size does not divide them.
ShardSpec tp_shard(const ModelConfig& cfg, const std::string& path);
// The model communicator of this process (nullptr without tensor parallelism).
Communicator* tp_communicator();
// This rank's model from an open checkpoint (the whole model in one process).
std::unique_ptr<LlamaModel> load_model_shard(const Checkpoint& ck, int64_t max_chunk = 512);

// ---- driven mode ----
// Rank 0 under tensor parallelism: the driver of the step protocol (created on
// first use, and again after a shutdown: the workers' next serve_steps call).
StepDriver& step_driver();
// Every rank's StepServer::counters (rank-major, on rank 0; empty elsewhere):
// tokens forwarded by all models, by `target`, ops. Driven: rank 0 asks the
// workers (a stats op); lockstep: every rank must call it at the same point.
std::vector<int64_t> rank_counters(const LlamaModel& target);
// A worker: serves the target steps rank 0 drives on `model` until shutdown;
// returns the number of ops applied.
int64_t serve_steps(LlamaModel& model);
// Rank 0: tells serving workers to stop (idempotent; parallel::finalize calls it).
void shutdown_workers();

}  // namespace tf::parallel
