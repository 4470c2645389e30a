// Copies of the fixture draft (tests/fixtures/draft/gqa_f32_draft) with a
// reduced vocabulary added to its model.safetensors as the tensor
// triforce_draft_vocab, stored as `dtype` with `shape` (both bendable, so the
// loader's refusals can be provoked). The safetensors layout is written here
// directly: 8 bytes of header length, the JSON header, then the data.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf::testing {

inline std::filesystem::path draft_with_vocab(const std::filesystem::path& src_draft, const std::filesystem::path& dir,
                                              const std::vector<int32_t>& ids, const std::string& dtype = "I32",
                                              std::vector<int64_t> shape = {}) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(src_draft / "config.json", dir / "config.json");
  std::ifstream in(src_draft / "model.safetensors", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  nlohmann::json h = nlohmann::json::parse(raw.substr(8, n));
  std::string data = raw.substr(8 + n);
  std::string blob;
  if (dtype == "F32") {
    for (int32_t v : ids) {
      const float f = float(v);
      blob.append(reinterpret_cast<const char*>(&f), 4);
    }
  } else {
    blob.assign(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  }
  if (shape.empty()) shape = {int64_t(ids.size())};
  h["triforce_draft_vocab"] = {{"dtype", dtype},
                               {"shape", shape},
                               {"data_offsets", {data.size(), data.size() + blob.size()}}};
  data += blob;
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  const uint64_t hn = hs.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&hn), 8);
  out << hs << data;
  return dir;
}

// Every third id plus a few the fixture prompt's continuation is likely to use: 96 of 256.
inline std::vector<int32_t> some_draft_ids() {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 256; ++i)
    if (i % 3 == 0 || i % 7 == 1) ids.push_back(i);
  return ids;
}

}  // namespace tf::testing
