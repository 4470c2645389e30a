// Shared helpers for the unit tests: a per-process scratch directory removed
// at exit, a file writer, and an error-message check.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/check.h"

namespace tf::testing {

// <temp>/<prefix>_<pid>, created on first use and removed (recursively) when
// the test program exits.
inline std::filesystem::path tmp_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  static struct Dirs {
    std::map<std::string, fs::path> by_prefix;
    ~Dirs() {
      for (auto& [k, p] : by_prefix) {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    }
  } dirs;
  auto it = dirs.by_prefix.find(prefix);
  if (it == dirs.by_prefix.end()) {
    fs::path p = fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()));
    fs::create_directories(p);
    it = dirs.by_prefix.emplace(prefix, std::move(p)).first;
  }
  return it->second;
}

// Writes `n` bytes to `path` (creating its parent folders); returns the path.
inline std::string write_bytes(const std::filesystem::path& path, const void* data, size_t n) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(data), std::streamsize(n));
  return path.string();
}
inline std::string write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& b) {
  return write_bytes(path, b.data(), b.size());
}
inline std::string write_bytes(const std::filesystem::path& path, std::string_view s) {
  return write_bytes(path, s.data(), s.size());
}

// f() must throw a one-line tf::Error naming `file` (its file name) and, when
// given, containing `also`.
template <class F> void expect_throws_naming(F&& f, const std::string& file, const std::string& also = "") {
  try {
    f();
    FAIL() << "expected tf::Error";
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(std::filesystem::path(file).filename().string()), std::string::npos) << m;
    if (!also.empty()) EXPECT_NE(m.find(also), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace tf::testing
