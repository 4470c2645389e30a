// Root attributes of a results file: where and from what it was made.
//   git_sha, git_dirty   read at run time from the git tree holding the binary
//                        (TRIFORCE_GIT_SHA / TRIFORCE_GIT_DIRTY override; "unknown" / -1 if none)
//   host, device, world_size, slurm_job_id, slurm_array_job_id, slurm_array_task_id
//   gpu, cuda_runtime, cuda_driver, cublas, nccl   ("none" in a build without CUDA)
#pragma once
#include <string>

#include "sweep/results.h"

namespace tf::sweep {

Attrs provenance(const std::string& device, int world_size);

}  // namespace tf::sweep
