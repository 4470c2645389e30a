#include "parallel/step_protocol.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"

namespace tf::parallel {

const char* op_name(Op op) {
  switch (op) {
    case Op::create_full: return "create_full";
    case Op::create_retrieval: return "create_retrieval";
    case Op::destroy: return "destroy";
    case Op::begin: return "begin";
    case Op::logits: return "logits";
    case Op::sync: return "sync";
    case Op::reset: return "reset";
    case Op::rebuild: return "rebuild";
    case Op::shutdown: return "shutdown";
    case Op::create_streaming: return "create_streaming";
    case Op::snapshot: return "snapshot";
    case Op::drop_snapshot: return "drop_snapshot";
    case Op::seed: return "seed";
    case Op::rebuild_from: return "rebuild_from";
    case Op::stats: return "stats";
  }
  return "?";
}

bool op_computes(Op op) {
  return op == Op::begin || op == Op::logits || op == Op::rebuild || op == Op::shutdown || op == Op::snapshot ||
         op == Op::rebuild_from || op == Op::stats;
}

namespace {
bool has_seq(Op op) {
  return op == Op::begin || op == Op::logits || op == Op::sync || op == Op::rebuild || op == Op::snapshot ||
         op == Op::rebuild_from;
}

struct Writer {
  std::vector<uint8_t>& out;
  template <class T> void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
};

struct Reader {
  const std::vector<uint8_t>& in;
  size_t at = 0;
  template <class T> T get() {
    TF_CHECK(at + sizeof(T) <= in.size(), "step protocol: truncated message (" << in.size() << " bytes)");
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
};
}  // namespace

std::vector<uint8_t> StepCodec::encode(const std::vector<StepOp>& ops) {
  std::vector<uint8_t> out;
  Writer w{out};
  w.put<uint32_t>(uint32_t(ops.size()));
  for (const StepOp& o : ops) {
    w.put<uint8_t>(uint8_t(o.op));
    w.put<int32_t>(o.id);
    w.put<uint8_t>(uint8_t(o.args.size()));
    for (int64_t a : o.args) w.put<int64_t>(a);
    if (!has_seq(o.op)) continue;
    size_t lcp = 0;
    const size_t lim = std::min(prev_.size(), o.seq.size());
    while (lcp < lim && prev_[lcp] == o.seq[lcp]) ++lcp;
    w.put<uint64_t>(lcp);
    w.put<uint64_t>(o.seq.size() - lcp);
    for (size_t i = lcp; i < o.seq.size(); ++i) w.put<int32_t>(o.seq[i]);
    prev_ = o.seq;
  }
  return out;
}

std::vector<StepOp> StepCodec::decode(const std::vector<uint8_t>& bytes) {
  Reader r{bytes};
  const uint32_t n = r.get<uint32_t>();
  std::vector<StepOp> ops(n);
  for (StepOp& o : ops) {
    const uint8_t code = r.get<uint8_t>();
    TF_CHECK(code >= uint8_t(Op::create_full) && code <= kLastOp,
             "step protocol: unknown op code " << int(code));
    o.op = Op(code);
    o.id = r.get<int32_t>();
    o.args.resize(r.get<uint8_t>());
    for (int64_t& a : o.args) a = r.get<int64_t>();
    if (!has_seq(o.op)) continue;
    const uint64_t lcp = r.get<uint64_t>(), fresh = r.get<uint64_t>();
    TF_CHECK(lcp <= prev_.size(), "step protocol: sequence delta reuses " << lcp << " tokens of " << prev_.size());
    o.seq.assign(prev_.begin(), prev_.begin() + int64_t(lcp));
    for (uint64_t i = 0; i < fresh; ++i) o.seq.push_back(r.get<int32_t>());
    prev_ = o.seq;
  }
  TF_CHECK(r.at == bytes.size(), "step protocol: " << bytes.size() - r.at << " trailing bytes");
  return ops;
}

StepChannel::StepChannel(MPI_Comm parent) {
  MPI_Comm_dup(parent, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

StepChannel::~StepChannel() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Frame: [uint32 total bytes][first kFrame - 4 bytes of the batch]; the rest
// of a longer batch follows in a second broadcast.
void StepChannel::send(const std::vector<uint8_t>& bytes) {
  TF_CHECK(rank_ == 0, "step channel: only rank 0 sends");
  TF_CHECK(bytes.size() < (size_t(1) << 31), "step channel: a batch of " << bytes.size() << " bytes is too large");
  const auto t0 = std::chrono::steady_clock::now();
  uint8_t frame[kFrame] = {};
  const uint32_t total = uint32_t(bytes.size());
  std::memcpy(frame, &total, 4);
  const size_t head = std::min<size_t>(bytes.size(), kFrame - 4);
  std::memcpy(frame + 4, bytes.data(), head);
  MPI_Bcast(frame, kFrame, MPI_BYTE, 0, comm_);
  if (bytes.size() > head)
    MPI_Bcast(const_cast<uint8_t*>(bytes.data() + head), int(bytes.size() - head), MPI_BYTE, 0, comm_);
  stats_.bcast_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.batches;
  stats_.bytes += int64_t(bytes.size());
}

std::vector<uint8_t> StepChannel::receive() {
  uint8_t frame[kFrame];
  MPI_Bcast(frame, kFrame, MPI_BYTE, 0, comm_);
  uint32_t total = 0;
  std::memcpy(&total, frame, 4);
  std::vector<uint8_t> bytes(total);
  const size_t head = std::min<size_t>(total, kFrame - 4);
  std::memcpy(bytes.data(), frame + 4, head);
  if (total > head) MPI_Bcast(bytes.data() + head, int(total - head), MPI_BYTE, 0, comm_);
  ++stats_.batches;
  stats_.bytes += total;
  return bytes;
}

std::vector<int64_t> StepChannel::gather(const std::vector<int64_t>& mine) {
  std::vector<int64_t> all(rank_ == 0 ? mine.size() * size_t(size_) : 0);
  MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, 0, comm_);
  return all;
}

}  // namespace tf::parallel
