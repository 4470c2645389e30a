#!/usr/bin/env bash
# Issue 18's last line on an H200: the whole 7B prefill of PREFILL_TOKENS (131072; cuDNN attention, chunks of
# 8192, the default GEMMs) beside HF transformers' prefill of the same length on the same GPU, in one call, after
# experiments/h200/build.sh; then the 8B GQA prefill. The engine-configuration search and the ncu profile of
# cudnn_config_ab.sh are left out (their answer is in results/h100/session-2026-12-07d).
# Out: OUT/pp.tgz (also when a time limit ends the run).
#   bash experiments/h200/prefill_peer.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/pp
rm -rf "$dir" && mkdir -p "$dir"
trap 'tar -czf "$out/pp.tgz" -C /tmp pp' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$dir/gpu.txt"
tokens=${PREFILL_TOKENS:-131072}
for model in 7B 8B_GQA; do
  "$build/tests/bench_model_gpu" --benchmark_filter="BM_Prefill$model/$tokens/1/8192/0/0(/|\$)" \
    --benchmark_out="$dir/prefill_$model.json" 2>&1 | tee "$dir/prefill_${model}_stdout.txt" | grep -E "^BM_|rror"
  [[ $model == 7B ]] || continue
  # The peer right after ours, so that both see the same GPU state.
  timeout 300 python3 experiments/peers/hf_static_compile.py --model synthetic:llama2-7b-128k \
    --prompt-len $((tokens + 1)) --new-tokens 1 --warmup 1 --no-compile --label prefill --out "$dir/hf_prefill.jsonl" \
    2>&1 | tail -5 | tee "$dir/hf_stdout.txt"
done
