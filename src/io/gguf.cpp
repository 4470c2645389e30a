// GGUF reader (v2 and v3): every length, count and offset is checked against the
// file size before it is used, so a corrupt file gives a one-line tf::Error.
#include "io/gguf.h"


#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "io/gguf.h"

namespace tf {

namespace {

enum GgufType : uint32_t {
  T_U8 = 0, T_I8 = 1, T_U16 = 2, T_I16 = 3, T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7,
  T_STRING = 8, T_ARRAY = 9, T_U64 = 10, T_I64 = 11, T_F64 = 12,
};

class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* p, size_t n) : path_(path), p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  void need(size_t k, const char* what) const {
    TF_CHECK(k <= n_ - pos_, path_ << ": truncated: " << what << " at byte " << pos_ << " needs " << k
                                   << " bytes but the file has " << n_);
  }
  template <class T> T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    TF_CHECK(len <= n_ - pos_, path_ << ": corrupt: " << what << " at byte " << pos_ - 8 << " has length " << len
                                     << " beyond the end of the file (" << n_ << " bytes)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }
  void skip(uint64_t k, const char* what) {
    TF_CHECK(k <= n_ - pos_, path_ << ": truncated: " << what << " at byte " << pos_ << " needs " << k
                                   << " bytes but the file has " << n_);
    pos_ += size_t(k);
  }

 private:
  const std::string& path_;
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

int64_t read_int_scalar(Cursor& c, uint32_t t, const char* what) {
  switch (t) {
    case T_U8: return c.read<uint8_t>(what);
    case T_I8: return c.read<int8_t>(what);
    case T_U16: return c.read<uint16_t>(what);
    case T_I16: return c.read<int16_t>(what);
    case T_U32: return c.read<uint32_t>(what);
    case T_I32: return c.read<int32_t>(what);
    case T_U64: return int64_t(c.read<uint64_t>(what));
    case T_I64: return c.read<int64_t>(what);
  }
  return 0;
}

bool is_int_type(uint32_t t) {
  return t == T_U8 || t == T_I8 || t == T_U16 || t == T_I16 || t == T_U32 || t == T_I32 || t == T_U64 ||
         t == T_I64;
}

size_t scalar_size(uint32_t t) {
  switch (t) {
    case T_U8: case T_I8: case T_BOOL: return 1;
    case T_U16: case T_I16: return 2;
    case T_U32: case T_I32: case T_F32: return 4;
    case T_U64: case T_I64: case T_F64: return 8;
  }
  return 0;
}

constexpr int kMaxArrayDepth = 8;

GgufValue read_value(Cursor& c, uint32_t t, const std::string& path, const std::string& key, int depth) {
  GgufValue out;
  const char* what = "metadata value";
  if (is_int_type(t)) {
    out.v = read_int_scalar(c, t, what);
  } else if (t == T_F32) {
    out.v = double(c.read<float>(what));
  } else if (t == T_F64) {
    out.v = c.read<double>(what);
  } else if (t == T_BOOL) {
    out.v = c.read<uint8_t>(what) != 0;
  } else if (t == T_STRING) {
    out.v = c.str("metadata string");
  } else if (t == T_ARRAY) {
    // Bounded: each level costs only 12 bytes of file but a stack frame here.
    TF_CHECK(depth <= 8, path << ": corrupt: arrays nested deeper than 8 levels in metadata key " << key);
    const uint32_t et = c.read<uint32_t>("array element type");
    const uint64_t count = c.read<uint64_t>("array length");
    if (et == T_STRING) {
      // Each string needs at least its 8-byte length: bound the count by the
      // bytes left before reserving anything.
      TF_CHECK(count <= c.left() / 8, path << ": corrupt: metadata key " << key << " has array length " << count
                                           << " but only " << c.left() << " bytes follow");
      std::vector<std::string> v;
      v.reserve(size_t(count));
      for (uint64_t i = 0; i < count; ++i) v.push_back(c.str("array string"));
      out.v = std::move(v);
    } else if (et == T_ARRAY) {
      // Arrays of arrays are legal GGUF but unused by Llama models: skip them,
      // at a bounded depth (each level recurses) and count (each takes >= 12 bytes).
      TF_CHECK(depth < kMaxArrayDepth, path << ": corrupt: metadata key " << key << " nests arrays deeper than "
                                            << kMaxArrayDepth);
      TF_CHECK(count <= c.left() / 12, path << ": corrupt: metadata key " << key << " has array length " << count
                                            << " but only " << c.left() << " bytes follow");
      for (uint64_t i = 0; i < count; ++i) read_value(c, T_ARRAY, path, key, depth + 1);
      out.v = std::vector<int64_t>{};
    } else {
      const size_t es = scalar_size(et);
      TF_CHECK(es > 0, path << ": corrupt: metadata key " << key << " has unknown array element type " << et);
      TF_CHECK(count <= (uint64_t(-1) / es), path << ": corrupt: metadata key " << key << " array length " << count);
      c.need(size_t(count * es), "metadata array");
      if (is_int_type(et)) {
        std::vector<int64_t> v(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) v[i] = read_int_scalar(c, et, what);
        out.v = std::move(v);
      } else if (et == T_BOOL) {
        std::vector<bool> v(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) v[i] = c.read<uint8_t>(what) != 0;
        out.v = std::move(v);
      } else {
        std::vector<double> v(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) v[i] = et == T_F32 ? double(c.read<float>(what)) : c.read<double>(what);
        out.v = std::move(v);
      }
    }
  } else {
    TF_FAIL(path << ": corrupt: metadata key " << key << " has unknown value type " << t);
  }
  return out;
}

// Two tensors sharing bytes would each read the other's weights. (Gaps are
// legal GGUF: writers pad each tensor to the alignment.)
void check_no_overlap(const std::string& path, const std::vector<GgufTensor>& tensors) {
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  const GgufTensor* reach = nullptr;  // the tensor ending furthest so far
  for (const GgufTensor* b : by_offset) {
    if (reach)
      TF_CHECK(b->offset >= reach->offset + reach->nbytes,
               path << ": corrupt: tensor " << b->name << " (data bytes " << b->offset << ".." << b->offset + b->nbytes
                    << ") overlaps tensor " << reach->name << " (" << reach->offset << ".."
                    << reach->offset + reach->nbytes << ")");
    if (!reach || b->offset + b->nbytes > reach->offset + reach->nbytes) reach = b;
  }
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : path_(path), file_(path) {
  map_ = file_.data();
  map_size_ = file_.size();
  TF_CHECK(map_size_ >= 24, path << ": not a GGUF file: only " << map_size_ << " bytes");
  try {
    Cursor c(path_, map_, map_size_);
    const uint32_t magic = c.read<uint32_t>("magic");
    TF_CHECK(magic == 0x46554747u, path << ": not a GGUF file (bad magic)");
    const uint32_t version = c.read<uint32_t>("version");
    TF_CHECK(version != 0x02000000u && version != 0x03000000u,
             path << ": big-endian GGUF is not supported (this host reads little-endian files)");
    TF_CHECK(version == 2 || version == 3,
             path << ": unsupported GGUF version " << version << " (supported: 2, 3)");
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    // Every key/value takes at least 8+4+1 bytes, every tensor info at least
    // 8+4+8+4+8 (name length, rank, one dimension, type, offset): a count the
    // file cannot hold is refused before anything is allocated for it.
    TF_CHECK(n_kv <= map_size_ / 13, path << ": corrupt: metadata count " << n_kv << " is impossible for a "
                                          << map_size_ << "-byte file");
    TF_CHECK(n_tensors <= map_size_ / 32, path << ": corrupt: tensor count " << n_tensors
                                               << " is impossible for a " << map_size_ << "-byte file");
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.str("metadata key");
      const uint32_t t = c.read<uint32_t>("metadata type");
      GgufValue v = read_value(c, t, path_, key, 0);
      TF_CHECK(kv_.find(key) == kv_.end(), path << ": corrupt: duplicate metadata key " << key);
      kv_.emplace(std::move(key), std::move(v));
    }
    int64_t alignment = 32;
    if (const GgufValue* a = find("general.alignment")) {
      TF_CHECK(std::holds_alternative<int64_t>(a->v), path << ": corrupt: general.alignment is not an integer");
      alignment = std::get<int64_t>(a->v);
      TF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
               path << ": corrupt: general.alignment " << alignment << " is not a power of two");
    }
    tensors_.reserve(size_t(std::min<uint64_t>(n_tensors, 1u << 16)));
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      t.name = c.str("tensor name");
      const uint32_t nd = c.read<uint32_t>("tensor rank");
      TF_CHECK(nd >= 1 && nd <= 4, path << ": corrupt: tensor " << t.name << " has rank " << nd);
      uint64_t numel = 1;
      for (uint32_t d = 0; d < nd; ++d) {
        const uint64_t ne = c.read<uint64_t>("tensor dimension");
        TF_CHECK(ne > 0 && ne < (uint64_t(1) << 40), path << ": corrupt: tensor " << t.name << " dimension " << d
                                                           << " is " << ne);
        TF_CHECK(numel <= (uint64_t(1) << 50) / ne, path << ": corrupt: tensor " << t.name << " is too large");
        numel *= ne;
        t.ne.push_back(int64_t(ne));
      }
      t.ggml_type = c.read<uint32_t>("tensor type");
      t.offset = c.read<uint64_t>("tensor offset");
      const GgmlTypeInfo* ti = ggml_type_info(t.ggml_type);
      TF_CHECK(ti, path << ": unsupported ggml type " << t.ggml_type << " for tensor " << t.name);
      TF_CHECK(t.ne[0] % ti->block == 0, path << ": corrupt: tensor " << t.name << " (" << ti->name
                                              << ") has row length " << t.ne[0] << ", not a multiple of the block size "
                                              << ti->block);
      t.nbytes = numel / uint64_t(ti->block) * uint64_t(ti->bytes);
      TF_CHECK(t.offset % uint64_t(alignment) == 0, path << ": corrupt: tensor " << t.name << " offset " << t.offset
                                                         << " is not a multiple of the alignment " << alignment);
      TF_CHECK(tensor_index_.find(t.name) == tensor_index_.end(), path << ": corrupt: duplicate tensor " << t.name);
      tensor_index_[t.name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    data_offset_ = (uint64_t(c.pos()) + uint64_t(alignment) - 1) / uint64_t(alignment) * uint64_t(alignment);
    TF_CHECK(n_tensors == 0 || data_offset_ <= map_size_,
             path << ": truncated: the data section would start at byte " << data_offset_ << " but the file has "
                  << map_size_);
    for (const GgufTensor& t : tensors_) {
      const uint64_t begin = data_offset_ + t.offset;
      const uint64_t end = begin + t.nbytes;
      TF_CHECK(t.offset <= map_size_ && end >= begin && end <= map_size_,
               path << ": truncated: tensor " << t.name << " needs bytes " << begin << ".." << end
                    << " but the file has " << map_size_);
    }
    check_no_overlap(path, tensors_);
  } catch (...) {
    map_ = nullptr;
    throw;
  }
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  TF_CHECK(v, path_ << ": missing metadata key " << key);
  TF_CHECK(std::holds_alternative<std::string>(v->v), path_ << ": metadata key " << key << " is not a string");
  return std::get<std::string>(v->v);
}

std::string GgufFile::get_string(const std::string& key, const std::string& dflt) const {
  return has(key) ? get_string(key) : dflt;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  TF_CHECK(v, path_ << ": missing metadata key " << key);
  if (std::holds_alternative<bool>(v->v)) return std::get<bool>(v->v) ? 1 : 0;
  TF_CHECK(std::holds_alternative<int64_t>(v->v), path_ << ": metadata key " << key << " is not an integer");
  return std::get<int64_t>(v->v);
}

int64_t GgufFile::get_int(const std::string& key, int64_t dflt) const { return has(key) ? get_int(key) : dflt; }

double GgufFile::get_float(const std::string& key, double dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (std::holds_alternative<double>(v->v)) return std::get<double>(v->v);
  if (std::holds_alternative<int64_t>(v->v)) return double(std::get<int64_t>(v->v));
  TF_FAIL(path_ << ": metadata key " << key << " is not a number");
}

bool GgufFile::get_bool(const std::string& key, bool dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (std::holds_alternative<bool>(v->v)) return std::get<bool>(v->v);
  if (std::holds_alternative<int64_t>(v->v)) return std::get<int64_t>(v->v) != 0;
  TF_FAIL(path_ << ": metadata key " << key << " is not a boolean");
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  TF_CHECK(v, path_ << ": missing metadata key " << key);
  TF_CHECK(std::holds_alternative<std::vector<std::string>>(v->v),
           path_ << ": metadata key " << key << " is not a string array");
  return std::get<std::vector<std::string>>(v->v);
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  TF_CHECK(std::holds_alternative<std::vector<int64_t>>(v->v),
           path_ << ": metadata key " << key << " is not an integer array");
  return std::get<std::vector<int64_t>>(v->v);
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (std::holds_alternative<std::vector<int64_t>>(v->v)) {
    const auto& iv = std::get<std::vector<int64_t>>(v->v);
    return std::vector<double>(iv.begin(), iv.end());
  }
  TF_CHECK(std::holds_alternative<std::vector<double>>(v->v),
           path_ << ": metadata key " << key << " is not a float array");
  return std::get<std::vector<double>>(v->v);
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensor& t) const { return map_ + data_offset_ + t.offset; }

}  // namespace tf
