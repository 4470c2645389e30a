#include "io/safetensors.h"


#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/half.h"
#include "io/json_strict.h"

namespace tf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Bytes per element of each safetensors dtype; 0 for unknown.
size_t st_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// The reference library's bound on the header (safetensors MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One header entry: dtype, shape and data_offsets of the right types, and a
// byte span equal to dtype size x elements (overflow-checked).
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& v, uint64_t data_size) {
  TF_CHECK(v.is_object(), path << ": tensor " << name << ": header entry is not an object");
  SafetensorsEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  TF_CHECK(dt != v.end() && dt->is_string(), path << ": tensor " << name << ": missing dtype");
  e.dtype = dt->get<std::string>();
  const size_t es = st_dtype_size(e.dtype);
  TF_CHECK(es > 0, path << ": tensor " << name << ": unsupported dtype " << e.dtype);
  auto sh = v.find("shape");
  TF_CHECK(sh != v.end() && sh->is_array(), path << ": tensor " << name << ": missing shape");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    TF_CHECK(d.is_number_integer() && (d.is_number_unsigned() || d.get<int64_t>() >= 0),
             path << ": tensor " << name << ": bad shape " << one_line(sh->dump()) << " (dimensions must be integers >= 0)");
    const uint64_t dv = d.get<uint64_t>();
    TF_CHECK(dv <= uint64_t(INT64_MAX), path << ": tensor " << name << ": bad shape " << one_line(sh->dump()));
    if (dv != 0 && numel > UINT64_MAX / dv) overflow = true;
    numel *= dv;
    e.shape.push_back(int64_t(dv));
  }
  for (int64_t d : e.shape) if (d == 0) overflow = false;  // a zero dimension makes the product 0
  TF_CHECK(!overflow && numel <= UINT64_MAX / es,
           path << ": tensor " << name << ": shape " << shape_str(e.shape) << " x " << e.dtype << " overflows 64 bits");
  auto off = v.find("data_offsets");
  TF_CHECK(off != v.end() && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
               (*off)[1].is_number_unsigned(),
           path << ": tensor " << name << ": bad data_offsets (need [begin, end], two integers >= 0)");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  TF_CHECK(e.begin <= e.end && e.end <= data_size,
           path << ": tensor " << name << ": data_offsets " << e.begin << ".." << e.end
                << " out of range (data section has " << data_size << " bytes)");
  TF_CHECK(e.end - e.begin == numel * es, path << ": tensor " << name << ": shape " << shape_str(e.shape) << " x "
                                               << e.dtype << " is " << numel * es << " bytes but data_offsets span "
                                               << e.end - e.begin);
  return e;
}

// The reference library's layout rule: sorted by offset, the tensors tile the
// data section exactly, [0, data size), with no overlap and no gap. An overlap
// would make two tensors share bytes; a gap or tail means the header and the
// data disagree about what the file holds.
void check_layout(const std::string& path, const std::vector<SafetensorsEntry>& entries, uint64_t data_size) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    TF_CHECK(e->begin >= covered, path << ": tensor " << e->name << ": data_offsets " << e->begin << ".." << e->end
                                       << " overlap tensor " << prev->name << " (" << prev->begin << ".." << prev->end
                                       << ")");
    TF_CHECK(e->begin == covered, path << ": tensor " << e->name << ": data_offsets " << e->begin << ".." << e->end
                                       << " leave bytes " << covered << ".." << e->begin
                                       << " of the data section unused (tensors must be contiguous)");
    covered = e->end;
    prev = e;
  }
  TF_CHECK(covered == data_size, path << ": the tensors cover " << covered << " bytes but the data section has "
                                      << data_size << " (bytes " << covered << ".." << data_size
                                      << " belong to no tensor)");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), file_(path) {
  map_ = file_.data();
  map_size_ = file_.size();
  TF_CHECK(map_size_ >= 8, path << ": truncated: " << map_size_ << " bytes, not even a header length");
  try {
    uint64_t hlen;
    std::memcpy(&hlen, map_, 8);
    TF_CHECK(hlen <= kMaxHeaderBytes, path << ": header length " << hlen << " is over the " << kMaxHeaderBytes
                                           << "-byte limit (a corrupt length, or not a safetensors file)");
    TF_CHECK(hlen <= map_size_ - 8, path << ": truncated: header length " << hlen << " goes beyond the end of the file ("
                                         << map_size_ << " bytes)");
    TF_CHECK(hlen >= 2 && map_[8] == '{', path << ": bad header: it must be a JSON object starting with '{'");
    data_start_ = 8 + hlen;
    const uint64_t data_size = map_size_ - data_start_;
    const json h = parse_json_strict(reinterpret_cast<const char*>(map_ + 8),
                                     reinterpret_cast<const char*>(map_ + 8 + hlen), path, "the header");
    TF_CHECK(h.is_object(), path << ": bad header: not a JSON object");
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        TF_CHECK(v.is_object(), path << ": __metadata__ is not an object (safetensors metadata maps strings to strings)");
        for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
          TF_CHECK(m2.value().is_string(), path << ": __metadata__ key " << m2.key() << " holds "
                                                << one_line(m2.value().dump()).substr(0, 60)
                                                << ", not a string (safetensors metadata maps strings to strings)");
          metadata_[m2.key()] = m2.value().get<std::string>();
        }
        continue;
      }
      entries_.push_back(parse_entry(path, name, v, data_size));
      index_[name] = entries_.size() - 1;
    }
    check_layout(path, entries_, data_size);
  } catch (...) {
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

namespace {

class SafetensorsWeights : public WeightSource {
 public:
  void add_file(const std::string& path) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile* f = files_.back().get();
    for (const auto& e : f->entries()) {
      auto prev = where_.find(e.name);
      TF_CHECK(prev == where_.end(), path << ": tensor " << e.name << " is also in " << prev->second.first->path());
      where_[e.name] = {f, &e};
      order_.push_back(e.name);
    }
  }
  // For a sharded index: every name the weight_map lists must be in the shard it names.
  void check_index(const std::map<std::string, std::string>& weight_map, const std::string& index_path) {
    for (const auto& [name, file] : weight_map) {
      auto it = where_.find(name);
      TF_CHECK(it != where_.end(), index_path << ": tensor " << name << " is listed in " << file << " but not found there");
      TF_CHECK(fs::path(it->second.first->path()).filename() == fs::path(file).filename(),
               index_path << ": tensor " << name << " is listed in " << file << " but found in "
                          << it->second.first->path());
    }
    // A shard tensor the index does not list: the index and the shards disagree
    // about the checkpoint, so neither can be trusted.
    for (const auto& [name, loc] : where_)
      TF_CHECK(weight_map.count(name), index_path << ": tensor " << name << " is in shard "
                                                  << fs::path(loc.first->path()).filename().string()
                                                  << " but not in the weight_map");
  }

  bool has(const std::string& name) const override { return where_.count(name) > 0; }

  TensorInfo info(const std::string& name) const override {
    const auto& [f, e] = lookup(name);
    TensorInfo i;
    i.name = name;
    i.file = f->path();
    i.stored_type = e->dtype;
    i.shape = e->shape;
    return i;
  }

  std::vector<std::string> names() const override { return order_; }

  void read_rows_f32(const std::string& name, int64_t row_begin, int64_t row_end, float* dst) const override {
    const auto& [f, e] = lookup(name);
    const int64_t outer = e->shape.empty() ? 1 : e->shape[0];
    int64_t row_len = 1;
    for (size_t d = 1; d < e->shape.size(); ++d) row_len *= e->shape[d];
    TF_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= outer,
             f->path() << ": tensor " << name << ": rows " << row_begin << ".." << row_end << " out of range [0, "
                       << outer << ")");
    const int64_t n = (row_end - row_begin) * row_len;
    const int64_t first = row_begin * row_len;
    const uint8_t* p = f->data(*e);
    if (e->dtype == "F32") {
      std::memcpy(dst, p + first * 4, size_t(n) * 4);
    } else if (e->dtype == "F16" || e->dtype == "BF16") {
      const bool bf = e->dtype == "BF16";
      const uint8_t* q = p + first * 2;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, q + i * 2, 2);
        dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
      }
    } else {
      TF_FAIL(f->path() << ": tensor " << name << ": dtype " << e->dtype << " unsupported (need F32, F16 or BF16)");
    }
  }

  std::vector<int64_t> read_ints(const std::string& name) const override {
    const auto& [f, e] = lookup(name);
    TF_CHECK(e->dtype == "I32" || e->dtype == "I64",
             f->path() << ": tensor " << name << ": dtype " << e->dtype << ", expected integer ids (I32 or I64)");
    int64_t n = 1;
    for (int64_t d : e->shape) n *= d;
    const uint8_t* p = f->data(*e);
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (e->dtype == "I32") {
        int32_t v;
        std::memcpy(&v, p + i * 4, 4);
        out[size_t(i)] = v;
      } else {
        std::memcpy(&out[size_t(i)], p + i * 8, 8);
      }
    }
    return out;
  }

 private:
  using Loc = std::pair<const SafetensorsFile*, const SafetensorsEntry*>;
  const Loc& lookup(const std::string& name) const {
    auto it = where_.find(name);
    TF_CHECK(it != where_.end(), (files_.empty() ? std::string("safetensors") : files_.front()->path())
                                     << ": no tensor " << name);
    return it->second;
  }
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Loc> where_;
  std::vector<std::string> order_;
};

std::unique_ptr<WeightSource> open_index(const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  TF_CHECK(in, index_path << ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  const json j = parse_json_strict(ss.str(), index_path, "the index");
  TF_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
           index_path << ": no weight_map object");
  std::map<std::string, std::string> wm;
  std::vector<std::string> shard_order;
  const json& weight_map = j.at("weight_map");
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    TF_CHECK(it.value().is_string(), index_path << ": weight_map entry " << it.key() << " is not a file name");
    const std::string file = it.value().get<std::string>();
    TF_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(),
             index_path << ": weight_map entry " << it.key() << " names a file outside the folder: " << file);
    wm[it.key()] = file;
    if (std::find(shard_order.begin(), shard_order.end(), file) == shard_order.end()) shard_order.push_back(file);
  }
  TF_CHECK(!wm.empty(), index_path << ": empty weight_map");
  std::sort(shard_order.begin(), shard_order.end());
  const fs::path dir = fs::path(index_path).parent_path();
  auto w = std::make_unique<SafetensorsWeights>();
  for (const auto& file : shard_order) {
    const fs::path p = dir / file;
    TF_CHECK(fs::exists(p), index_path << ": shard " << file << " is missing");
    w->add_file(p.string());
  }
  w->check_index(wm, index_path);
  return w;
}

}  // namespace

std::unique_ptr<WeightSource> open_safetensors(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json")) return open_index((dir / "model.safetensors.index.json").string());
    if (fs::exists(dir / "model.safetensors")) {
      auto w = std::make_unique<SafetensorsWeights>();
      w->add_file((dir / "model.safetensors").string());
      return w;
    }
    std::vector<std::string> files;
    for (const auto& de : fs::directory_iterator(dir, ec))
      if (de.is_regular_file() && de.path().extension() == ".safetensors") files.push_back(de.path().string());
    TF_CHECK(!files.empty(), path << ": no model.safetensors, model.safetensors.index.json or *.safetensors file");
    std::sort(files.begin(), files.end());
    auto w = std::make_unique<SafetensorsWeights>();
    for (const auto& f : files) w->add_file(f);
    return w;
  }
  if (path.size() >= 5 && path.substr(path.size() - 5) == ".json") return open_index(path);
  auto w = std::make_unique<SafetensorsWeights>();
  w->add_file(path);
  return w;
}

}  // namespace tf
