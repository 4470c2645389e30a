// A decode step's host-made inputs (token ids, positions, cache slots, the
// RoPE cos/sin rows) moved from the pinned staging into the step's device
// buffers by one kernel, instead of two or three copies. Inside a step graph
// a copy is a copy-engine node: the kernel after it cannot launch early (PDL
// does not cross it) and each costs about 2 us of busy time plus its
// dependency edges (results/h100/session-2026-12-07c: 3 of a 68M draft step's
// 22 nodes). The kernel reads the staging through its mapped address
// (cudaMallocHost memory is mapped on a UVA system) at launch or replay, like
// the copy nodes did, and opens the step's PDL chain. For steps of at most 32
// tokens (a few thousand elements, one bus round trip a block); a prefill
// chunk's megabytes of rows go by the copy engine.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct StepInputsParams {
  const int32_t* ints_host = nullptr;  // pinned [n_ints]
  int32_t* ints = nullptr;             // device [n_ints]
  int64_t n_ints = 0;
  const float* rows_host = nullptr;  // pinned [n_rows]
  float* rows = nullptr;             // device [n_rows]
  int64_t n_rows = 0;
  // Device; when set, ints[0] is *token instead of ints_host[0] (a chained
  // step's token: the previous step's argmax, over the staged placeholder).
  const int32_t* token = nullptr;
};

// Refuses host pointers the device cannot address (not pinned, or no UVA).
void step_inputs(const StepInputsParams& p, cudaStream_t stream);
// Launches since the process started (the tests check that the switch reached the kernel).
int64_t step_inputs_launches();

}  // namespace tf::cuda
