// A WeightSource is a checkpoint opened for reading by tensor name. Loaders
// read only the tensors (and, for tensor parallelism, only the row or column
// ranges) they need, converting to f32 on the way.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tf {

struct TensorInfo {
  std::string name;
  std::string file;            // where it lives, for error messages
  std::string stored_type;     // "F32", "F16", "BF16", "Q8_0", ...
  std::vector<int64_t> shape;  // logical shape, row-major, outermost first (HF order)
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual TensorInfo info(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Rows [row_begin, row_end) of a tensor viewed as [shape[0], prod(rest)],
  // converted to f32 into dst (size (row_end-row_begin)*row_len).
  virtual void read_rows_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                             float* dst) const = 0;
  // A whole integer tensor (I32/I64 token ids, e.g. a draft's reduced
  // vocabulary), flattened; a source without integer tensors refuses.
  virtual std::vector<int64_t> read_ints(const std::string& name) const;
  // Convenience: whole tensor as an owned f32 CPU tensor.
  Tensor read_f32(const std::string& name) const;
  // Columns [col_begin, col_end) of a 2-D tensor (for row-parallel shards).
  Tensor read_cols_f32(const std::string& name, int64_t col_begin, int64_t col_end) const;
  // Rows [row_begin, row_end) of a tensor (for column-parallel shards).
  Tensor read_rows_f32(const std::string& name, int64_t row_begin, int64_t row_end) const;
};

// Opens an HF folder (safetensors, single or sharded) or a .gguf file.
std::unique_ptr<WeightSource> open_weights(const std::string& path);

}  // namespace tf
