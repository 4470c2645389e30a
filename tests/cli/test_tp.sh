#!/usr/bin/env bash
# Tensor parallelism on CPU (MPI allreduce): under mpirun -np 1, 2 and 4 the
# greedy tokens equal a single process's, the logits agree to 1e-5 (relative
# to the largest logit), and ar, spec and TriForce at T = 0 give the same
# tokens at every TP size; a TP size that does not divide the KV heads is
# refused with one line; the GQA fixture at TP 2 and SmolLM2 (3 KV heads) at
# TP 3 match too.
set -eu
bin=$1; fixtures=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
export NCCL_NVLS_ENABLE=0  # harmless on CPU; required for NCCL on H200 nodes
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tokens_of() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['tokens'])" "$1"; }
gen() {  # gen <np|0> <out.json> args...: np 0 = a plain process without mpirun
  local np=$1 out=$2; shift 2
  if [[ $np == 0 ]]; then "$bin" generate --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  else "${mpi[@]}" -np "$np" "$bin" generate --tp "$np" --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || {
    cat "$tmp/err"; exit 1; }
  fi
}
same() {  # same <label> <a.json> <b.json>
  local a b; a=$(tokens_of "$2"); b=$(tokens_of "$3")
  [[ "$a" == "$b" ]] || { echo "FAIL $1: tokens differ"; echo " $a"; echo " $b"; exit 1; }
  echo "$1: identical"
}

fx="$fixtures/hf/mha_f32"  # 4 heads, 4 KV heads, intermediate 128: TP 1, 2, 4
common=(--target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 40)
gen 0 "$tmp/ar.json" "${common[@]}"
for np in 1 2 4; do
  gen "$np" "$tmp/ar$np.json" "${common[@]}"
  same "mha_f32 ar, TP $np vs one process" "$tmp/ar.json" "$tmp/ar$np.json"
  gen "$np" "$tmp/tri$np.json" "${common[@]}" --method triforce --draft layerskip:1 --budget 64 --chunk-size 8 \
    --reretrieve every:16
  same "mha_f32 triforce, TP $np vs ar" "$tmp/ar.json" "$tmp/tri$np.json"
  gen "$np" "$tmp/spec$np.json" "${common[@]}" --method spec --draft ngram:2
  same "mha_f32 spec ngram:2, TP $np vs ar" "$tmp/ar.json" "$tmp/spec$np.json"
  "${mpi[@]}" -np "$np" "$bin" logits --model "$fx" --tokens-file "$fx/prompt.npy" --out "$tmp/l$np.npy" >/dev/null
done
# Sampling (T = 0.8): every rank holds the same all-gathered logits and draws the same Philox numbers,
# so the job finishes in lockstep; the tokens equal one process's (the logits differ by ~1e-6).
gen 0 "$tmp/t1.json" "${common[@]}" --method triforce --draft layerskip:1 --budget 64 --temperature 0.8 --seed 3
gen 2 "$tmp/t2.json" "${common[@]}" --method triforce --draft layerskip:1 --budget 64 --temperature 0.8 --seed 3
same "mha_f32 triforce T=0.8, TP 2 vs one process" "$tmp/t1.json" "$tmp/t2.json"
# The draft and middle levels take the same path at every TP size, not only the output.
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
lv = [json.loads(open(f"{t}/tri{n}.json").read().splitlines()[-1])["levels"] for n in (1, 2, 4)]
key = [[(l["drafted"], l["accepted"], l["steps"]) for l in x] for x in lv]
assert key[0] == key[1] == key[2], key
print("mha_f32 triforce: per-level drafted/accepted/steps identical at TP 1, 2, 4:", key[0])
PY
"$bin" logits --model "$fx" --tokens-file "$fx/prompt.npy" --out "$tmp/l.npy" >/dev/null
python3 - "$tmp" <<'PY'
import sys
import numpy as np
t = sys.argv[1]
ref = np.load(f"{t}/l.npy")
for n in (1, 2, 4):
    d = np.abs(np.load(f"{t}/l{n}.npy") - ref).max() / max(1.0, np.abs(ref).max())
    assert d <= 1e-5, f"TP {n}: logits differ by {d:.2e} (relative to the largest logit)"
    print(f"mha_f32 logits, TP {n}: max difference {d:.2e} of the largest logit")
PY

fx="$fixtures/hf/gqa_f32"  # 6 heads, 2 KV heads: TP 2 divides, TP 4 must be refused
common=(--target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 40)
gen 0 "$tmp/gar.json" "${common[@]}"
gen 2 "$tmp/gtri.json" "${common[@]}" --method triforce --draft layerskip:1 --budget 64 --chunk-size 8
same "gqa_f32 triforce, TP 2 vs ar" "$tmp/gar.json" "$tmp/gtri.json"
if timeout 60 "${mpi[@]}" -np 4 "$bin" generate --tp 4 "${common[@]}" >/dev/null 2>"$tmp/err"; then
  echo "FAIL: TP 4 over 2 KV heads was accepted"; exit 1
fi
grep -q -- "--tp 4: .*gqa_f32 has 2 KV heads (6 query heads)" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "gqa_f32 TP 4 refused: $(grep -m1 'triforce: error' "$tmp/err")"
if "$bin" generate --tp 2 "${common[@]}" >/dev/null 2>"$tmp/err"; then echo "FAIL: --tp 2 without mpirun ran"; exit 1; fi
grep -q -- "--tp 2: .*mpirun -np 2" "$tmp/err" && echo "--tp 2 without mpirun refused: $(cat "$tmp/err")"

model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f "$model" ]]; then  # 9 heads, 3 KV heads, intermediate 1536: TP 3
  p="The three most important inventions in history are"
  gen 0 "$tmp/sar.json" --prompt "$p" --max-new-tokens 12
  gen 3 "$tmp/sar3.json" --prompt "$p" --max-new-tokens 12
  same "SmolLM2 ar, TP 3 vs one process" "$tmp/sar.json" "$tmp/sar3.json"
  gen 3 "$tmp/stri3.json" --prompt "$p" --max-new-tokens 12 --method triforce --draft layerskip:24 --budget 8 \
    --chunk-size 4
  same "SmolLM2 triforce, TP 3 vs ar" "$tmp/sar.json" "$tmp/stri3.json"
fi
