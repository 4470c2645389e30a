#!/usr/bin/env bash
# Tensor parallelism with several ranks on one GPU (collectives staged through the
# host): greedy ar and triforce tokens, and the argmax of every logit row, equal
# the one-process run's, on the HF fixtures and on the default model when it is
# cached. Row-parallel partials are summed in f32 and rounded once, as TP 1
# rounds, so the logits agree to a few bf16 ulps. Skipped (77) without a GPU.
# Without MPS the ranks' contexts time-slice the GPU, so every allreduce waits
# for the other ranks' slices: the runs are kept short, each has its own time
# limit (a hang names its command) and prints its wall time.
set -u
bin=$1; fixtures=$2
"$bin" info --model "$fixtures/hf/gqa_f32" --device cuda 2>/dev/null | grep -q "fits on this GPU" ||
  { echo "no CUDA device: skipped"; exit 77; }
export NCCL_NVLS_ENABLE=0
mpi=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() {  # run <np> <out> args...
  local np=$1 out=$2; shift 2
  local cmd=("$bin" "$@")
  [[ $np -gt 0 ]] && cmd=("${mpi[@]}" -np "$np" "${cmd[@]}")
  local t0=$SECONDS
  timeout 240 "${cmd[@]}" >"$out" 2>"$tmp/err" || { echo "FAIL (rc $?): ${cmd[*]}"; cat "$tmp/err"; exit 1; }
  echo "  $(( SECONDS - t0 )) s: np $np $1"
}
tokens_of() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['tokens'])" "$1"; }
same_tokens() {
  local a b; a=$(tokens_of "$2"); b=$(tokens_of "$3")
  [[ "$a" == "$b" ]] || { echo "FAIL $1: tokens differ"; echo " $a"; echo " $b"; exit 1; }
  echo "$1: identical"
}
close_logits() {  # argmax equal on every row; report the largest difference
  python3 - "$1" "$2" "$3" <<'PY' || exit 1
import sys
import numpy as np
name, a, b = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3])
assert a.shape == b.shape, (a.shape, b.shape)
assert np.isfinite(a).all() and np.isfinite(b).all(), "non-finite logits"
d = np.abs(a - b).max(); spread = a.std()
same = int((a.argmax(1) == b.argmax(1)).sum())
print(f"{name}: max |dlogit| {d:.4g} (logit std {spread:.3g}), argmax equal on {same}/{len(a)} rows")
if same != len(a) or d > 0.05 * spread:
    sys.exit(f"FAIL {name}: the logits are not TP 1's")
PY
}
# model:ranks (SmolLM2's 3 KV heads over 3 ranks, and over 2 as 2 + 1)
models=("$fixtures/hf/mha_f32:2" "$fixtures/hf/gqa_f32:2")
smol="${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f $smol ]] && models+=("$smol:3" "$smol:2") || echo "default model not cached: its part is not run"
for entry in "${models[@]}"; do
  m=${entry%:*}; np=${entry##*:}
  name="$(basename "$m") TP $np"
  vocab=$("$bin" info --model "$m" 2>/dev/null | sed -n 's/^vocab: \([0-9]*\).*/\1/p')
  [[ -n $vocab ]] || { echo "FAIL: no vocab in triforce info for $m"; exit 1; }
  awk -v v="$vocab" 'BEGIN { for (i = 0; i < 200; i++) print (i * 37 + 11) % v }' >"$tmp/ids.txt"
  run 0 "$tmp/l1.out" logits --model "$m" --device cuda --tokens-file "$tmp/ids.txt" --last 32 --out "$tmp/l1.npy"
  run "$np" "$tmp/l2.out" logits --model "$m" --device cuda --tokens-file "$tmp/ids.txt" --last 32 --out "$tmp/l2.npy"
  close_logits "$name logits" "$tmp/l1.npy" "$tmp/l2.npy"
  common=(generate --target "$m" --device cuda --prompt-tokens "$tmp/ids.txt" --max-new-tokens 24 --ignore-eos --json)
  tri=(--method triforce --draft layerskip:1 --budget 64 --chunk-size 8)
  run 0 "$tmp/ar1.json" "${common[@]}"
  run "$np" "$tmp/ar2.json" "${common[@]}"
  same_tokens "$name ar vs TP 1" "$tmp/ar1.json" "$tmp/ar2.json"
  run "$np" "$tmp/tri2.json" "${common[@]}" "${tri[@]}"
  same_tokens "$name triforce vs ar TP 1" "$tmp/ar1.json" "$tmp/tri2.json"
done
echo "PASS"
