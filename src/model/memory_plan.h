// The static memory plan of a run: every buffer the model and its caches will
// allocate, sized from the config and the requested context before anything
// is allocated, so a request that cannot fit fails up front with the numbers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tf {

struct PlanRequest {
  Device device = Device::CPU;
  DType dtype = DType::F32;     // weights, activations and KV
  int64_t context = 4096;       // tokens the full cache holds (prompt + generated + speculation)
  int64_t max_chunk = 512;      // prefill chunk (scratch rows)
  bool retrieval = false;       // a retrieval cache level (triforce, retrieval, ngram-triforce)
  int64_t budget = 4096, chunk = 8, retrieval_tail = 256;
  bool streaming_draft = false; // a StreamingLLM draft cache
  ModelConfig draft;            // used when streaming_draft (0 layers: none)
  int64_t draft_window = 250;
  int64_t tp = 1;               // tensor-parallel ranks: per-rank heads and intermediate
  // --offload-kv: the full cache's layers >= on_chip_layers in pinned host
  // memory, plus two device staging slots of one layer each.
  bool offload_kv = false;
  int64_t on_chip_layers = 0;
  int64_t kv_copies = 1;        // offloaded full caches pinned at once (a snapshot kept beside its copy: 2)
};

struct MemoryPlan {
  struct Item {
    std::string what;
    double bytes = 0;
    bool host = false;  // pinned host memory (offloaded KV), not device memory
  };
  std::vector<Item> items;
  double total() const;       // device bytes (host items excluded)
  double host_total() const;  // pinned host bytes
  std::string describe() const;  // one line per item plus the totals, in GiB
};

MemoryPlan plan_memory(const ModelConfig& cfg, const PlanRequest& req);
// Throws (one line, with the plan's total, the free bytes and the largest items)
// when the plan does not fit in free_bytes. `where` names the device.
void check_plan_fits(const MemoryPlan& plan, double free_bytes, const std::string& where);
// The same for the pinned host items against the host's available bytes.
void check_host_fits(const MemoryPlan& plan, double available_bytes);

}  // namespace tf
