// Every TRIFORCE_* environment variable, and the values it takes. Each knob is
// read where it acts (often only on CUDA, or only once a model of some size
// exists), so a misspelt name (TRIFORCE_FUSED_NORMGEMM=1) or a value the
// reader would take as its default changed nothing without a word, and an A/B
// run compared a configuration with itself. The CLI checks the environment
// against this table before any command runs.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "core/check.h"

namespace tf {

struct EnvKnob {
  const char* name;
  const char* expected;  // what the refusal says the value must be
  bool (*accepts)(const std::string& value);
  const char* reader;    // where it is read (docs/RELIABILITY.md's table)
};

const std::vector<EnvKnob>& env_knobs();

// Throws tf::Error for the first TRIFORCE_* variable of env (a null-terminated
// "NAME=value" array; environ when null) that is not in env_knobs(), naming
// the closest known name, or whose value its knob does not take. An empty
// value is taken as unset, as every reader does.
void check_environment(char** env = nullptr);

// An on/off knob, read now: unset or empty gives fallback; anything but 0/1
// fails naming the variable. Inline: the CUDA kernels' library reads knobs too.
inline bool switch_from_env(const char* name, bool fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  const std::string v(s);
  if (v == "1") return true;
  if (v == "0") return false;
  TF_FAIL(name << "=" << v << ": expected 0 or 1");
}

}  // namespace tf
