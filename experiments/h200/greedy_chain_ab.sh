#!/usr/bin/env bash
# Issue 17 (no host round trip between a drafter's gamma steps): the chained greedy draft steps
# (LlamaModel::forward_greedy_chain; TRIFORCE_GREEDY_CHAIN=0 turns it off) against the k forward_greedy calls, after
# experiments/h200/build.sh: test_greedy_chain_gpu (the same ids, K/V and drafter state), then
# BM_GreedyChain68M / BM_GreedyChain135M (per draft token, k calls against one chain). Out: OUT/gc.tgz.
#   bash experiments/h200/greedy_chain_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/gc
rm -rf "$dir" && mkdir -p "$dir"
(cd "$build" && ctest --output-on-failure -R '^(test_greedy_chain_gpu|test_greedy_ids_gpu)$') 2>&1 |
  tee "$dir/ctest.log" | grep -E "tests passed|Failed|FAIL|\*\*\*"
"$build/tests/bench_model_gpu" --benchmark_filter='BM_GreedyChain' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$dir/greedy_chain.json" 2>&1 |
  tee "$dir/bench_stdout.txt" | grep -E "median|rror"
tar -czf "$out/gc.tgz" -C /tmp gc
