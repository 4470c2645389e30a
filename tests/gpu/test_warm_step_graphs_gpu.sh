#!/usr/bin/env bash
# tests/cli/test_warm_step_graphs.sh on CUDA (bf16), where the warm-up records
# the step graphs: the same tokens and counts with and without it, and no more
# captures or eager steps in the decode with it. Skipped (77) without a GPU.
set -u
bin=$1; fixtures=$2
"$bin" info --model "$fixtures/hf/gqa_f32" --device cuda 2>/dev/null | grep -q "fits on this GPU" ||
  { echo "no CUDA device: skipped"; exit 77; }
export NCCL_NVLS_ENABLE=0
WARM_ARGS="--device cuda --dtype bf16" exec bash "$(dirname "$0")/../cli/test_warm_step_graphs.sh" "$bin" "$fixtures"
