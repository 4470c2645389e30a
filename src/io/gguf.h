// GGUF v3 reader: metadata key/values and tensor directory, memory-mapped.
// Tensors are exposed through WeightSource under their HF names (see
// gguf_weights.cpp), dequantized to f32 on read.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "io/mapped_file.h"

namespace tf {

struct GgufValue {
  // Scalars are widened: all integer types -> int64_t, f32/f64 -> double.
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
               std::vector<std::string>, std::vector<bool>>
      v;
};

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;      // ggml type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16)
  std::vector<int64_t> ne;     // ggml order: ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;         // from the start of the data section
  uint64_t nbytes = 0;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // throws tf::Error naming the file on any defect
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  std::string get_string(const std::string& key) const;                 // throws if missing
  std::string get_string(const std::string& key, const std::string& dflt) const;
  int64_t get_int(const std::string& key) const;                         // throws if missing
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key, double dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::vector<std::string> get_string_array(const std::string& key) const;  // throws if missing
  std::vector<int64_t> get_int_array(const std::string& key) const;        // empty if missing
  std::vector<double> get_float_array(const std::string& key) const;       // empty if missing

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(const std::string& name) const;
  const uint8_t* tensor_data(const GgufTensor& t) const;  // pointer into the mapping

 private:
  std::string path_;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
  MappedFile file_;  // owns the mapping; map_/map_size_ alias it
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  uint64_t data_offset_ = 0;
};

// ---- additions (io/gguf.cpp, io/gguf_weights.cpp) ----
struct ModelConfig;
class WeightSource;

// Block geometry of a ggml type: `block` elements take `bytes` bytes.
struct GgmlTypeInfo {
  const char* name;  // "F32", "Q4_1", ...
  int block;
  int bytes;
};
// nullptr for type ids this reader does not know.
const GgmlTypeInfo* ggml_type_info(uint32_t ggml_type);
// Whether ggml_dequantize handles the type (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool ggml_can_dequantize(uint32_t ggml_type);
// Dequantizes elements [elem_begin, elem_begin + n) of a tensor whose data
// starts at `data` (any alignment; partial blocks are handled). Throws for
// types ggml_can_dequantize rejects.
void ggml_dequantize(uint32_t ggml_type, const uint8_t* data, int64_t elem_begin, int64_t n, float* dst);

// llama.* metadata -> ModelConfig (validated; throws naming the file).
ModelConfig config_from_gguf(const GgufFile& f);
// Tensors under HF Llama names in HF [out, in] order, q/k un-permuted,
// dequantized to f32 on read. lm_head.weight is absent when tied.
std::unique_ptr<WeightSource> make_gguf_weights(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg);
// Opens the file and builds its config and weights in one go.
std::unique_ptr<WeightSource> open_gguf_weights(const std::string& path);

}  // namespace tf
