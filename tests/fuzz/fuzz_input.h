// Shared by the fuzz targets. The parsers open paths, so each input is written
// to a file first (in a private folder, removed at exit); a tf::Error is the
// expected answer to bad input, and the targets catch only that: any other
// exception, a crash or a sanitizer report is a finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/check.h"

namespace tf::fuzz {

class InputFolder {
 public:
  InputFolder() {
    const char* t = std::getenv("TMPDIR");
    dir_ = std::filesystem::path(t && *t ? t : "/tmp") / ("tf-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~InputFolder() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Writes the bytes to <folder>/<name> (replacing it) and returns the path.
  std::string write(const uint8_t* data, size_t size, const std::string& name) const {
    const std::filesystem::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    out.close();
    if (!out) std::abort();  // the harness itself failed: not a finding about the parser
    return p.string();
  }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

inline const InputFolder& input_folder() {
  static const InputFolder f;
  return f;
}

inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  return input_folder().write(data, size, name);
}

}  // namespace tf::fuzz
