// The one symbol the sanitized parser library needs from the rest of the core:
// simulate.cpp's check_simulated_acceptance names the chain in its message, but
// no fuzz target reaches it (the sweep grid only parses rates). Compiling
// methods.cpp would pull in the model, the caches and MPI; a call here is a
// harness bug, so it aborts loudly.
#include <cstdio>
#include <cstdlib>

#include "speculative/methods.h"

std::string tf::speculative::ChainSpec::str() const {
  std::fprintf(stderr, "fuzz_stubs: ChainSpec::str is not part of the fuzzed parsers\n");
  std::abort();
}
