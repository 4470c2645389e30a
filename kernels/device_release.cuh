// Process-lifetime device state (library handles, grow-only workspaces, staging
// buffers) is made on first use and kept until exit. Static destructors would
// free it after the CUDA runtime has torn the context down, so each owner
// registers how to free itself here, and release_device_state() runs those
// before exit (main, the GPU test environment): compute-sanitizer's leak check
// then reports only what the code really lost.
#pragma once

namespace tf::cuda {

// Called by an owner when it (re)creates its state; `release` frees everything
// it holds and resets it, so a later use makes it again and registers again.
// Releases run in reverse registration order (the last made is freed first).
void at_device_release(void (*release)());
// Waits for the device, then runs and forgets every registered release. Safe to
// call more than once and with nothing registered; never throws.
void release_device_state();

}  // namespace tf::cuda
