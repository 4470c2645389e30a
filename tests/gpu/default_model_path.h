#pragma once
// Where scripts/fetch_default_model.sh caches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF):
// $TRIFORCE_CACHE, else $XDG_CACHE_HOME/triforce, else ~/.cache/triforce. The GPU tests that need the real
// weights skip when the file is absent (the GPU machine has no network; the model is carried there).
#include <cstdlib>
#include <string>

inline std::string default_model_gguf() {
  const char* cache = std::getenv("TRIFORCE_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = cache && *cache ? std::string(cache)
                          : xdg && *xdg   ? std::string(xdg) + "/triforce"
                                          : std::string(home ? home : "") + "/.cache/triforce";
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}
