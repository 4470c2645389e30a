#!/usr/bin/env bash
# Issue 17: the first GPU run of the launch-removing GEMM fusions (StepFusions::fused_norm_gemm,
# fused_gate_up_silu, fused_qkv_rope), in one call after experiments/h200/build.sh: the kernel tests
# (bitwise against the launches they replace, a double reference, batch invariance), the model's
# bit-identity over every switch (test_model_step_fusions, logits and KV cache), the tests of the code they
# share (test_kernels_gemm_skinny, test_persistent_step), and the step benchmarks of the small models with
# PDL alone (mask 1) against PDL + the SwiGLU epilogue (9), + the RoPE epilogue (17), + both (25) and + the
# norm prologue (33), graphs on, three repetitions each.
#   bash experiments/h200/norm_gemm_check.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
for t in test_kernels_norm_gemm test_kernels_step_fusions test_model_step_fusions test_kernels_gemm_skinny \
  test_persistent_step; do
  "$build/tests/$t" >"$out/$t.log" 2>&1
  echo "$t: exit $? $(grep -cE '^\[       OK' "$out/$t.log") ok, $(grep -cE '^\[  FAILED' "$out/$t.log") failed lines"
  grep -E "Failure|differs|Expected|Which is" "$out/$t.log" | head -6
done
"$build/tests/bench_model_gpu" --benchmark_filter='BM_(Step135M|DraftStep68M)/[0-9]+/1/(1|9|17|25|33)(/|$)|BM_(Verify135M|DraftVerify68M)/[0-9]+/1/3/(1|25|33)(/|$)' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true \
  --benchmark_out="$out/bench_fusions.json" --benchmark_out_format=json 2>&1 | grep -E "median" |
  tee "$out/bench_fusions.txt"
