#!/usr/bin/env bash
# Issue 17: the persistent step's arrival-counter grid barrier against the first (generation) design, in one
# call after experiments/h200/build.sh: the barrier alone (BM_PersistentBarrier/<blocks per SM>/<0 counter,
# 1 generation>), the persistent step of the SmolLM2-135M and 68M shapes with each barrier (eager, the only
# way it runs) and its phase profile, the per-op step replayed from a graph with PDL (the default path) as
# the peer, and test_persistent_step (bit-identity with the per-op step) under each barrier.
#   bash experiments/h200/persistent_barrier_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
bench=$build/tests/bench_model_gpu
agg=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true)
"$bench" --benchmark_filter='BM_PersistentBarrier' --benchmark_out="$out/barrier.json" \
  --benchmark_out_format=json 2>&1 | grep -E "^BM_" | tee "$out/barrier.txt"
for b in counter generation; do
  TRIFORCE_PERSISTENT_BARRIER=$b "$build/tests/test_persistent_step" --gtest_filter='-*SmolLM2Gguf*' \
    >"$out/test_persistent_step_$b.log" 2>&1
  echo "test_persistent_step ($b barrier): exit $? $(grep -cE '^\[       OK' "$out/test_persistent_step_$b.log") ok"
  TRIFORCE_PERSISTENT_STEP=1 TRIFORCE_PERSISTENT_BARRIER=$b "$bench" \
    --benchmark_filter='BM_(Step135M|DraftStep68M)/[0-9]+/0/0(/|$)|BM_Phases135M' "${agg[@]}" \
    --benchmark_out="$out/persistent_$b.json" --benchmark_out_format=json 2>&1 | grep -E "median|Phases" |
    tee "$out/persistent_$b.txt"
done
"$bench" --benchmark_filter='BM_(Step135M|DraftStep68M)/[0-9]+/1/1(/|$)' "${agg[@]}" \
  --benchmark_out="$out/per_op_graph_pdl.json" --benchmark_out_format=json 2>&1 | grep -E "median" |
  tee "$out/per_op_graph_pdl.txt"
