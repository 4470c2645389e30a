#include "model/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/check.h"
#include "model/prefill_options.h"

namespace tf {

namespace {
double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }
}  // namespace

double MemoryPlan::total() const {
  double t = 0;
  for (const auto& i : items)
    if (!i.host) t += i.bytes;
  return t;
}

double MemoryPlan::host_total() const {
  double t = 0;
  for (const auto& i : items)
    if (i.host) t += i.bytes;
  return t;
}

std::string MemoryPlan::describe() const {
  std::ostringstream os;
  char buf[160];
  for (const auto& i : items) {
    std::snprintf(buf, sizeof buf, "  %-56s %10.3f GiB%s\n", i.what.c_str(), gib(i.bytes),
                  i.host ? " (pinned host)" : "");
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-56s %10.3f GiB\n", "total", gib(total()));
  os << buf;
  if (host_total() > 0) {
    std::snprintf(buf, sizeof buf, "  %-56s %10.3f GiB\n", "total pinned host", gib(host_total()));
    os << buf;
  }
  return os.str();
}

MemoryPlan plan_memory(const ModelConfig& c, const PlanRequest& r) {
  // Per rank; a TP size that does not divide the heads is refused by the
  // sharding (parallel::tp_shard) with its own message, so round up here.
  const int64_t tp = std::max<int64_t>(1, r.tp);
  const double es = double(dtype_size(r.dtype));
  const double kvh = double((c.num_kv_heads + tp - 1) / tp), h = double((c.num_heads + tp - 1) / tp);
  const double inter = double((c.intermediate_size + tp - 1) / tp), hd = double(c.head_dim);
  const double per_layer = es * (2 * double(c.hidden_size) +                   // norms
                                 (h + 2 * kvh) * hd * double(c.hidden_size) +  // q, k, v
                                 h * hd * double(c.hidden_size) +              // o
                                 3 * inter * double(c.hidden_size));           // gate, up, down
  const double embed = es * double(c.vocab_size) * double(c.hidden_size);
  MemoryPlan p;
  p.items.push_back({"weights", per_layer * double(c.num_layers) + embed * (c.tie_word_embeddings ? 1 : 2) +
                                    es * double(c.hidden_size)});
  const double kv_token = 2.0 * double(c.num_layers) * kvh * hd * es;
  const std::string ctx = std::to_string(r.context) + " tokens";
  if (r.offload_kv) {
    const int64_t on_chip = std::clamp<int64_t>(r.on_chip_layers, 0, c.num_layers);
    const double layer_token = 2.0 * kvh * hd * es;  // K and V of one layer
    if (on_chip > 0)
      p.items.push_back({"full KV cache, " + std::to_string(on_chip) + " on-chip layers (" + ctx + ")",
                         layer_token * double(on_chip) * double(r.context)});
    if (on_chip < c.num_layers) {
      const int64_t copies = std::max<int64_t>(1, r.kv_copies);
      p.items.push_back({"full KV cache, " + std::to_string(c.num_layers - on_chip) + " offloaded layers (" + ctx +
                             (copies > 1 ? ", x" + std::to_string(copies) : std::string()) + ")",
                         layer_token * double(c.num_layers - on_chip) * double(r.context) * double(copies), true});
      p.items.push_back({"KV offload staging (2 layers)", 2.0 * layer_token * double(r.context)});
    }
  } else {
    p.items.push_back({"full KV cache (" + ctx + ")", kv_token * double(r.context)});
  }
  if (r.retrieval)
    p.items.push_back({"retrieval KV cache (budget " + std::to_string(r.budget) + ")",
                       kv_token * double(r.budget + r.chunk + r.retrieval_tail)});
  if (r.streaming_draft && r.draft.num_layers > 0) {
    const double dkv = 2.0 * double(r.draft.num_layers) * double(r.draft.num_kv_heads) * double(r.draft.head_dim) * es;
    p.items.push_back({"draft StreamingLLM cache", dkv * double(r.draft_window + 64)});
  }
  const double C = double(r.max_chunk);
  double scratch = es * C * (3 * double(c.hidden_size) + (2 * h + 2 * kvh) * hd + 2 * inter);
  if (r.tp > 1 && r.device == Device::CUDA) scratch += 4.0 * C * double(c.hidden_size);  // f32 row-parallel partials
  if (r.device == Device::CUDA && r.max_chunk > 32 && prefill_options_default().stacked_gemms)
    scratch += es * C * ((h + 2 * kvh) * hd + 2 * inter);  // the stacked prefill GEMMs' outputs
  p.items.push_back({"activation scratch (chunk " + std::to_string(r.max_chunk) + ")", scratch});
  if (r.device == Device::CUDA) {
    p.items.push_back({"logits rows (f32)", 4.0 * std::min(64.0, C) * double(c.vocab_size)});
    // Split-KV partials: up to 32 queries x heads x (head_dim + 1) floats x splits.
    p.items.push_back({"attention split workspace", 4.0 * 32 * h * (hd + 1) * 1024});
    p.items.push_back({"CUDA context, cuBLAS workspace (reserve)", 1.0 * 1024 * 1024 * 1024});
  }
  return p;
}

void check_host_fits(const MemoryPlan& plan, double available_bytes) {
  const double need = plan.host_total();
  if (need <= 0 || available_bytes <= 0 || need <= available_bytes) return;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "memory plan does not fit in host memory: --offload-kv pins %.2f GiB of KV but %.2f GiB are "
                "available; lower --context or keep more layers on the GPU (--on-chip-layers)",
                gib(need), gib(available_bytes));
  TF_FAIL(buf);
}

void check_plan_fits(const MemoryPlan& plan, double free_bytes, const std::string& where) {
  if (plan.total() <= free_bytes) return;
  auto items = plan.items;
  items.erase(std::remove_if(items.begin(), items.end(), [](const auto& i) { return i.host; }), items.end());
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::ostringstream os;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f GiB", gib(plan.total()));
  os << "memory plan does not fit on " << where << ": needs " << buf;
  std::snprintf(buf, sizeof buf, "%.2f GiB", gib(free_bytes));
  os << " but " << buf << " are free (";
  for (size_t i = 0; i < std::min<size_t>(2, items.size()); ++i) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", gib(items[i].bytes));
    os << (i ? ", " : "") << items[i].what << " " << buf;
  }
  os << "); lower --context or --budget";
  TF_FAIL(os.str());
}

}  // namespace tf
