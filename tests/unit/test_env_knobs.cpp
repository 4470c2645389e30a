// The environment check (core/env_knobs.h): unknown TRIFORCE_* names and bad
// values are refused with one line naming the variable; every knob that the
// sources read is in the table, so a new knob cannot be forgotten there.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cudnn_config_tag.h"
#include "core/env_knobs.h"

using namespace tf;
namespace fs = std::filesystem;

namespace {

// check_environment over these "NAME=value" entries; "" when accepted, else the error.
std::string check(std::vector<std::string> entries) {
  std::vector<char*> env;
  for (auto& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  try {
    check_environment(env.data());
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST(EnvKnobs, AcceptsKnownValuesAndOtherVariables) {
  EXPECT_EQ(check({"PATH=/usr/bin", "HOME=/root", "TRIFORCE_PDL=1", "TRIFORCE_FUSED_NORM_GEMM=0",
                   "TRIFORCE_ATTN_SPLIT_SLOTS=auto", "TRIFORCE_ATTN_SPLIT_SLOTS=128", "TRIFORCE_ATTN_SPLIT_WARPS=8", "TRIFORCE_GEMM_ALGO=tuned",
                   "TRIFORCE_SKINNY_VARIANT=2", "TRIFORCE_PERSISTENT_BLOCKS_PER_SM=8", "TRIFORCE_CACHE=/tmp/x",
                   "TRIFORCE_PREFETCH_MIB=all", "TRIFORCE_PREFETCH_MIB=auto", "TRIFORCE_PREFETCH_MIB=12",
                   "TRIFORCE_DEFAULT_DRAFT=none", "TRIFORCE_TP_LM_HEAD=replicated", "TRIFORCE_GIT_DIRTY=0",
                   "TRIFORCE_BIN=/opt/triforce", "TRIFORCE_SANITIZER_SHAPES=1",
                   "TRIFORCE_CUDNN_ATTN_CONFIG=heuristic", "TRIFORCE_CUDNN_ATTN_CONFIG=eng8_k2=7_k3=-1_k24=0"}),
            "");
  // An empty value is unset, as every reader takes it.
  EXPECT_EQ(check({"TRIFORCE_PDL=", "TRIFORCE_GEMM_ALGO="}), "");
  // Not "TRIFORCE_" exactly: not ours.
  EXPECT_EQ(check({"TRIFORCEX=1", "MY_TRIFORCE_PDL=7"}), "");
}

TEST(EnvKnobs, RefusesBadValuesNamingTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"TRIFORCE_PDL=yes", "TRIFORCE_PDL=yes: expected 0 or 1"},
      {"TRIFORCE_DEVICE_ARGMAX=off", "TRIFORCE_DEVICE_ARGMAX=off: expected 0 or 1"},
      {"TRIFORCE_ATTN_SPLIT_SLOTS=100", "TRIFORCE_ATTN_SPLIT_SLOTS=100: expected auto or a multiple of 64"},
      {"TRIFORCE_ATTN_SPLIT_SLOTS=0", "expected auto or a multiple of 64"},
      {"TRIFORCE_ATTN_SPLIT_SLOTS=64x", "expected auto or a multiple of 64"},
      {"TRIFORCE_ATTN_SPLIT_WARPS=16", "TRIFORCE_ATTN_SPLIT_WARPS=16: expected auto, 4 or 8"},
      {"TRIFORCE_GEMM_ALGO=fast", "TRIFORCE_GEMM_ALGO=fast: expected cublas, lt, tuned or auto"},
      {"TRIFORCE_PERSISTENT_BLOCKS_PER_SM=9", "expected 1 to 8"},
      {"TRIFORCE_PREFETCH_MIB=half", "expected all, auto or an integer from 0 to 1048576"},
      {"TRIFORCE_PREFETCH_MIB=-1", "expected all, auto or an integer from 0 to 1048576"},
      {"TRIFORCE_TP_COMM=mpi", "expected nccl or host"},
      {"TRIFORCE_TP_LM_HEAD=sliced", "expected replicated or vocab-parallel"},
      {"TRIFORCE_CUDNN_ATTN_CONFIG=fastest", "TRIFORCE_CUDNN_ATTN_CONFIG=fastest: expected heuristic or a cuDNN"},
      {"TRIFORCE_CUDNN_ATTN_CONFIG=eng8_k2", "expected heuristic or a cuDNN engine-config tag"},
      {"TRIFORCE_CUDNN_ATTN_CONFIG=eng_k2=1", "expected heuristic or a cuDNN engine-config tag"},
      {"TRIFORCE_CUDNN_ATTN_CONFIG=eng8_k2=7_", "expected heuristic or a cuDNN engine-config tag"},
      {"TRIFORCE_CUDNN_ATTN_CONFIG=eng8_k2=1234567890123456789", "expected heuristic or a cuDNN engine-config tag"},
  };
  for (const auto& [entry, want] : bad) EXPECT_NE(check({"PATH=/bin", entry}).find(want), std::string::npos) << entry;
}

TEST(EnvKnobs, RefusesUnknownNamesWithTheClosest) {
  const std::string e = check({"TRIFORCE_FUSED_NORMGEMM=1"});
  EXPECT_NE(e.find("TRIFORCE_FUSED_NORMGEMM is not a triforce environment variable"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean TRIFORCE_FUSED_NORM_GEMM?"), std::string::npos) << e;
  EXPECT_NE(check({"TRIFORCE_WARM_STEP_GRAPH=1"}).find("did you mean TRIFORCE_WARM_STEP_GRAPHS?"), std::string::npos);
  const std::string c = check({"TRIFORCE_CUDA=OFF"});
  EXPECT_NE(c.find("TRIFORCE_CUDA is a CMake option"), std::string::npos) << c;
}

// cuDNN's engine-config tags parse into the engine and the (type, choice) pairs and print back the same.
TEST(EnvKnobs, CudnnConfigTagsRoundTrip) {
  CudnnConfigTag t;
  ASSERT_TRUE(parse_cudnn_config_tag("eng8_k2=7_k3=-1_k24=0", &t));
  EXPECT_EQ(t.engine, 8);
  ASSERT_EQ(t.knobs.size(), 3u);
  EXPECT_EQ(t.knobs[1], (std::pair<int64_t, int64_t>{3, -1}));
  EXPECT_EQ(cudnn_config_tag_string(t), "eng8_k2=7_k3=-1_k24=0");
  ASSERT_TRUE(parse_cudnn_config_tag("eng0", &t));
  EXPECT_TRUE(t.knobs.empty());
  for (const char* bad : {"", "eng", "eng-1", "eng8_", "eng8_k=1", "eng8_k2=", "eng8_k2=-", "eng8_k2=1x", "Eng8", "eng8 "})
    EXPECT_FALSE(parse_cudnn_config_tag(bad)) << bad;
}

// Every TRIFORCE_* name the sources read from the environment is in the table
// (getenv("TRIFORCE_..."), switch_from_env("TRIFORCE_...", ...), and the
// shell scripts' ${TRIFORCE_...} reads are listed by hand in the table).
TEST(EnvKnobs, EveryKnobTheSourcesReadIsListed) {
  const fs::path root = fs::path(TF_FIXTURES).parent_path().parent_path();
  ASSERT_TRUE(fs::exists(root / "src" / "core" / "env_knobs.cpp")) << root;
  std::set<std::string> listed;
  for (const EnvKnob& k : env_knobs()) EXPECT_TRUE(listed.insert(k.name).second) << k.name << " listed twice";
  const std::regex read(R"((getenv|switch_from_env|env_or)\(\s*"(TRIFORCE_[A-Z0-9_]+)\")");
  std::set<std::string> found;
  for (const char* dir : {"src", "kernels", "tests"})
    for (const auto& f : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = f.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(f.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it) found.insert((*it)[2]);
    }
  EXPECT_GE(found.size(), 20u) << "the scan found too few reads: is the pattern still right?";
  for (const std::string& n : found) EXPECT_TRUE(listed.count(n)) << n << " is read but not in core/env_knobs.cpp";
}
