#!/usr/bin/env bash
# One GPU-machine call: build, the GPU tests, the step benchmarks, per-kernel times under ncu, and the
# TriForce-at-scale study (experiments/triforce_7b). Writes logs, JSON and HDF5 under OUT. Each part has
# its own time limit so a slow part cannot take the rest with it.
#   TRIFORCE_GIT_SHA=$(git rev-parse --short HEAD) PARTS="build tests bench ncu study" \
#     bash experiments/h200/gpu_checks.sh OUT
# FUSIONS="000 111": the step-fusion switches (stacked GEMMs, RoPE+KV write, add+norm) to benchmark.
# Parts "prefetch", "step" and "direct" run prefetch_ab.sh, step_ab.sh (REPS, CONFIGS as they take them) and
# direct_split_ab.sh into OUT.
# TAR_TO=FILE packs OUT into one archive at the end: a device call brings back at most 8 files, so write OUT
# outside $OUT and TAR_TO=$OUT/checks.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
parts=" ${PARTS:-build tests bench ncu} "
export NCCL_NVLS_ENABLE=0
b=build-h200
t0=$SECONDS
has() { [[ $parts == *" $1 "* ]]; }
if has build; then
  bash experiments/h200/build.sh $b 2>&1 | grep -v "^CMake Warning\|policy\|^  \|^$\|suppress" | tail -20
  test -x $b/triforce || exit 1
  echo "== build: $((SECONDS - t0)) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

if has tests; then
  t=$SECONDS
  (cd $b && timeout 400 ctest -L gpu --output-on-failure --timeout 200 \
     -E "${TESTS_EXCLUDE:-attention_prefill|synthetic_shard|tp_shared|gemm_skinny|softmax_top_p|kernels_attention$}" \
     > "$out/ctest_gpu.log" 2>&1)
  grep -E "tests passed|Test *#|Timeout" "$out/ctest_gpu.log" | sed 's/ \.\.\.*/ /' | head -30
  grep -h "\[ absorb \]\|\[ invariance \]" "$out/ctest_gpu.log" | head -4
  echo "== tests: $((SECONDS - t)) s"
fi

if has bench; then
  t=$SECONDS
  timeout 120 $b/tests/bench_retrieval_gpu --benchmark_out="$out/bench_retrieval.json" --benchmark_out_format=json \
    2>&1 | grep -E "^BM_|ERROR" | cut -c1-200
  F='BM_Decode7B/(8192|131072)/1/|BM_RetrievalStep7B/.*/1/|BM_Verify7_7B/131072/1/|BM_DraftStep68M/.*/1/|BM_Step135M/.*/1/'
  for c in ${FUSIONS:-111}; do
    TRIFORCE_STACKED_GEMMS=${c:0:1} TRIFORCE_FUSED_ROPE_KV=${c:1:1} TRIFORCE_FUSED_ADD_NORM=${c:2:1} \
      timeout 150 $b/tests/bench_model_gpu --benchmark_filter="$F" --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true --benchmark_out="$out/bench_model_fusions_$c.json" \
      --benchmark_out_format=json 2>&1 | grep -E "_median|ERROR" | cut -c1-150
  done
  echo "== bench: $((SECONDS - t)) s"
fi

if has ncu; then
  t=$SECONDS
  for f in ${NCU_FILTERS:-BM_RetrievalStep7B/4099/0/3/ BM_Verify7_7B/131072/0/ BM_Step135M/256/0/}; do
    TRIFORCE_BENCH_STEPS=1 timeout 120 ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum --csv --page raw $b/tests/bench_model_gpu --benchmark_filter="$f" \
      >> "$out/ncu.csv" 2>&1
  done
  echo "== ncu: $((SECONDS - t)) s"
fi

if has prefetch; then
  t=$SECONDS
  timeout 400 bash experiments/h200/prefetch_ab.sh $b "$out/prefetch" | grep "^prefetch_ab"
  echo "== prefetch: $((SECONDS - t)) s"
fi

if has step; then
  t=$SECONDS
  timeout 400 bash experiments/h200/step_ab.sh $b "$out/step" | grep "^step_ab"
  echo "== step: $((SECONDS - t)) s"
fi

if has direct; then
  t=$SECONDS
  timeout 420 bash experiments/h200/direct_split_ab.sh $b "$out/direct" | grep "^direct_split_ab\|^step_ab"
  echo "== direct: $((SECONDS - t)) s"
fi

if has study; then
  TRIFORCE_BIN=$b/triforce bash experiments/triforce_7b/run_study.sh "$out" ${STUDY_PARTS:-onchip grid} 2>&1 | tail -30
fi
echo "== total: $((SECONDS - t0)) s"
if [[ -n ${TAR_TO:-} ]]; then tar -czf "$TAR_TO" -C "$(dirname "$out")" "$(basename "$out")" && echo "== packed: $TAR_TO"; fi
