#include "cli/token_ids.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/check.h"
#include "io/npy.h"

namespace tf::cli {

namespace {

// A token id: a decimal integer in [0, INT32_MAX] (strtol's long would wrap in an int32).
bool parse_id(const char* s, const char** end, int32_t* out) {
  char* e = nullptr;
  errno = 0;
  const long v = std::strtol(s, &e, 10);
  *end = e;
  if (e == s || errno == ERANGE || v < 0 || v > std::numeric_limits<int32_t>::max()) return false;
  *out = int32_t(v);
  return true;
}

}  // namespace

std::vector<int32_t> parse_token_list(const std::string& csv) {
  std::vector<int32_t> ids;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const char* end = nullptr;
    int32_t v = 0;
    const bool ok = parse_id(item.c_str(), &end, &v);
    TF_CHECK(ok && *end == '\0', "--tokens: '" << item << "' is not a token id");
    ids.push_back(v);
  }
  TF_CHECK(!ids.empty(), "--tokens: expected a comma-separated list of token ids");
  return ids;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") {
    Tensor t = read_npy(path);
    TF_CHECK(t.dtype == DType::I32, path << ": expected an int32 .npy array of token ids");
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  std::ifstream in(path);
  TF_CHECK(in, path << ": cannot open token file");
  std::vector<int32_t> ids;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const char* end = nullptr;
    int32_t v = 0;
    const bool ok = parse_id(line.c_str(), &end, &v);
    while (ok && (*end == ' ' || *end == '\t' || *end == '\r')) ++end;
    TF_CHECK(ok && *end == '\0', path << ":" << lineno << ": expected one token id per line (0 to 2147483647)");
    ids.push_back(v);
  }
  TF_CHECK(!ids.empty(), path << ": no token ids");
  return ids;
}

}  // namespace tf::cli
