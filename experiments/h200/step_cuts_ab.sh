#!/usr/bin/env bash
# Issue 17: two cuts of a small model's step, after experiments/h200/build.sh (and split_warps_ab.sh):
# 1. the inputs kernel (TRIFORCE_INPUTS_KERNEL: the staged ids, slots and RoPE rows read by one kernel instead
#    of two or three copy nodes): its tests, then the steps with it off and on, twice in turn (off, on, off, on);
# 2. the norm kernel's weight loaded before its PDL wait (f065db0): the same steps built with the norm files of
#    NORM_OLD (default .deps/ab: kernels/rmsnorm.cu and rmsnorm_tile.cuh before that commit), then rebuilt
#    with today's again and measured once more (new, old, new). Skipped when NORM_OLD has no such files.
# Steps: SmolLM2-shape step and verify at 256 and 6478 slots, the 68M draft step and its chained greedy steps,
# graphs on, default launches, medians of 3. Out: OUT/cuts.tgz (also when a time limit ends the run).
#   bash experiments/h200/step_cuts_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/cuts
rm -rf "$dir" && mkdir -p "$dir"
trap 'tar -czf "$out/cuts.tgz" -C /tmp cuts' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$dir/gpu.txt" 2>&1
filter='^(BM_Step135M/(256|6478)/1/25|BM_Verify135M/(256|6478)/1/3/25|BM_DraftStep68M/250/1/25|BM_GreedyChain68M/250/4/1)(/|$)'
steps() {  # NAME [ENV...]
  local name=$1; shift
  env "$@" "$build/tests/bench_model_gpu" --benchmark_filter="$filter" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$dir/steps_$name.json" >"$dir/steps_$name.txt" 2>&1
  grep -E "median|rror" "$dir/steps_$name.txt" | sed "s/^/$name: /"
}
(cd "$build" && ctest --output-on-failure -j2 --timeout 300 -R '^(test_kernels_step_inputs|test_model_step_fusions|.*_inputs_copies)$') 2>&1 |
  tee "$dir/ctest_inputs.log" | grep -E "tests passed|Failed|FAIL|\*\*\*"
for round in 1 2; do
  steps "inputs0_r$round" TRIFORCE_INPUTS_KERNEL=0
  steps "inputs1_r$round" TRIFORCE_INPUTS_KERNEL=1
done
old=${NORM_OLD:-.deps/ab}
[[ -f $old/rmsnorm.cu && -f $old/rmsnorm_tile.cuh ]] || { echo "step_cuts_ab: no $old/rmsnorm*, norm A/B skipped"; exit 0; }
mkdir -p "$dir/norm_new_src" && cp kernels/rmsnorm.cu kernels/rmsnorm_tile.cuh "$dir/norm_new_src/"
rebuild() { cmake --build "$build" -j16 --target bench_model_gpu 2>&1 | tail -1; }
steps norm_new1 TRIFORCE_INPUTS_KERNEL=0
cp "$old/rmsnorm.cu" "$old/rmsnorm_tile.cuh" kernels/ && rebuild && steps norm_old TRIFORCE_INPUTS_KERNEL=0
cp "$dir/norm_new_src/rmsnorm.cu" "$dir/norm_new_src/rmsnorm_tile.cuh" kernels/ && rebuild &&
  steps norm_new2 TRIFORCE_INPUTS_KERNEL=0
