#include "model/prefill_options.h"

#include "core/env_knobs.h"  // switch_from_env

namespace tf {

const PrefillOptions& prefill_options_default() {
  static const PrefillOptions o = [] {
    PrefillOptions d;
    d.stacked_gemms = switch_from_env("TRIFORCE_PREFILL_STACKED", d.stacked_gemms);
    return d;
  }();
  return o;
}

}  // namespace tf
