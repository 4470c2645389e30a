#include "sweep/provenance.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#ifdef TRIFORCE_HAVE_CUDA
#include "device_info.cuh"
#endif

namespace tf::sweep {

namespace fs = std::filesystem;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// stdout of a shell command, trailing newlines dropped; ok = exit status 0.
std::string run(const std::string& cmd, bool& ok) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  ok = false;
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ok = ::pclose(p) == 0;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string git_root() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (p = p.parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p / ".git", ec)) return p.string();
    if (p == p.root_path()) break;
  }
  return "";
}

#ifdef TRIFORCE_HAVE_CUDA  // its one caller reads the CUDA device summary
// "CUDA runtime 12.4, driver 12.4, cuBLASLt 120403, NCCL 22005" -> the value after `label`.
std::string field(const std::string& line, const std::string& label) {
  const auto at = line.find(label);
  if (at == std::string::npos) return "unknown";
  const auto start = at + label.size();
  const auto end = line.find(',', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}
#endif

}  // namespace

Attrs provenance(const std::string& device, int world_size) {
  Attrs a;
  std::string sha = env_or("TRIFORCE_GIT_SHA", "");
  int64_t dirty = -1;
  if (const char* d = std::getenv("TRIFORCE_GIT_DIRTY")) dirty = std::atoi(d);
  if (sha.empty()) {
    const std::string root = git_root();
    bool ok = false;
    if (!root.empty()) sha = run("git -C '" + root + "' rev-parse HEAD 2>/dev/null", ok);
    if (!ok || sha.empty()) {
      sha = "unknown";
    } else if (dirty < 0) {
      const std::string st = run("git -C '" + root + "' status --porcelain --untracked-files=no 2>/dev/null", ok);
      dirty = ok ? (st.empty() ? 0 : 1) : -1;
    }
  }
  a.emplace_back("git_sha", sha);
  a.emplace_back("git_dirty", dirty);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  a.emplace_back("host", std::string(host));
  a.emplace_back("device", device);
  a.emplace_back("world_size", int64_t(world_size));
  a.emplace_back("slurm_job_id", env_or("SLURM_JOB_ID", "none"));
  a.emplace_back("slurm_array_job_id", env_or("SLURM_ARRAY_JOB_ID", "none"));
  a.emplace_back("slurm_array_task_id", env_or("SLURM_ARRAY_TASK_ID", "none"));
#ifdef TRIFORCE_HAVE_CUDA
  const std::string summary = tf::cuda::device_summary();
  std::istringstream lines(summary);
  std::string first, line, gpus;
  std::getline(lines, first);
  while (std::getline(lines, line)) gpus += (gpus.empty() ? "" : "; ") + line;
  a.emplace_back("gpu", gpus.empty() ? std::string("none") : gpus);
  a.emplace_back("cuda_runtime", field(first, "CUDA runtime "));
  a.emplace_back("cuda_driver", field(first, "driver "));
  a.emplace_back("cublas", field(first, "cuBLASLt "));
  a.emplace_back("nccl", field(first, "NCCL "));
#else
  for (const char* k : {"gpu", "cuda_runtime", "cuda_driver", "cublas", "nccl"}) a.emplace_back(k, std::string("none"));
#endif
  return a;
}

}  // namespace tf::sweep
