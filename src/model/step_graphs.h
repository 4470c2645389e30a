// StepGraphs: CUDA graphs of a model's decode-sized forward steps. A step's
// launches depend on a handful of things the host knows (the token count, the
// logit rows, the cache's storage and device length, the attention grid, the
// workspace); everything else a step reads (token ids, positions, slots, rope
// rows, the KV length) sits in fixed device or pinned buffers that the host
// refreshes before each launch. So one graph per key is recorded (on the
// key's second use: the first runs eagerly and lets every lazy setup happen
// outside a capture) and replayed from then on. Anything that fails to
// capture runs eagerly, and its key is not tried again.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace tf {

struct StepGraphKey {
  int64_t n = 0, rows_out = 0, grid_slots = 0, capacity = 0;
  bool ids = false;  // the rows out are argmax ids (forward_greedy), not logits
  bool device_rows = false;  // the logits rows stay on the device (forward_distributions): no copy node
  int chain = -1;  // a forward_greedy_chain step (LlamaModel::chain_step_): its sources and argmax row differ
  const void *k = nullptr, *v = nullptr, *length = nullptr, *workspace = nullptr;
  bool operator==(const StepGraphKey& o) const {
    return n == o.n && rows_out == o.rows_out && ids == o.ids && device_rows == o.device_rows && chain == o.chain &&
           grid_slots == o.grid_slots &&
           capacity == o.capacity && k == o.k && v == o.v && length == o.length && workspace == o.workspace;
  }
};

class StepGraphs {
 public:
  StepGraphs() = default;
  ~StepGraphs() { clear(); }
  // A copied model shares nothing with the original's graphs: it records its own.
  StepGraphs(const StepGraphs&) {}
  StepGraphs& operator=(const StepGraphs& o) {
    if (this != &o) clear();
    return *this;
  }
  StepGraphs(StepGraphs&& o) noexcept;
  StepGraphs& operator=(StepGraphs&& o) noexcept;

  // Runs `enqueue` (which only queues work on cuda::compute_stream()) for
  // `key`: eagerly on first use, captured into a graph on the second, replayed
  // after that. Does not wait for the stream.
  void run(const StepGraphKey& key, const std::function<void()>& enqueue);
  // Destroys every graph (their buffers are about to change).
  void clear();

  // Steps by how they ran: recorded into a graph (and launched from it),
  // launched from a recorded graph, or run eagerly (a key's first use, or a
  // key that failed to capture).
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  int64_t eager_runs() const { return eager_runs_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    StepGraphKey key;
    int uses = 0;
    void* exec = nullptr;  // cudaGraphExec_t
    bool eager_only = false;
    uint64_t last_use = 0;
  };
  Entry& find_or_add(const StepGraphKey& key);

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  int64_t captures_ = 0, replays_ = 0, eager_runs_ = 0;
};

}  // namespace tf
