// Tensor parallelism for one process of the job: one MPI rank per shard of
// the target (per GPU); the TP size is the world size, and one process
// without mpirun is TP 1.
//
// How the ranks stay in step (docs/ARCHITECTURE.md, "Tensor parallelism"):
// every rank runs the same command on its own shard. The model all-reduces
// after o and down and all-gathers the vocab-parallel logits, so every rank
// holds bit-identical logits, draws the same Philox numbers and therefore
// takes the same accept/reject path, the same rollbacks and the same
// re-retrievals, with no further messages. Only rank 0 writes: the workers'
// stdout and stderr are closed at launch (errors still reach the terminal)
// and commands write files only where writes_outputs() holds.
//
// The alternative, rank 0 driving workers through an op stream, is
// step_driver.h / step_server.h (measured against this in the docs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dist/comm.h"
#include "model/checkpoint.h"
#include "model/llama.h"

namespace tf::dist {

class StepDriver;

bool tp_active();  // world size > 1
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

// ---- the op-stream alternative ----
// Rank 0 under tensor parallelism: the driver of the step protocol (created on first use).
StepDriver& step_driver();
// A worker: serves the target steps rank 0 drives on `model` until shutdown;
// returns the number of ops applied.
int64_t serve_steps(LlamaModel& model);
// Rank 0: tells serving workers to stop (idempotent; dist::finalize calls it).
void shutdown_workers();

}  // namespace tf::dist
