// The step protocol: how rank 0 tells the tensor-parallel workers which target
// step to run next. Rank 0 owns the draft and the speculative loop; a worker
// owns only its shard of the target and mirrors every target level rank 0
// creates (same kind, same options, its own KV heads), applying the same calls
// in the same order, so every collective inside a forward is matched.
//
// A message is a batch of ops, broadcast from rank 0 (MPI_Bcast on the
// channel's own communicator). Ops that make a worker compute (forwards) end a
// batch; rollbacks and resets are queued and ride along with the next one, so a
// verification step costs one broadcast. Token sequences are sent as a delta
// against the previous sequence of the stream (common prefix length + suffix):
// a step sends only the tokens that are new since the last one.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::parallel {

enum class Op : uint8_t {
  create_full = 1,       // id, capacity: a target level on a FullKVCache
  create_retrieval = 2,  // id, budget, chunk, tail capacity: a level on a RetrievalKVCache
  destroy = 3,           // id
  begin = 4,             // id, prompt: a new prompt (a retrieval level prefills and selects here)
  logits = 5,            // id, n_out, seq: forward on the level's cache (prefill or verify)
  sync = 6,              // id, context: roll back to the committed context
  reset = 7,             // id
  rebuild = 8,           // id, context: re-retrieval from the committed context
  shutdown = 9,
  create_streaming = 10,  // id, sink, window, tail capacity: a level on a StreamingLLM cache
  snapshot = 11,          // id, prompt: the target's prefill of the prompt (speculative::PrefillSnapshot)
  drop_snapshot = 12,     // id
  seed = 13,              // id, snapshot id, n: the level starts from the snapshot (no forward)
  rebuild_from = 14,      // id, top id, context: re-retrieval from the full level `top`'s cache
  stats = 15,             // every worker answers with its counters (StepChannel::gather)
};
constexpr uint8_t kLastOp = uint8_t(Op::stats);
const char* op_name(Op op);

struct StepOp {
  Op op = Op::shutdown;
  int32_t id = -1;
  std::vector<int64_t> args;  // op-specific integers (see Op)
  std::vector<int32_t> seq;   // begin/logits/sync/rebuild: the token sequence
};
// Ops that do collective work on the workers; they end a batch.
bool op_computes(Op op);

// Encodes/decodes batches of ops. Both ends keep the previous sequence of the
// stream to delta-encode the next one, so an encoder's batches must be decoded
// in order by one decoder.
class StepCodec {
 public:
  std::vector<uint8_t> encode(const std::vector<StepOp>& ops);
  std::vector<StepOp> decode(const std::vector<uint8_t>& bytes);

 private:
  std::vector<int32_t> prev_;
};

struct ChannelStats {
  int64_t batches = 0, ops = 0, bytes = 0;
  double bcast_s = 0;  // wall time rank 0 spent broadcasting
};

// The broadcast channel (rank 0 sends, the others receive). A batch is one
// broadcast of a fixed-size frame; a batch larger than the frame follows in a
// second broadcast.
class StepChannel {
 public:
  explicit StepChannel(MPI_Comm parent = MPI_COMM_WORLD);
  ~StepChannel();
  StepChannel(const StepChannel&) = delete;
  StepChannel& operator=(const StepChannel&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  void send(const std::vector<uint8_t>& bytes);  // rank 0
  std::vector<uint8_t> receive();                 // workers
  // Every rank contributes `mine` (the same length everywhere); rank 0 gets
  // them all, rank-major, the others an empty vector.
  std::vector<int64_t> gather(const std::vector<int64_t>& mine);
  const ChannelStats& stats() const { return stats_; }

  static constexpr int kFrame = 512;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  ChannelStats stats_;
};

}  // namespace tf::parallel
