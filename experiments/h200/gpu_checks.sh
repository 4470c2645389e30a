#!/usr/bin/env bash
# One GPU-machine call: build, the GPU tests of the step fusions / retrieval build / StreamingLLM absorption /
# engine, the retrieval-build and step benchmarks (fusions off vs on), and per-kernel times under ncu.
# Writes logs and JSON under OUT (default ./gpu-out). Each part has its own time limit so a slow part
# cannot take the rest with it.
#   TRIFORCE_GIT_SHA=$(git rev-parse --short HEAD) bash experiments/h200/gpu_checks.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
b=build-h200
t0=$SECONDS
bash experiments/h200/build.sh $b 2>&1 | tail -30 || exit 1
echo "== build: $((SECONDS - t0)) s"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
cp $b/triforce "$out/triforce" && strip "$out/triforce"

t=$SECONDS
(cd $b && timeout 300 ctest -L gpu --output-on-failure --timeout 200 \
   -E "attention_prefill|synthetic_shard|tp_shared|simulate_gpu|gemm_skinny|softmax_top_p|kernels_attention$" \
   > "../$out/ctest_gpu.log" 2>&1)
grep -E "tests passed|Failed|\(Failed\)|Timeout" "$out/ctest_gpu.log" | head -20
grep -h "\[ absorb \]\|\[ invariance \]" "$out/ctest_gpu.log" | head -8
echo "== tests: $((SECONDS - t)) s"

t=$SECONDS
timeout 120 $b/tests/bench_retrieval_gpu --benchmark_out="$out/bench_retrieval.json" --benchmark_out_format=json \
  2>&1 | grep -E "BM_|ERROR" | cut -c1-200
echo "== retrieval bench: $((SECONDS - t)) s"

F='BM_Decode7B/(8192|131072)/1/|BM_RetrievalStep7B/.*/1/|BM_Verify7_7B/131072/1/|BM_DraftStep68M/.*/1/|BM_Step135M/.*/1/'
for c in 000 111; do
  t=$SECONDS
  TRIFORCE_STACKED_GEMMS=${c:0:1} TRIFORCE_FUSED_ROPE_KV=${c:1:1} TRIFORCE_FUSED_ADD_NORM=${c:2:1} \
    timeout 150 $b/tests/bench_model_gpu --benchmark_filter="$F" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/bench_model_fusions_$c.json" \
    --benchmark_out_format=json 2>&1 | grep -E "_median|ERROR" | cut -c1-160
  echo "== fusions $c: $((SECONDS - t)) s"
done

t=$SECONDS
for c in 000 111; do
  for f in 'BM_RetrievalStep7B/4099/0/3/' 'BM_Step135M/256/0/'; do
    TRIFORCE_BENCH_STEPS=1 TRIFORCE_STACKED_GEMMS=${c:0:1} TRIFORCE_FUSED_ROPE_KV=${c:1:1} \
      TRIFORCE_FUSED_ADD_NORM=${c:2:1} timeout 90 ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum --csv --page raw $b/tests/bench_model_gpu --benchmark_filter="$f" \
      >> "$out/ncu_$c.csv" 2>&1
  done
done
echo "== ncu: $((SECONDS - t)) s"
echo "== total: $((SECONDS - t0)) s"
