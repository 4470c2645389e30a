#!/usr/bin/env bash
# Issue 17: the norm-prologue GEMMs with the RoPE and SwiGLU epilogues in the same launch (five launches a layer
# instead of seven), after experiments/h200/build.sh: their tests, then each step with graphs on under the default
# launches against the fused ones, medians of 3 repetitions:
# - small models: mask 25 (PDL + both epilogues, the default) against 57 (+ the norm prologue, which now keeps
#   the epilogues) and 33 (PDL + the norm prologue alone: the epilogues' own launches);
# - the 7B decode at 8K: mask 24 (the default, no PDL) against 56.
# - the 7B again with TRIFORCE_PREFETCH_MIB=auto.
# OUT gets ctest_norm_epilogue.log, norm_epilogue_ab.json, norm_epilogue_ab_7b_prefetch_auto.json and the printouts.
#   bash experiments/h200/norm_epilogue_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
(cd "$build" && timeout 220 ctest --output-on-failure \
  -R '^(test_kernels_step_fusions|test_model_step_fusions|test_kernels_norm_gemm|test_kernels_gemm_skinny|test_persistent_step)$') \
  >"$out/ctest_norm_epilogue.log" 2>&1
echo "ctest: exit $?"
grep -E "tests passed|Failed|FAILED|\(Passed\)|\(Failed\)" "$out/ctest_norm_epilogue.log" | head -20
timeout 200 "$build/tests/bench_model_gpu" \
  --benchmark_filter='(BM_Step135M/(256|6478)/1/(25|33|57)|BM_Verify135M/(256|6478)/1/3/(25|57)|BM_DraftStep68M/250/1/(25|57)|BM_DraftVerify68M/250/1/3/(25|57)|BM_Decode7B/8192/1/(24|56))(/|$)' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/norm_epilogue_ab.json" 2>&1 | tee "$out/norm_epilogue_ab_stdout.txt" | grep -E "_median|rror"
# The 7B's norm prologue asked L2 for more weight rows than it holds (results/h100/prefetch-bound): the same two
# masks with the bounded prefetch.
TRIFORCE_PREFETCH_MIB=auto timeout 100 "$build/tests/bench_model_gpu" \
  --benchmark_filter='BM_Decode7B/8192/1/(24|56)(/|$)' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/norm_epilogue_ab_7b_prefetch_auto.json" 2>&1 | tee "$out/norm_epilogue_ab_7b_stdout.txt" |
  grep -E "_median|rror"
