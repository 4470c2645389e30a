// safetensors reader: one mmap'd file, or a sharded checkpoint through
// model.safetensors.index.json. F32/F16/BF16 tensors are converted to f32 on read.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"

#include "io/weight_source.h"

namespace tf {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as stored: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets from the start of the data section
};

// One .safetensors file, memory-mapped and fully validated on open.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws tf::Error naming the file
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const uint8_t* data(const SafetensorsEntry& e) const { return map_ + data_start_ + e.begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  MappedFile file_;  // owns the mapping; map_/map_size_ alias it
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  uint64_t data_start_ = 0;
};

// path: a .safetensors file, a folder holding model.safetensors.index.json
// (sharded), model.safetensors, or other *.safetensors files (merged; a name in
// two files is an error), or an index .json file itself.
std::unique_ptr<WeightSource> open_safetensors(const std::string& path);

}  // namespace tf
