#include "model/prefill_options.h"

#include <cstdlib>
#include <string>

#include "core/check.h"

namespace tf {

namespace {
bool switch_from_env(const char* name, bool fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  const std::string v(s);
  if (v == "1") return true;
  if (v == "0") return false;
  TF_FAIL(name << "=" << v << ": expected 0 or 1");
}
}  // namespace

const PrefillOptions& prefill_options_default() {
  static const PrefillOptions o = [] {
    PrefillOptions d;
    d.stacked_gemms = switch_from_env("TRIFORCE_PREFILL_STACKED", d.stacked_gemms);
    return d;
  }();
  return o;
}

}  // namespace tf
