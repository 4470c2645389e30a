// .npy (format 1.0/2.0/3.0 read, 1.0 write), little endian, C order.
// Writes are atomic: a temporary file next to the target, then rename.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tf {

// shape: 1-D or 2-D (any rank is accepted for writing); data holds prod(shape) values.
void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_npy_i32(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape);
// A CPU tensor of dtype F32 or I32.
void write_npy(const std::string& path, const Tensor& t);

struct NpyArray {
  std::string dtype;            // "f32", "i32" or "i64" (as stored)
  std::vector<int64_t> shape;   // 1-D or 2-D
  std::vector<float> f32;       // filled when dtype == "f32"
  std::vector<int64_t> ints;    // filled when dtype is i32 or i64
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// Reads int32/int64/float32 .npy (1-D or 2-D) as stored; throws tf::Error naming the file.
NpyArray read_npy_array(const std::string& path);
// As an owned CPU tensor: F32 for float files, I32 for int32/int64 files
// (int64 values must fit in int32).
Tensor read_npy(const std::string& path);

}  // namespace tf
