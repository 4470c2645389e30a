#include "io/json_strict.h"

#include <set>
#include <vector>

#include "core/check.h"

namespace tf {

using json = nlohmann::json;

json parse_json_strict(const char* begin, const char* end, const std::string& source, const std::string& what) {
  // One key set per open object; `names` is the key under which each object was opened.
  std::vector<std::set<std::string>> open;
  std::vector<std::string> names;
  std::string last_key, duplicate;
  auto path_to = [&](const std::string& key) {
    std::string p;
    for (const auto& n : names)
      if (!n.empty()) p += "\"" + n + "\".";
    return p + "\"" + key + "\"";
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
        open.emplace_back();
        names.push_back(last_key);
        last_key.clear();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        if (!names.empty()) names.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!open.empty() && !open.back().insert(last_key).second && duplicate.empty()) duplicate = path_to(last_key);
        break;
      }
      case json::parse_event_t::array_start:
      case json::parse_event_t::value:
        // A value ends its key; an object inside an array has no key of its own.
        if (ev == json::parse_event_t::value) last_key.clear();
        break;
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    std::string m = e.what();
    for (auto& c : m)
      if (c == '\n' || c == '\r') c = ' ';
    TF_FAIL(source << ": invalid JSON in " << what << ": " << m);
  }
  TF_CHECK(duplicate.empty(), source << ": duplicate key " << duplicate << " in " << what
                                     << " (a repeated key would silently drop one of its values)");
  return j;
}

}  // namespace tf
