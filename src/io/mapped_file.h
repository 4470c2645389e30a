// Read-only memory mapping of a whole regular file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tf {

class MappedFile {
 public:
  MappedFile() = default;
  // Opens and maps `path` read-only; throws tf::Error naming the file when it
  // cannot be opened, is not a regular file, or cannot be mapped. An empty file
  // maps to data() == nullptr, size() == 0 (callers check their own minimum).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tf
