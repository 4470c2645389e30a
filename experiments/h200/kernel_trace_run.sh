#!/usr/bin/env bash
# Issues 17 and 18: per-kernel tables of the overlapped runs (TRIFORCE_KERNEL_TRACE, tests/bench/kernel_trace.h),
# after experiments/h200/build.sh:
# - the small steps (SmolLM2-135M at 256 and 6478 slots, the 68M draft) and the 7B decode at 8K, graphs on,
#   default launches (mask 25 for the small ones, 24 for the 7B); STEPS_7B: another 7B filter;
# - one timed 7B prefill (cuDNN attention, chunk 8192, default GEMMs) after the untimed first one, of 32,768 and of
#   131,072 tokens (the bench's cache holds 128K either way: 64 GiB of K/V and 12.6 of weights, which an H100's
#   80 GB hold: measured); PREFILL_TOKENS picks the lengths.
# Everything lands in OUT/kt (one CSV per benchmark, the bench JSON and stdout), packed as OUT/kt.tgz.
#   bash experiments/h200/kernel_trace_run.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/kt
rm -rf "$dir" && mkdir -p "$dir"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$dir/gpu.txt"
bench=$build/tests/bench_model_gpu
# One process per model: a 7B retrieval step beside the 7B's full 128K cache does not fit an H100 (CUDA out of
# memory), so it runs only where STEPS_7B names it.
TRIFORCE_KERNEL_TRACE=$dir "$bench" \
  --benchmark_filter='(BM_Step135M/(256|6478)/1/25|BM_DraftStep68M/250/1/25)(/|$)' \
  --benchmark_out="$dir/steps_small.json" 2>&1 | tee "$dir/steps_small_stdout.txt" | grep -E "^BM_|kernel_trace|rror"
TRIFORCE_KERNEL_TRACE=$dir "$bench" --benchmark_filter="${STEPS_7B:-BM_Decode7B/8192/1/24(/|\$)}" \
  --benchmark_out="$dir/steps_7b.json" 2>&1 | tee "$dir/steps_7b_stdout.txt" | grep -E "^BM_|kernel_trace|rror"
for tokens in ${PREFILL_TOKENS:-32768 131072}; do
  TRIFORCE_KERNEL_TRACE=$dir TRIFORCE_BENCH_STEPS=1 "$bench" \
    --benchmark_filter="BM_Prefill7B/$tokens/1/8192/0/0(/|\$)" --benchmark_out="$dir/prefill$tokens.json" 2>&1 |
    tee "$dir/prefill${tokens}_stdout.txt" | grep -E "^BM_|kernel_trace|rror"
done
for f in "$dir"/*prefill*.csv; do
  [[ -f $f ]] || continue
  echo "== $f"
  head -30 "$f"
done
tar -czf "$out/kt.tgz" -C /tmp kt
