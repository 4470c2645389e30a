// JSON parsing for files we did not write (safetensors headers, shard indexes,
// config.json): nlohmann keeps one value of a repeated key without a word, so a
// header naming a tensor twice would silently lose one entry. This parser
// refuses repeated keys in any object and names the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tf {

// Parses [begin, end). Throws a one-line tf::Error "<source>: invalid JSON in
// <what>: <parser message>" for malformed JSON, and "<source>: duplicate key <path> in <what>"
// for a key repeated within one object (path like "weight_map"."x").
nlohmann::json parse_json_strict(const char* begin, const char* end, const std::string& source,
                                 const std::string& what);
inline nlohmann::json parse_json_strict(const std::string& text, const std::string& source, const std::string& what) {
  return parse_json_strict(text.data(), text.data() + text.size(), source, what);
}

}  // namespace tf
