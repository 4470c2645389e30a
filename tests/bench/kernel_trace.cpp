#include "kernel_trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#ifdef TRIFORCE_HAVE_CUPTI
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace tf::bench {
namespace {

#ifdef TRIFORCE_HAVE_CUPTI
const char* trace_dir() {
  static const char* d = [] {
    const char* s = std::getenv("TRIFORCE_KERNEL_TRACE");
    return s && *s ? s : nullptr;
  }();
  return d;
}

struct Record {
  std::string name;
  uint64_t start, end;
};
std::mutex g_mu;
std::vector<Record> g_records;
bool g_registered = false;

// skinny_mma_kernel<...>(...) -> skinny_mma_kernel: the name without namespace, template and arguments.
std::string short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  // Our kernels live in anonymous namespaces, whose "(" would cut the name before it starts.
  for (const std::string anon : {"(anonymous namespace)::", "{anonymous}::"})
    for (auto at = s.find(anon); at != std::string::npos; at = s.find(anon)) s.erase(at, anon.size());
  for (const char c : {'(', '<'})
    if (const auto at = s.find(c); at != std::string::npos) s.resize(at);
  if (const auto at = s.rfind("::"); at != std::string::npos) s = s.substr(at + 2);
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(8) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_records.push_back({short_name(k->name), k->start, k->end});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      g_records.push_back({"[memcpy]", m->start, m->end});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      g_records.push_back({"[memset]", m->start, m->end});
    }
  }
  std::free(buffer);
}

bool ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s failed: %s (TRIFORCE_KERNEL_TRACE gives no table)\n", what,
               msg ? msg : "?");
  return false;
}
#endif

}  // namespace

void kernel_trace_begin() {
#ifdef TRIFORCE_HAVE_CUPTI
  if (!trace_dir()) return;
  cudaDeviceSynchronize();
  if (!g_registered) {
    if (!ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks"))
      return;
    g_registered = true;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(kernels)");
  ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(memcpy)");
  ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(memset)");
#endif
}

void kernel_trace_end(const std::string& label, long iterations) {
#ifdef TRIFORCE_HAVE_CUPTI
  if (!trace_dir() || !g_registered) return;
  cudaDeviceSynchronize();
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityFlushAll(1);
  std::vector<Record> recs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    recs.swap(g_records);
  }
  const double iters = double(std::max(1L, iterations));
  std::map<std::string, std::pair<long, double>> per;  // name -> (launches, ns)
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const Record& r : recs) {
    auto& p = per[r.name];
    ++p.first;
    p.second += double(r.end - r.start);
    spans.emplace_back(r.start, r.end);
  }
  // Busy time: the union of the kernels' intervals (PDL overlaps neighbours).
  std::sort(spans.begin(), spans.end());
  double busy = 0;
  uint64_t lo = 0, hi = 0;
  for (const auto& [s, e] : spans) {
    if (s > hi) {
      busy += double(hi - lo);
      lo = s, hi = e;
    } else {
      hi = std::max(hi, e);
    }
  }
  busy += double(hi - lo);
  const double span = spans.empty() ? 0.0 : double(hi - spans.front().first);
  std::string file = label;
  for (char& c : file)
    if (c == '/' || c == ':' || c == ' ') c = '_';
  // Written beside its final name and renamed when complete: never a half-written table.
  const std::string path = std::string(trace_dir()) + "/" + file + ".csv", tmp = path + ".tmp";
  std::ofstream out(tmp);
  out << "kernel,launches_per_iter,us_per_iter,us_each,share_of_busy\n";
  std::vector<std::pair<std::string, std::pair<long, double>>> rows(per.begin(), per.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  for (const auto& [name, v] : rows)
    out << name << "," << double(v.first) / iters << "," << v.second / 1e3 / iters << ","
        << v.second / 1e3 / double(v.first) << "," << (busy > 0 ? v.second / busy : 0.0) << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(stderr,
               "kernel_trace %s: %zu kernels (%.1f per iteration); per iteration: busy %.1f us, span %.1f us, "
               "idle %.1f us -> %s\n",
               label.c_str(), recs.size(), double(recs.size()) / iters, busy / 1e3 / iters, span / 1e3 / iters,
               (span - busy) / 1e3 / iters, path.c_str());
#else
  (void)label;
  (void)iterations;
#endif
}

}  // namespace tf::bench
