#!/usr/bin/env bash
# Issue 17: the floors a design of a small-model step pays, measured alone, after experiments/h200/build.sh:
#   bench_sync_latency_gpu     one synchronisation between dependent phases: a kernel boundary (1 or 132
#                              blocks, plain or PDL, eager or one graph), a cluster barrier (2-16 CTAs, with a
#                              DSMEM handoff), an SM-to-SM flag
#   bench_stream_bandwidth_gpu how fast 1-132 SMs stream bytes (register loads or TMA bulk copies, from HBM or L2)
#   BM_PersistentBarrier       the persistent step's grid barrier (bench_model_gpu), for comparison
# Together they say what a step confined to one thread block cluster would cost against today's kernel chain.
# Out: OUT/floors.tgz (also when a time limit ends the run). About 30 s.
#   bash experiments/h200/step_floors.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/floors
rm -rf "$dir" && mkdir -p "$dir"
trap 'tar -czf "$out/floors.tgz" -C /tmp floors' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$dir/gpu.txt" 2>&1
for b in sync_latency stream_bandwidth; do
  "$build/tests/bench_${b}_gpu" --benchmark_out="$dir/$b.json" >"$dir/$b.txt" 2>&1
  grep -E "median|rror" "$dir/$b.txt"
done
"$build/tests/bench_model_gpu" --benchmark_filter='BM_PersistentBarrier' --benchmark_out="$dir/grid_barrier.json" \
  >"$dir/grid_barrier.txt" 2>&1
grep -E "BM_PersistentBarrier|rror" "$dir/grid_barrier.txt"
