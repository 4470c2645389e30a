#include "io/weight_source.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace tf {

Tensor WeightSource::read_f32(const std::string& name) const {
  const TensorInfo i = info(name);
  Tensor t = Tensor::cpu(DType::F32, i.shape);
  const int64_t rows = i.shape.empty() ? 1 : i.shape[0];
  if (t.numel() > 0) read_rows_f32(name, 0, rows, t.ptr<float>());
  return t;
}

Tensor WeightSource::read_rows_f32(const std::string& name, int64_t row_begin, int64_t row_end) const {
  const TensorInfo i = info(name);
  TF_CHECK(!i.shape.empty(), i.file << ": tensor " << name << " is a scalar; cannot read rows");
  TF_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= i.shape[0],
           i.file << ": tensor " << name << " " << shape_str(i.shape) << ": rows " << row_begin << ".." << row_end
                  << " out of range");
  std::vector<int64_t> shape = i.shape;
  shape[0] = row_end - row_begin;
  Tensor t = Tensor::cpu(DType::F32, shape);
  if (t.numel() > 0) read_rows_f32(name, row_begin, row_end, t.ptr<float>());
  return t;
}

Tensor WeightSource::read_cols_f32(const std::string& name, int64_t col_begin, int64_t col_end) const {
  const TensorInfo i = info(name);
  TF_CHECK(i.shape.size() == 2, i.file << ": tensor " << name << " " << shape_str(i.shape)
                                       << ": column reads need a 2-D tensor");
  const int64_t rows = i.shape[0], cols = i.shape[1];
  TF_CHECK(col_begin >= 0 && col_begin <= col_end && col_end <= cols,
           i.file << ": tensor " << name << " " << shape_str(i.shape) << ": columns " << col_begin << ".." << col_end
                  << " out of range");
  const int64_t w = col_end - col_begin;
  Tensor t = Tensor::cpu(DType::F32, {rows, w});
  if (rows == 0 || w == 0) return t;
  // Read a bounded chunk of full rows at a time and keep the wanted columns.
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, cols));
  std::vector<float> buf(size_t(std::min(chunk, rows) * cols));
  float* out = t.ptr<float>();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    read_rows_f32(name, r0, r1, buf.data());
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(out + r * w, buf.data() + (r - r0) * cols + col_begin, size_t(w) * 4);
  }
  return t;
}

std::unique_ptr<WeightSource> open_weights(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return open_safetensors(path);
  TF_CHECK(fs::exists(path, ec), path << ": no such file or folder");
  const auto ext = fs::path(path).extension().string();
  if (ext == ".gguf") return open_gguf_weights(path);
  if (ext == ".safetensors" || ext == ".json") return open_safetensors(path);
  TF_FAIL(path << ": not a checkpoint (expected an HF folder, a .safetensors file or a .gguf file)");
}

std::vector<int64_t> WeightSource::read_ints(const std::string& name) const {
  const TensorInfo i = info(name);
  TF_FAIL(i.file << ": tensor " << name << ": integer tensors are read from safetensors only (stored as "
                 << i.stored_type << ")");
}

}  // namespace tf
