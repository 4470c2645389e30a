#!/usr/bin/env bash
# Issue 18: does an engine configuration other than cuDNN's heuristic first choice run the prefill's attention
# faster? After experiments/h200/build.sh:
# 1. test_kernels_attention_prefill (every listed configuration that builds against the CPU reference) and
#    test_env_knobs;
# 2. BM_AttentionPrefillCudnnConfigs: each configuration cuDNN lists for the chunk shapes, timed on one chunked
#    layer (32K and 128K, MHA and GQA) and checked against the default's output; one line per configuration;
# 3. the whole 7B prefill of PREFILL_TOKENS (131072) with the default and with the 128K MHA row's best
#    configuration (TRIFORCE_CUDNN_ATTN_CONFIG), when that one beat the default by more than 1%; then the 8B GQA
#    prefill of the same length with the defaults;
# 4. HF_PEER=1: HF transformers' prefill of the same length on the same GPU (experiments/peers/hf_static_compile.py).
# Everything lands in /tmp/cc, packed as OUT/cc.tgz (one file, so that it comes back).
#   bash experiments/h200/cudnn_config_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
dir=/tmp/cc
rm -rf "$dir" && mkdir -p "$dir"
pack() { tar -czf "$out/cc.tgz" -C /tmp cc; }
trap pack EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$dir/gpu.txt"
(cd "$build" && ctest --output-on-failure -R '^(test_kernels_attention_prefill|test_env_knobs)$') 2>&1 |
  tee "$dir/ctest.log" | grep -E "tests passed|Failed|engine configurations|FAIL" 
"$build/tests/bench_attention_prefill_gpu" --benchmark_filter='BM_AttentionPrefillCudnnConfigs' \
  --benchmark_out="$dir/configs.json" 2>&1 | tee "$dir/configs_stdout.txt" | grep -E "^BM_|rror|MISMATCH"
pack
best=$(awk '$1 == "cudnn_config" && $2 == 131072 && $3 == 32 && $4 == 8192 && $6 ~ /^[0-9.]+$/ && $9 == "" {
              if ($5 ~ /^default/) d = $6; else if (b == "" || $6 < b) { b = $6; t = $5 } }
            END { if (d != "" && b != "" && b < d / 1.01) print t }' "$dir/configs_stdout.txt")
echo "best 128K configuration beyond the default: ${best:-none}" | tee "$dir/best.txt"
tokens=${PREFILL_TOKENS:-131072}
run_prefill() {  # NAME [ENV...] (MODEL: 7B or 8B_GQA)
  local name=$1; shift
  env "$@" "$build/tests/bench_model_gpu" --benchmark_filter="BM_Prefill${MODEL:-7B}/$tokens/1/8192/0/0(/|\$)" \
    --benchmark_out="$dir/prefill_$name.json" 2>&1 | tee "$dir/prefill_${name}_stdout.txt" | grep -E "^BM_|rror"
  pack
}
run_prefill default TRIFORCE_CUDNN_ATTN_CONFIG=heuristic
[[ -n $best ]] && run_prefill best "TRIFORCE_CUDNN_ATTN_CONFIG=$best"
MODEL=8B_GQA run_prefill 8b_default TRIFORCE_CUDNN_ATTN_CONFIG=heuristic
if [[ ${HF_PEER:-0} == 1 ]]; then
  timeout 300 python3 experiments/peers/hf_static_compile.py --model synthetic:llama2-7b-128k \
    --prompt-len $((tokens + 1)) --new-tokens 1 --warmup 1 --no-compile --label prefill --out "$dir/hf_prefill.jsonl" \
    2>&1 | tail -5 | tee "$dir/hf_stdout.txt"
fi
# 5. NCU_STEP=1 (default): why a SmolLM2-shape step's small kernels take 3-6 us each although they move
#    kilobytes: ncu's stall reasons (WarpStateStats), speed of light and launch statistics of the first two
#    layers' attention split, add + RMSNorm and plain skinny GEMM, one eager step at 256 slots.
if [[ ${NCU_STEP:-1} == 1 ]] && command -v ncu >/dev/null; then
  TRIFORCE_BENCH_STEPS=1 timeout 150 ncu --clock-control none --profile-from-start off --section SpeedOfLight \
    --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats \
    -k 'regex:attention_split|rmsnorm_vec8|skinny_mma_kernel' -c 6 "$build/tests/bench_model_gpu" \
    --benchmark_filter='BM_Step135M/256/0/25/' >"$dir/ncu_step135m_details.txt" 2>&1 ||
    echo "cudnn_config_ab: ncu failed (see ncu_step135m_details.txt)"
  grep -E "^  [a-z_].*\(|Duration|Stall|Warp Cycles Per Issued|Issued Warp" "$dir/ncu_step135m_details.txt" | head -60
fi
