#!/usr/bin/env bash
# The first GPU run of T > 0 sampling on the device (issue 17's level loop; speculative/device_sampler.h), in
# one call after experiments/h200/build.sh: the GPU tests it touches (test_device_sampling_gpu printed whole:
# the chi-square lines), bench_device_sampling_gpu (one draft decision and one verification, device vs host
# rows), and a synthetic A/B that needs no model files: spec and triforce at T = 0.6, top-p 0.9 on
# synthetic:smollm2-135m with a synthetic draft of its shape (acceptance near 0, so ms/token is the price of the
# steps and decisions alone), TRIFORCE_DEVICE_SAMPLING=1 against =0, --compare ar in the same process.
#   bash experiments/h200/device_sampling_check.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt"
"$build/tests/test_device_sampling_gpu" >"$out/test_device_sampling_gpu.log" 2>&1
echo "test_device_sampling_gpu: exit $?"
grep -E "^\[  (  OK|FAILED)|first p=|Failure|Expected|Which is" "$out/test_device_sampling_gpu.log" | head -40
(cd "$build" && ctest -L gpu -j4 --timeout 300 --output-on-failure \
  -R "greedy_ids|engine_gpu|model_gpu$|cuda_graphs$|kernels_sampling|softmax_top_p|streaming_absorb|model_batch_invariance|draft_vocab|shared_embedding|simulate_gpu") \
  >"$out/ctest_gpu.log" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$out/ctest_gpu.log" | head -20
"$build/tests/bench_device_sampling_gpu" --benchmark_out="$out/bench_device_sampling.json" \
  --benchmark_out_format=json >"$out/bench_device_sampling.txt" 2>&1
grep -E "_median" "$out/bench_device_sampling.txt"
python3 -c "print('\n'.join(str((i * 7919 + 13) % 49152) for i in range(4096)))" >"$out/synthetic-4096.ids"
for m in spec triforce; do
  for a in 1 0 1 0; do
    TRIFORCE_DEVICE_SAMPLING=$a "$build/triforce" generate --device cuda --target synthetic:smollm2-135m \
      --draft synthetic:smollm2-135m --method $m --prompt-tokens "$out/synthetic-4096.ids" --max-new-tokens 128 \
      --ignore-eos --temperature 0.6 --top-p 0.9 --seed 1 --compare ar --json 2>>"$out/synthetic.err" | tail -n 1 |
      python3 -c "
import json, sys
d = json.load(sys.stdin)
print(json.dumps({'method': '$m', 'device_sampling_env': $a, 'device_sampling': d['device_sampling'],
  'ar_device_sampling': d['compare']['device_sampling'], 'decode_ms_per_token': d['decode_ms_per_token'],
  'ar_decode_ms_per_token': d['compare']['decode_ms_per_token'], 'tau_top': d['levels'][-1]['tau']}))" |
      tee -a "$out/synthetic_ab.jsonl"
  done
done
