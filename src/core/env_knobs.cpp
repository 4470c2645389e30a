#include "core/env_knobs.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/cudnn_config_tag.h"

extern char** environ;

namespace tf {
namespace {

bool any(const std::string&) { return true; }
bool switch01(const std::string& v) { return v == "0" || v == "1"; }
bool one_of(const std::string& v, std::initializer_list<const char*> set) {
  return std::any_of(set.begin(), set.end(), [&](const char* s) { return v == s; });
}
// A decimal integer in [lo, hi], nothing else.
bool int_in(const std::string& v, long long lo, long long hi) {
  if (v.empty() || v.size() > 18) return false;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  return end && *end == '\0' && x >= lo && x <= hi;
}

// Each knob's values as its reader takes them (the readers refuse the same
// values where they parse them; this table says so before any model exists).
const std::vector<EnvKnob> kKnobs = {
    // Step fusions of CUDA models (model/step_fusions.cpp).
    {"TRIFORCE_STACKED_GEMMS", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_ROPE_KV", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_ADD_NORM", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_PERSISTENT_STEP", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_PDL", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_SILU_DOWN", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_COMBINE", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_NORM_GEMM", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_GATE_UP_SILU", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_FUSED_QKV_ROPE", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_DIRECT_SINGLE_SPLIT", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_INPUTS_KERNEL", "0 or 1", switch01, "model/step_fusions.cpp"},
    {"TRIFORCE_PREFILL_STACKED", "0 or 1", switch01, "model/prefill_options.cpp"},
    {"TRIFORCE_DEVICE_SAMPLING", "0 or 1", switch01, "model/llama.cpp"},
    {"TRIFORCE_DEVICE_ARGMAX", "0 or 1", switch01, "model/llama.cpp"},
    {"TRIFORCE_WARM_STEP_GRAPHS", "0 or 1", switch01, "speculative/chain.cpp"},
    {"TRIFORCE_CPU_DRAFT_F16", "0 or 1", switch01, "model/cpu_f16_linears.cpp"},
    {"TRIFORCE_TP_VERBOSE", "0 or 1", switch01, "parallel/launch.cpp"},
    {"TRIFORCE_PERSISTENT_LM_HEAD", "0 or 1", switch01, "kernels/persistent_step.cu"},
    {"TRIFORCE_PERSISTENT_FUSED_ATTN", "0 or 1", switch01, "kernels/persistent_step.cu"},
    {"TRIFORCE_PERSISTENT_STAGE_WEIGHTS", "0 or 1", switch01, "kernels/persistent_step.cu"},
    {"TRIFORCE_PERSISTENT_KV_PREFETCH", "0 or 1", switch01, "kernels/persistent_step.cu"},
    {"TRIFORCE_CUDNN_DYNAMIC_SHAPES", "0 or 1", switch01, "kernels/attention_prefill_cudnn.cpp"},
    {"TRIFORCE_GREEDY_CHAIN", "0 or 1", switch01, "model/llama.cpp"},
    {"TRIFORCE_CUDNN_ATTN_CONFIG", "heuristic or a cuDNN engine-config tag (eng<N>_k<type>=<value>...)",
     [](const std::string& v) { return v == "heuristic" || parse_cudnn_config_tag(v); },
     "kernels/attention_prefill_cudnn.cpp"},
    {"TRIFORCE_ATTN_SPLIT_WARPS", "auto, 4 or 8", [](const std::string& v) { return one_of(v, {"auto", "4", "8"}); },
     "kernels/attention_decode.cu"},
    {"TRIFORCE_ATTN_SPLIT_SLOTS", "auto or a multiple of 64 (>= 64)",
     [](const std::string& v) { return v == "auto" || (int_in(v, 64, int64_t(1) << 30) && std::atoll(v.c_str()) % 64 == 0); },
     "ops/cpu/ops_cpu.cpp"},
    {"TRIFORCE_CPU_KERNELS", "auto, generic or blas",
     [](const std::string& v) { return one_of(v, {"auto", "generic", "blas"}); }, "ops/cpu/skinny_cpu.cpp"},
    {"TRIFORCE_GEMM_ALGO", "cublas, lt, tuned or auto",
     [](const std::string& v) { return one_of(v, {"cublas", "lt", "tuned", "auto"}); }, "kernels/gemm.cu"},
    {"TRIFORCE_PREFILL_ATTENTION", "auto, cudnn or ours",
     [](const std::string& v) { return one_of(v, {"auto", "cudnn", "ours"}); }, "kernels/attention_prefill.cu"},
    {"TRIFORCE_PREFILL_KERNEL", "mma or auto", [](const std::string& v) { return one_of(v, {"mma", "auto"}); },
     "kernels/attention_prefill.cu"},
    {"TRIFORCE_SKINNY_VARIANT", "mma_k8u4, mma_k4u8, simt, legacy or 0-3",
     [](const std::string& v) { return one_of(v, {"mma_k8u4", "mma_k4u8", "simt", "legacy", "0", "1", "2", "3"}); },
     "kernels/gemm_skinny.cu"},
    {"TRIFORCE_TP_COMM", "nccl or host", [](const std::string& v) { return one_of(v, {"nccl", "host"}); },
     "parallel/gpu_comm.cpp"},
    {"TRIFORCE_TP_LM_HEAD", "replicated or vocab-parallel",
     [](const std::string& v) { return one_of(v, {"replicated", "vocab-parallel"}); }, "parallel/tensor_parallel.cpp"},
    {"TRIFORCE_PERSISTENT_BARRIER", "counter or generation",
     [](const std::string& v) { return one_of(v, {"counter", "generation"}); }, "kernels/persistent_step.cu"},
    {"TRIFORCE_PERSISTENT_BLOCKS_PER_SM", "1 to 8", [](const std::string& v) { return int_in(v, 1, 8); },
     "kernels/persistent_step.cu"},
    {"TRIFORCE_PREFETCH_MIB", "all, auto or an integer from 0 to 1048576",
     [](const std::string& v) { return v == "all" || v == "auto" || int_in(v, 0, 1048576); }, "kernels/pdl.cu"},
    {"TRIFORCE_DEFAULT_DRAFT", "a draft folder or none", any, "speculative/default_draft.cpp"},
    {"TRIFORCE_CACHE", "a folder", any, "cli/options.cpp, sweep/prompts.cpp"},
    {"TRIFORCE_GIT_SHA", "a commit", any, "sweep/provenance.cpp"},
    {"TRIFORCE_GIT_DIRTY", "an integer (0 clean, 1 dirty)", [](const std::string& v) { return int_in(v, -1, 1 << 30); },
     "sweep/provenance.cpp"},
    // Read by the tests, benchmarks and scripts around the binary, which may
    // export them into its environment (slurm/common.sh passes the first three).
    {"TRIFORCE_BIN", "the triforce binary", any, "slurm/, experiments/"},
    {"TRIFORCE_MPI", "an MPI launcher setting", any, "slurm/"},
    {"TRIFORCE_SRUN_ARGS", "srun arguments", any, "slurm/"},
    {"TRIFORCE_SANITIZER_SHAPES", "0 or 1", switch01, "tests/gpu/sanitizer_shapes.h"},
    {"TRIFORCE_BENCH_STEPS", "a positive integer", [](const std::string& v) { return int_in(v, 1, 1 << 30); },
     "tests/bench/bench_model_gpu.cpp"},
    {"TRIFORCE_BENCH_LOGITS", "a folder", any, "tests/bench/bench_sampling_host.cpp"},
    {"TRIFORCE_KERNEL_TRACE", "a folder", any, "tests/bench/kernel_trace.cpp"},
    {"TRIFORCE_CUDA_LINEINFO", "0 or 1", switch01, "experiments/h200/build.sh"},
    {"TRIFORCE_PEER_PYTHON", "a python interpreter", any, "experiments/peers/"},
    {"TRIFORCE_TORCH_PYTHON", "a python interpreter", any, "experiments/"},
};

// CMake options, which the environment does not set.
const char* const kCmakeOptions[] = {"TRIFORCE_CUDA", "TRIFORCE_TESTS", "TRIFORCE_BENCH", "TRIFORCE_FUZZ",
                                     "TRIFORCE_CUDNN", "TRIFORCE_CUDNN_FRONTEND_DIR"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<EnvKnob>& env_knobs() { return kKnobs; }

void check_environment(char** env) {
  if (!env) env = environ;
  for (char** e = env; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || std::strncmp(*e, "TRIFORCE_", 9) != 0) continue;
    const std::string name(*e, size_t(eq - *e)), value(eq + 1);
    const auto knob = std::find_if(kKnobs.begin(), kKnobs.end(), [&](const EnvKnob& k) { return name == k.name; });
    if (knob == kKnobs.end()) {
      for (const char* c : kCmakeOptions)
        TF_CHECK(name != c, name << " is a CMake option (cmake -D" << name << "=...), not read from the environment; "
                                 << "unset it");
      const EnvKnob* best = &kKnobs.front();
      for (const EnvKnob& k : kKnobs)
        if (edit_distance(name, k.name) < edit_distance(name, best->name)) best = &k;
      TF_FAIL(name << " is not a triforce environment variable (did you mean " << best->name
                   << "? docs/RELIABILITY.md lists them); unset it");
    }
    TF_CHECK(value.empty() || knob->accepts(value), name << "=" << value << ": expected " << knob->expected);
  }
}

}  // namespace tf
