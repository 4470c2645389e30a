#!/usr/bin/env bash
# --offload-kv end to end on the GPU: greedy ar and triforce tokens with the
# target's KV offloaded (all layers, or one kept on chip) equal the on-device
# run's, in one process and under mpirun -np 1 (the NCCL path: each rank
# offloads its own heads); and the plan lists the pinned bytes.
# Skipped (77) without a GPU or a CUDA build.
set -u
bin=$1; fixtures=$2
"$bin" info --model "$fixtures/hf/gqa_f32" --device cuda 2>/dev/null | grep -q "fits on this GPU" ||
  { echo "no CUDA device: skipped"; exit 77; }
export NCCL_NVLS_ENABLE=0
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
awk 'BEGIN { for (i = 0; i < 400; i++) print (i * 37 + 11) % 256 }' >"$tmp/ids.txt"
tokens_of() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['tokens'])" "$1"; }
gen() {  # gen <np|0> <out.json> args...
  local np=$1 out=$2; shift 2
  if [[ $np == 0 ]]; then "$bin" generate --device cuda --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  else "${mpi[@]}" -np "$np" "$bin" generate --device cuda --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || {
    cat "$tmp/err"; exit 1; }
  fi
}
same() {
  local a b; a=$(tokens_of "$2"); b=$(tokens_of "$3")
  [[ "$a" == "$b" ]] || { echo "FAIL $1: tokens differ"; echo " $a"; echo " $b"; exit 1; }
  echo "$1: identical"
}
for fx in gqa_f32 mha_f32; do
  common=(--target "$fixtures/hf/$fx" --prompt-tokens "$tmp/ids.txt" --max-new-tokens 48)
  tri=(--method triforce --draft layerskip:1 --budget 64 --chunk-size 8 --reretrieve every:16)
  gen 0 "$tmp/ar.json" "${common[@]}"
  gen 0 "$tmp/tri.json" "${common[@]}" "${tri[@]}"
  same "$fx triforce vs ar on device" "$tmp/ar.json" "$tmp/tri.json"
  for np in 0 1; do
    for off in "--offload-kv" "--offload-kv --on-chip-layers 1"; do
      # shellcheck disable=SC2086
      gen "$np" "$tmp/o_ar.json" "${common[@]}" $off
      same "$fx ar $off (np $np) vs on device" "$tmp/ar.json" "$tmp/o_ar.json"
      # shellcheck disable=SC2086
      gen "$np" "$tmp/o_tri.json" "${common[@]}" "${tri[@]}" $off
      same "$fx triforce $off (np $np) vs on device" "$tmp/ar.json" "$tmp/o_tri.json"
    done
  done
  # --compare: the first method copies the pinned snapshot, the second adopts it.
  gen 0 "$tmp/cmp.json" "${common[@]}" "${tri[@]}" --offload-kv --compare ar
  python3 - "$tmp/cmp.json" <<'PY' || { echo "FAIL $fx --compare ar with --offload-kv"; exit 1; }
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert j["identical_to_compare"], "triforce and ar differ under --offload-kv --compare"
PY
  echo "$fx --offload-kv --compare ar: identical"
done
"$bin" info --model synthetic:llama2-7b-128k --context 131072 --offload-kv --on-chip-layers 8 >"$tmp/info" 2>&1 ||
  { cat "$tmp/info"; exit 1; }
grep -q "24 offloaded layers.*48.000 GiB (pinned host)" "$tmp/info" || { echo "FAIL: info plan"; cat "$tmp/info"; exit 1; }
grep -q "fits in host memory" "$tmp/info" || { echo "FAIL: info host check"; cat "$tmp/info"; exit 1; }
echo "info --offload-kv: plan lists the pinned KV"
