#!/usr/bin/env bash
# Issue 17: decode attention's split tile with 8 warps against 4 at head_dim 64 (TRIFORCE_ATTN_SPLIT_WARPS; the
# small models' steps), after experiments/h200/build.sh. First the tests that pin the bits: the kernel tests set
# both widths themselves. Then, per width, BM_AttentionDecodeSmall (one layer's attention at the models' shapes)
# and the steps that run it (default launches, graphs on), medians of 3. Last, the model-level tests (batch
# invariance, persistent step against the per-op step, step fusions, graphs, greedy chain, engine) with 4 warps
# (the default is 8).
# Out: OUT/sw.tgz, written on exit (also when a time limit ends the run).
#   bash experiments/h200/split_warps_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/sw
rm -rf "$dir" && mkdir -p "$dir"
trap 'tar -czf "$out/sw.tgz" -C /tmp sw' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$dir/gpu.txt" 2>&1
(cd "$build" && ctest --output-on-failure -R '^(test_kernels_attention|test_kernels_batch_invariance)$') 2>&1 |
  tee "$dir/ctest_kernels.log" | grep -E "tests passed|Failed|FAIL|\*\*\*"
# Both widths are this benchmark's own last argument.
"$build/tests/bench_attention_decode_gpu" --benchmark_filter='BM_AttentionDecodeSmall' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$dir/attn_small.json" >"$dir/attn_small.txt" 2>&1
for w in 4 8; do
  TRIFORCE_ATTN_SPLIT_WARPS=$w "$build/tests/bench_model_gpu" \
    --benchmark_filter='^(BM_Step135M/(256|6478)/1/25|BM_Verify135M/(256|6478)/1/3/25|BM_DraftStep68M/250/1/25|BM_GreedyChain68M/250/4/1|BM_GreedyChain135M/(256|6478)/4/1)(/|$)' \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_out="$dir/steps_w$w.json" \
    >"$dir/steps_w$w.txt" 2>&1
  grep -E "median" "$dir/steps_w$w.txt" | sed "s/^/w$w: /"
done
grep -E "median" "$dir/attn_small.txt" | head -40
# The model-level tests under the narrow tile (their *_split_w4 ctests, tests/CMakeLists.txt); under the default
# they are the plain tests of the GPU suite.
(cd "$build" && ctest --output-on-failure -j2 --timeout 300 -R '_split_w4$') 2>&1 |
  tee "$dir/ctest_model_w4.log" | grep -E "tests passed|Failed|FAIL|\*\*\*"
