// A Tensor is a typed, shaped view of memory that knows its device. It may own
// its storage (through a shared_ptr) or borrow it (e.g. an mmap'd checkpoint).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"

namespace tf {

enum class DType { F32, F16, BF16, I32 };
enum class Device { CPU, CUDA };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
  }
  return "?";
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  std::vector<int64_t> shape;
  std::shared_ptr<void> owner;  // keeps storage alive; empty for borrowed views

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  template <class T> T* ptr() const { return static_cast<T*>(data); }

  // Host tensor with owned, zero-initialised storage.
  static Tensor cpu(DType dt, std::vector<int64_t> shape) {
    Tensor t;
    t.dtype = dt;
    t.shape = std::move(shape);
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[t.bytes()]());
    t.data = buf.get();
    t.owner = std::shared_ptr<void>(buf, buf.get());
    return t;
  }
};

std::string shape_str(const std::vector<int64_t>& s);

}  // namespace tf
