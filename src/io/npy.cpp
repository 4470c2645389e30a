#include "io/npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/check.h"

namespace tf {

namespace {

void write_npy_raw(const std::string& path, const char* descr, const void* data, size_t elem_size,
                   const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    TF_CHECK(d >= 0, path << ": cannot write .npy with negative dimension in shape " << shape_str(shape));
    n *= d;
  }
  std::ostringstream hs;
  hs << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) hs << shape[i] << (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  hs << "), }";
  std::string header = hs.str();
  // magic(6) + version(2) + len(2) + header + padding + '\n' must be a multiple of 64.
  size_t total = 10 + header.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  header.append(pad, ' ');
  header.push_back('\n');
  TF_CHECK(header.size() <= 65535, path << ": .npy header too long");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TF_CHECK(out, tmp << ": cannot open for writing");
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    const uint16_t hl = uint16_t(header.size());
    const char hlb[2] = {char(hl & 0xff), char(hl >> 8)};
    out.write(hlb, 2);
    out.write(header.data(), std::streamsize(header.size()));
    if (n > 0) out.write(static_cast<const char*>(data), std::streamsize(size_t(n) * elem_size));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      TF_FAIL(tmp << ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    TF_FAIL(path << ": cannot rename " << tmp << " into place: " << std::strerror(err));
  }
}

// Tiny parser for the python-dict header numpy writes.
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  const std::string k = "'" + key + "'";
  size_t p = h.find(k);
  TF_CHECK(p != std::string::npos, path << ": bad .npy header: no " << k << " in " << h);
  p = h.find(':', p + k.size());
  TF_CHECK(p != std::string::npos, path << ": bad .npy header near " << k);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  TF_CHECK(p < h.size(), path << ": bad .npy header near " << k);
  size_t e;
  if (h[p] == '\'') {
    e = h.find('\'', p + 1);
    TF_CHECK(e != std::string::npos, path << ": bad .npy header near " << k);
    return h.substr(p + 1, e - p - 1);
  }
  if (h[p] == '(') {
    e = h.find(')', p);
    TF_CHECK(e != std::string::npos, path << ": bad .npy header near " << k);
    return h.substr(p, e - p + 1);
  }
  e = h.find_first_of(",}", p);
  TF_CHECK(e != std::string::npos, path << ": bad .npy header near " << k);
  std::string v = h.substr(p, e - p);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

}  // namespace

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  write_npy_raw(path, "<f4", data, 4, shape);
}

void write_npy_i32(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape) {
  write_npy_raw(path, "<i4", data, 4, shape);
}

void write_npy(const std::string& path, const Tensor& t) {
  TF_CHECK(t.device == Device::CPU, path << ": write_npy needs a CPU tensor");
  if (t.dtype == DType::F32) return write_npy_f32(path, t.ptr<float>(), t.shape);
  if (t.dtype == DType::I32) return write_npy_i32(path, t.ptr<int32_t>(), t.shape);
  TF_FAIL(path << ": write_npy supports f32 and i32 tensors, got " << dtype_name(t.dtype));
}

NpyArray read_npy_array(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TF_CHECK(in, path << ": cannot open .npy file");
  const int64_t fsize = int64_t(in.tellg());
  in.seekg(0);
  unsigned char pre[10];
  TF_CHECK(fsize >= 10 && in.read(reinterpret_cast<char*>(pre), 10),
           path << ": not a .npy file (only " << fsize << " bytes)");
  TF_CHECK(std::memcmp(pre, "\x93NUMPY", 6) == 0, path << ": not a .npy file (bad magic)");
  const int major = pre[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = size_t(pre[8]) | (size_t(pre[9]) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    unsigned char b[2];
    TF_CHECK(fsize >= 12 && in.read(reinterpret_cast<char*>(b), 2), path << ": truncated .npy header");
    hlen = size_t(pre[8]) | (size_t(pre[9]) << 8) | (size_t(b[0]) << 16) | (size_t(b[1]) << 24);
    hstart = 12;
  } else {
    TF_FAIL(path << ": unsupported .npy format version " << major << "." << int(pre[7]));
  }
  TF_CHECK(int64_t(hstart + hlen) <= fsize,
           path << ": truncated .npy header: needs " << hstart + hlen << " bytes but the file has " << fsize);
  std::string h(hlen, '\0');
  in.read(h.data(), std::streamsize(hlen));
  TF_CHECK(in, path << ": cannot read .npy header");
  const std::string descr = dict_value(h, "descr", path);
  const std::string fortran = dict_value(h, "fortran_order", path);
  const std::string shp = dict_value(h, "shape", path);
  TF_CHECK(fortran == "False", path << ": Fortran-order .npy is not supported");
  NpyArray a;
  size_t esz = 0;
  if (descr == "<f4") { a.dtype = "f32"; esz = 4; }
  else if (descr == "<i4") { a.dtype = "i32"; esz = 4; }
  else if (descr == "<i8") { a.dtype = "i64"; esz = 8; }
  else TF_FAIL(path << ": unsupported .npy dtype '" << descr << "' (need <f4, <i4 or <i8)");
  // shape "(a, b)" / "(a,)" / "()"
  TF_CHECK(shp.size() >= 2 && shp.front() == '(' && shp.back() == ')', path << ": bad .npy shape " << shp);
  {
    std::string body = shp.substr(1, shp.size() - 2);
    std::stringstream ss(body);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      size_t b = tok.find_first_not_of(' ');
      if (b == std::string::npos) continue;
      tok = tok.substr(b);
      while (!tok.empty() && (tok.back() == ' ' || tok.back() == 'L')) tok.pop_back();
      char* endp = nullptr;
      long long v = std::strtoll(tok.c_str(), &endp, 10);
      TF_CHECK(endp && *endp == '\0' && v >= 0, path << ": bad .npy shape " << shp);
      a.shape.push_back(v);
    }
  }
  TF_CHECK(a.shape.size() == 1 || a.shape.size() == 2,
           path << ": expected a 1-D or 2-D array, got shape " << shape_str(a.shape));
  for (int64_t d = 0, n = 1; d < int64_t(a.shape.size()); n *= a.shape[size_t(d)], ++d)  // numel() must not overflow
    TF_CHECK(a.shape[size_t(d)] == 0 || n <= (int64_t(1) << 50) / a.shape[size_t(d)],
             path << ": .npy shape " << shape_str(a.shape) << " is too large");
  const int64_t n = a.numel();
  const int64_t need = int64_t(hstart + hlen) + n * int64_t(esz);
  TF_CHECK(fsize >= need, path << ": truncated .npy data: shape " << shape_str(a.shape) << " needs " << need
                               << " bytes but the file has " << fsize);
  if (a.dtype == "f32") {
    a.f32.resize(size_t(n));
    in.read(reinterpret_cast<char*>(a.f32.data()), std::streamsize(n * 4));
  } else if (a.dtype == "i32") {
    std::vector<int32_t> tmp(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(tmp.data()), std::streamsize(n * 4));
    a.ints.assign(tmp.begin(), tmp.end());
  } else {
    a.ints.resize(size_t(n));
    in.read(reinterpret_cast<char*>(a.ints.data()), std::streamsize(n * 8));
  }
  TF_CHECK(in, path << ": cannot read .npy data");
  return a;
}

Tensor read_npy(const std::string& path) {
  NpyArray a = read_npy_array(path);
  if (a.dtype == "f32") {
    Tensor t = Tensor::cpu(DType::F32, a.shape);
    if (!a.f32.empty()) std::memcpy(t.data, a.f32.data(), a.f32.size() * 4);
    return t;
  }
  Tensor t = Tensor::cpu(DType::I32, a.shape);
  int32_t* p = t.ptr<int32_t>();
  for (size_t i = 0; i < a.ints.size(); ++i) {
    const int64_t v = a.ints[i];
    TF_CHECK(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
             path << ": value " << v << " at index " << i << " does not fit in int32");
    p[i] = int32_t(v);
  }
  return t;
}

}  // namespace tf
