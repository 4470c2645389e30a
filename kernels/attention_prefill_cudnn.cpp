// cuDNN fused flash attention for prefill (see attention_prefill_cudnn.cuh).
// Host C++ only: the frontend is a header-only C++17 library over cuDNN's
// backend API, so g++ compiles this file and nvcc never sees the frontend.
#include "attention_prefill_cudnn.cuh"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common.cuh"
#include "core/cudnn_config_tag.h"
#include "device_release.cuh"

#ifdef TRIFORCE_HAVE_CUDNN
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace tf::cuda {

#ifdef TRIFORCE_HAVE_CUDNN
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant pack.
enum : int64_t { kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4 };

void cudnn_check_at(cudnnStatus_t s, const char* file, int line, const char* expr) {
  if (s != CUDNN_STATUS_SUCCESS) ::tf::fail_at(file, line, std::string("cuDNN error ") + cudnnGetErrorString(s) + " in " + expr);
}
#define CUDNN_CHECK(expr) cudnn_check_at((expr), __FILE__, __LINE__, #expr)

int current_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  TF_CHECK(dev >= 0 && dev < 64, "cudnn attention: device index " << dev << " out of range");
  return dev;
}

// Everything a graph depends on: two calls with equal keys run the same graph.
// The last field is the engine configuration's id (config_id; 0: the heuristics' choice).
using GraphKey = std::array<int64_t, 11>;
// What the kernel of a dynamic-shape graph depends on (its kernel cache is shared by the class).
using ClassKey = std::array<int64_t, 6>;

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the shape
  int64_t workspace = 0;
  uint64_t last_use = 0;
  std::string config;  // the engine configuration's tag
};

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Process-wide state, one forward at a time (the mutex only guards misuse).
struct State {
  std::mutex mu;
  cudnnHandle_t handles[64] = {};
  Workspace workspaces[64];
  std::map<GraphKey, Entry> graphs;
  std::map<ClassKey, std::shared_ptr<fe::KernelCache>> kernel_caches;
  std::vector<std::string> config_tags{""};  // id -> tag; id 0 is the heuristics' choice
  uint64_t clock = 0;
  CudnnAttentionStats stats;
};
State& state() {
  static State* s = new State;  // never destroyed: cuDNN teardown after CUDA's at exit can fail
  return *s;
}

// Frees the graphs (their plans), workspaces and handles before exit (release_device_state); the
// stats stay. Errors ignored: it runs at exit.
void release_state() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.graphs.clear();
  s.kernel_caches.clear();
  for (int d = 0; d < 64; ++d) {
    if (s.workspaces[d].ptr) cudaFree(s.workspaces[d].ptr);
    s.workspaces[d] = Workspace{};
    if (s.handles[d]) cudnnDestroy(s.handles[d]), s.handles[d] = nullptr;
  }
}

bool dynamic_shapes_wanted() {
  static const bool on = [] {
    const char* e = std::getenv("TRIFORCE_CUDNN_DYNAMIC_SHAPES");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

cudnnHandle_t handle_for(State& s, int dev) {
  if (!s.handles[dev]) {
    CUDNN_CHECK(cudnnCreate(&s.handles[dev]));
    at_device_release(release_state);
  }
  return s.handles[dev];
}

void* workspace_for(State& s, int dev, size_t bytes, cudaStream_t stream) {
  Workspace& w = s.workspaces[dev];
  if (bytes > w.bytes) {
    if (w.ptr) {
      CUDA_CHECK(cudaStreamSynchronize(stream));  // a previous run may still read the old buffer
      CUDA_CHECK(cudaFree(w.ptr));
      w.ptr = nullptr, w.bytes = 0;
    }
    const size_t grown = std::max(bytes, size_t(1) << 20);
    CUDA_CHECK(cudaMalloc(&w.ptr, grown));
    w.bytes = grown;
    at_device_release(release_state);
  }
  return w.ptr;
}

uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float scale_of(const AttentionPrefillParams& p) {
  return p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_dim));
}
int64_t head_stride_of(const AttentionPrefillParams& p) {
  return p.head_stride > 0 ? p.head_stride : p.capacity * p.head_dim;
}
int64_t token_stride_of(const AttentionPrefillParams& p) { return p.token_stride > 0 ? p.token_stride : p.head_dim; }

int64_t config_id(State& s, const std::string& tag) {
  for (size_t i = 0; i < s.config_tags.size(); ++i)
    if (s.config_tags[i] == tag) return int64_t(i);
  s.config_tags.push_back(tag);
  return int64_t(s.config_tags.size() - 1);
}

// TRIFORCE_CUDNN_ATTN_CONFIG, read once: "" (unset, empty or "heuristic": the heuristics' first
// choice, as cuDNN ranks them) or the tag of the engine configuration every graph is built with.
const std::string& default_config() {
  static const std::string tag = [] {
    const char* e = std::getenv("TRIFORCE_CUDNN_ATTN_CONFIG");
    const std::string v = e ? e : "";
    if (v.empty() || v == "heuristic") return std::string();
    TF_CHECK(parse_cudnn_config_tag(v), "TRIFORCE_CUDNN_ATTN_CONFIG=" << v
                                             << ": expected heuristic or a cuDNN engine-config tag (eng<N>_k<type>=<value>...)");
    return v;
  }();
  return tag;
}

GraphKey key_of(const AttentionPrefillParams& p, int dev, int64_t config) {
  return {dev, int64_t(p.dtype), p.num_heads, p.num_kv_heads, p.head_dim, p.n, p.kv_length, head_stride_of(p),
          token_stride_of(p), int64_t(float_bits(scale_of(p))), config};
}

// The frontend's knob type of a backend knob type (the tags carry the backend's numbers).
bool frontend_knob(int64_t backend_type, fe::KnobType_t* out) {
  for (int t = int(fe::KnobType_t::SWIZZLE); t <= int(fe::KnobType_t::WARP_SPEC_CFG); ++t) {
    cudnnBackendKnobType_t b;
    if (fe::convert_to_backend_knob_type(fe::KnobType_t(t), b) == CUDNN_STATUS_SUCCESS && int64_t(b) == backend_type) {
      *out = fe::KnobType_t(t);
      return true;
    }
  }
  return false;
}

// One graph: O = softmax(scale · Q Kᵀ + bottom-right causal mask) V, fp32 math, inference (no stats).
std::shared_ptr<fe::graph::Graph> make_graph(const AttentionPrefillParams& p) {
  const int64_t H = p.num_heads, KH = p.num_kv_heads, D = p.head_dim, n = p.n, L = p.kv_length;
  const int64_t hs = head_stride_of(p), ts = token_stride_of(p);
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(p.dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = g->tensor(fe::graph::Tensor_attributes().set_name("Q").set_uid(kUidQ).set_dim({1, H, n, D}).set_stride(
      {n * H * D, D, H * D, 1}));
  auto k = g->tensor(fe::graph::Tensor_attributes().set_name("K").set_uid(kUidK).set_dim({1, KH, L, D}).set_stride(
      {KH * hs, hs, ts, 1}));
  auto v = g->tensor(fe::graph::Tensor_attributes().set_name("V").set_uid(kUidV).set_dim({1, KH, L, D}).set_stride(
      {KH * hs, hs, ts, 1}));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("prefill_attention")
                  .set_generate_stats(false)
                  .set_attn_scale(scale_of(p))
                  .set_causal_mask_bottom_right(true);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  (void)stats;
  o->set_output(true).set_uid(kUidO).set_dim({1, H, n, D}).set_stride({n * H * D, D, H * D, 1});
  return g;
}

// Builds g for the device with engine configuration `tag` ("": the heuristics' first choice); "" on
// success, else cuDNN's reason.
std::string build(fe::graph::Graph& g, cudnnHandle_t h, const std::string& tag) {
  auto fail = [](const char* step, fe::error_t e) { return std::string(step) + ": " + e.get_message(); };
  if (auto e = g.validate(); !e.is_good()) return fail("validate", e);
  if (auto e = g.build_operation_graph(h); !e.is_good()) return fail("build_operation_graph", e);
  if (tag.empty()) {
    if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return fail("create_execution_plans", e);
  } else {
    CudnnConfigTag t;
    if (!parse_cudnn_config_tag(tag, &t)) return "not an engine-config tag: " + tag;
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    for (const auto& [type, choice] : t.knobs) {
      fe::KnobType_t k;
      if (!frontend_knob(type, &k)) return "knob type " + std::to_string(type) + " unknown to this cudnn-frontend";
      knobs[k] = choice;
    }
    if (auto e = g.create_execution_plan(t.engine, knobs); !e.is_good()) return fail("create_execution_plan", e);
  }
  if (auto e = g.check_support(h); !e.is_good()) return fail("check_support", e);
  if (auto e = g.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); !e.is_good()) return fail("build_plans", e);
  return "";
}

void evict_if_full(State& s) {
  if (int64_t(s.graphs.size()) < kMaxCudnnGraphs) return;
  auto oldest = s.graphs.begin();
  for (auto it = s.graphs.begin(); it != s.graphs.end(); ++it)
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  CUDA_CHECK(cudaDeviceSynchronize());  // its plan may still be running, on whichever stream
  s.graphs.erase(oldest);
}

// The entry of p's shape with engine configuration `tag` ("": the heuristics' choice), built on
// first sight. Called with s.mu held.
Entry& plan_locked(State& s, const AttentionPrefillParams& p, const std::string& tag) {
  const int dev = current_device();
  const GraphKey key = key_of(p, dev, config_id(s, tag));
  auto it = s.graphs.find(key);
  if (it != s.graphs.end()) {
    it->second.last_use = ++s.clock;
    return it->second;
  }
  evict_if_full(s);
  cudnnHandle_t h = handle_for(s, dev);
  const auto t0 = std::chrono::steady_clock::now();
  Entry e;
  std::string why;
  // A pinned configuration is built static: create_execution_plan (one engine config) does not
  // attach the class's kernel cache.
  if (tag.empty() && dynamic_shapes_wanted() && cudnnGetVersion() >= 90400) {
    const ClassKey ck{dev, int64_t(p.dtype), p.head_dim, p.num_heads, p.num_kv_heads, key[9]};
    auto& kc = s.kernel_caches[ck];
    if (!kc) kc = std::make_shared<fe::KernelCache>();
    auto g = make_graph(p);
    g->set_dynamic_shape_enabled(true).set_kernel_cache(kc);
    why = build(*g, h, tag);
    if (why.empty()) e.graph = g, ++s.stats.graphs_dynamic;
  }
  if (!e.graph) {  // no dynamic shapes here, or cuDNN refused them for this graph: a static one
    auto g = make_graph(p);
    const std::string why_static = build(*g, h, tag);
    if (why_static.empty()) e.graph = g;
    else why = why_static;
  }
  if (e.graph) {
    TF_CHECK(e.graph->get_workspace_size(e.workspace).is_good(), "cudnn attention: no workspace size");
    if (!e.graph->get_plan_name(e.config).is_good()) e.config = tag;
    ++s.stats.graphs_built;
  } else {
    ++s.stats.refused;
    std::ostringstream m;
    m << "n=" << p.n << " kv_length=" << p.kv_length << " heads=" << p.num_heads << "/" << p.num_kv_heads
      << " head_dim=" << p.head_dim << " " << dtype_name(p.dtype) << (tag.empty() ? "" : " config " + tag) << ": "
      << why;
    s.stats.last_refusal = m.str();
  }
  s.stats.plan_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e.last_use = ++s.clock;
  return s.graphs.emplace(key, std::move(e)).first->second;
}

// The default path's entry: the pinned configuration of TRIFORCE_CUDNN_ATTN_CONFIG must build (a
// configuration the user named and cuDNN cannot run is an error, never a silent fallback).
Entry& default_plan_locked(State& s, const AttentionPrefillParams& p) {
  const std::string& tag = default_config();
  Entry& e = plan_locked(s, p, tag);
  TF_CHECK(e.graph || tag.empty(),
           "TRIFORCE_CUDNN_ATTN_CONFIG=" << tag << ": cuDNN cannot build it for " << s.stats.last_refusal);
  return e;
}

void run_locked(State& s, const AttentionPrefillParams& p, Entry& e, cudaStream_t stream) {
  const int dev = current_device();
  cudnnHandle_t h = handle_for(s, dev);
  CUDNN_CHECK(cudnnSetStream(h, stream));
  void* ws = e.workspace > 0 ? workspace_for(s, dev, size_t(e.workspace), stream) : nullptr;
  std::unordered_map<int64_t, void*> pack = {{kUidQ, const_cast<void*>(p.q)},
                                             {kUidK, const_cast<void*>(p.k_cache)},
                                             {kUidV, const_cast<void*>(p.v_cache)},
                                             {kUidO, p.out}};
  auto r = e.graph->execute(h, pack, ws);
  TF_CHECK(r.is_good(), "cudnn attention: execute failed: " << r.get_message());
  ++s.stats.runs;
}

}  // namespace

bool cudnn_attention_available() {
  static int known[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    return false;
  }
  if (!known[dev]) {
    int major = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major >= 8 && cudnnGetVersion() >= 90000;
    cudaGetLastError();
    known[dev] = ok ? 1 : 2;
  }
  return known[dev] == 1;
}

std::string cudnn_attention_version() {
  const size_t v = cudnnGetVersion();
  std::ostringstream m;
  m << "cuDNN " << v / 10000 << "." << (v % 10000) / 100 << "." << v % 100 << ", frontend "
    << CUDNN_FRONTEND_MAJOR_VERSION << "." << CUDNN_FRONTEND_MINOR_VERSION << "." << CUDNN_FRONTEND_PATCH_VERSION;
  return m.str();
}

bool attention_prefill_cudnn_plan(const AttentionPrefillParams& p) {
  if (!cudnn_attention_available()) return false;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return default_plan_locked(s, p).graph != nullptr;
}

void attention_prefill_cudnn(const AttentionPrefillParams& p, cudaStream_t stream) {
  TF_CHECK(cudnn_attention_available(), "cudnn attention: no cuDNN >= 9 for this device (" << cudnn_attention_version() << ")");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Entry& e = default_plan_locked(s, p);
  TF_CHECK(e.graph, "cudnn attention: cuDNN refuses " << s.stats.last_refusal);
  run_locked(s, p, e, stream);
}

std::string attention_prefill_cudnn_config(const AttentionPrefillParams& p) {
  if (!cudnn_attention_available()) return "";
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const Entry& e = default_plan_locked(s, p);
  return e.graph ? e.config : "";
}

bool attention_prefill_cudnn_with(const AttentionPrefillParams& p, const std::string& tag, cudaStream_t stream) {
  if (!cudnn_attention_available()) return false;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Entry& e = plan_locked(s, p, tag);
  if (!e.graph) return false;
  run_locked(s, p, e, stream);
  return true;
}

std::vector<std::string> attention_prefill_cudnn_candidates(const AttentionPrefillParams& p) {
  if (!cudnn_attention_available()) return {};
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudnnHandle_t h = handle_for(s, current_device());
  auto g = make_graph(p);
  if (!g->validate().is_good() || !g->build_operation_graph(h).is_good()) return {};
  if (!g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}).is_good() &&
      !g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}).is_good())
    return {};
  std::vector<std::string> tags;
  auto add = [&](const std::string& t) {
    if (parse_cudnn_config_tag(t) && std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
  };
  for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
    std::string name;
    if (g->get_plan_name_at_index(i, name).is_good()) add(name);
  }
  CudnnConfigTag first;
  if (tags.empty() || !parse_cudnn_config_tag(tags[0], &first)) return tags;
  std::vector<fe::Knob> knobs;
  if (!g->get_knobs_for_engine(first.engine, knobs).is_good()) return tags;
  for (const auto& k : knobs) {
    cudnnBackendKnobType_t b;
    if (fe::convert_to_backend_knob_type(k.type, b) != CUDNN_STATUS_SUCCESS) continue;
    const int64_t step = std::max<int64_t>(k.stride, 1);
    int tried = 0;
    for (int64_t v = k.minValue; v <= k.maxValue && tried < 32; v += step, ++tried) {
      CudnnConfigTag t = first;
      bool found = false;
      for (auto& [type, choice] : t.knobs)
        if (type == int64_t(b)) choice = v, found = true;
      if (!found) t.knobs.emplace_back(int64_t(b), v);
      add(cudnn_config_tag_string(t));
    }
  }
  return tags;
}

CudnnAttentionStats cudnn_attention_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

#else  // built without cuDNN

bool cudnn_attention_available() { return false; }
std::string cudnn_attention_version() { return "not built with cuDNN (TRIFORCE_CUDNN)"; }
bool attention_prefill_cudnn_plan(const AttentionPrefillParams&) { return false; }
std::string attention_prefill_cudnn_config(const AttentionPrefillParams&) { return ""; }
bool attention_prefill_cudnn_with(const AttentionPrefillParams&, const std::string&, cudaStream_t) { return false; }
std::vector<std::string> attention_prefill_cudnn_candidates(const AttentionPrefillParams&) { return {}; }
void attention_prefill_cudnn(const AttentionPrefillParams&, cudaStream_t) {
  TF_FAIL("cudnn attention: this build has no cuDNN (configure with TRIFORCE_CUDNN and the cudnn-frontend headers)");
}
CudnnAttentionStats cudnn_attention_stats() { return {}; }

#endif

}  // namespace tf::cuda
