#!/usr/bin/env bash
# Tensor parallelism on CPU (MPI allreduce), in both modes: driven (the
# default: rank 0 holds the draft and runs the method, the workers serve its
# target steps) and lockstep (every rank runs the method). Under mpirun -np 1,
# 2 and 4 the greedy tokens equal a single process's, the logits agree to 1e-5
# (relative to the largest logit), and ar, spec and TriForce at T = 0 give the
# same tokens and per-level counts at every TP size and in both modes; every
# method (and a 4-level --chain with a model draft) at TP 2; sampled tokens
# (T = 0.8) equal in one process, driven and lockstep; the per-rank forward
# counters show the draft on rank 0 alone when driven, on every rank in
# lockstep; a TP size that does not divide the KV heads is refused with one
# line; the GQA fixture at TP 2 and SmolLM2 (3 KV heads) at TP 3 and at TP 2
# (KV heads split 2 + 1) match too.
set -eu
bin=$1; fixtures=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
export NCCL_NVLS_ENABLE=0  # harmless on CPU; required for NCCL on H200 nodes
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
last() { tail -n 1 "$1"; }
tokens_of() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['tokens'])" "$1"; }
gen() {  # gen <np|0> <out.json> args...: np 0 = a plain process without mpirun
  local np=$1 out=$2; shift 2
  if [[ $np == 0 ]]; then "$bin" generate --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  else timeout 300 "${mpi[@]}" -np "$np" "$bin" generate --tp "$np" --ignore-eos --json "$@" >"$out" 2>"$tmp/err" || {
    echo "FAIL: mpirun -np $np generate $*"; cat "$tmp/err"; exit 1; }
  fi
}
same() {  # same <label> <a.json> <b.json>
  local a b; a=$(tokens_of "$2"); b=$(tokens_of "$3")
  [[ "$a" == "$b" ]] || { echo "FAIL $1: tokens differ"; echo " $a"; echo " $b"; exit 1; }
  echo "$1: identical"
}
# same_levels <label> <a.json> <b.json>...: tokens, per-level drafted/accepted/steps and token kinds agree.
same_levels() {
  python3 - "$@" <<'PY'
import json, sys
label, files = sys.argv[1], sys.argv[2:]
runs = [json.loads(open(f).read().splitlines()[-1]) for f in files]
key = lambda j: (j["tokens"], [(l["drafted"], l["accepted"], l["steps"]) for l in j["levels"]], j["token_kinds"])
for f, j in zip(files[1:], runs[1:]):
    assert key(j) == key(runs[0]), f"FAIL {label}: {f} differs from {files[0]}:\n {key(j)}\n {key(runs[0])}"
print(f"{label}: tokens, per-level counts and token kinds identical over {len(files)} runs;",
      [(l["drafted"], l["accepted"]) for l in runs[0]["levels"]])
PY
}
# where_drafts <label> <driven|lockstep> <out.json>: which ranks ran something besides the target.
where_drafts() {
  python3 - "$@" <<'PY'
import json, sys
label, mode, f = sys.argv[1:]
tp = json.loads(open(f).read().splitlines()[-1])["tp"]
assert tp["mode"] == mode, tp
allt, tgt = tp["forwarded_tokens"], tp["target_forwarded_tokens"]
assert len(set(tgt)) == 1, f"FAIL {label}: the ranks forwarded different target tokens {tgt}"
if mode == "driven":
    assert allt[0] > tgt[0] and all(a == tgt[0] for a in allt[1:]), f"FAIL {label}: forwarded {allt}, target {tgt}"
    assert len(set(tp["ops"])) == 1, f"FAIL {label}: ops applied {tp['ops']}"
    print(f"{label}: the draft ran on rank 0 alone ({allt[0] - tgt[0]} draft tokens there, none on the "
          f"{len(allt) - 1} workers; {tp['batches']} broadcasts, {tp['bytes']} bytes)")
else:
    assert len(set(allt)) == 1 and allt[0] > tgt[0], f"FAIL {label}: forwarded {allt}, target {tgt}"
    print(f"{label}: every rank ran the draft ({allt[0] - tgt[0]} draft tokens each)")
PY
}

fx="$fixtures/hf/mha_f32"  # 4 heads, 4 KV heads, intermediate 128: TP 1, 2, 4
common=(--target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 40)
tri=(--method triforce --draft layerskip:1 --budget 64 --chunk-size 8 --reretrieve every:16)
gen 0 "$tmp/ar.json" "${common[@]}"
gen 0 "$tmp/tri0.json" "${common[@]}" "${tri[@]}"
gen 0 "$tmp/spec0.json" "${common[@]}" --method spec --draft ngram:2
for np in 1 2 4; do
  gen "$np" "$tmp/ar$np.json" "${common[@]}"
  same "mha_f32 ar, TP $np (driven) vs one process" "$tmp/ar.json" "$tmp/ar$np.json"
  gen "$np" "$tmp/tri$np.json" "${common[@]}" "${tri[@]}"
  same "mha_f32 triforce, TP $np (driven) vs ar" "$tmp/ar.json" "$tmp/tri$np.json"
  gen "$np" "$tmp/spec$np.json" "${common[@]}" --method spec --draft ngram:2
  same "mha_f32 spec ngram:2, TP $np (driven) vs ar" "$tmp/ar.json" "$tmp/spec$np.json"
  "${mpi[@]}" -np "$np" "$bin" logits --model "$fx" --tokens-file "$fx/prompt.npy" --out "$tmp/l$np.npy" >/dev/null
done
for np in 2 4; do
  gen "$np" "$tmp/arl$np.json" "${common[@]}" --tp-mode lockstep
  same "mha_f32 ar, TP $np (lockstep) vs one process" "$tmp/ar.json" "$tmp/arl$np.json"
  gen "$np" "$tmp/tril$np.json" "${common[@]}" "${tri[@]}" --tp-mode lockstep
  gen "$np" "$tmp/specl$np.json" "${common[@]}" --method spec --draft ngram:2 --tp-mode lockstep
done
# The draft and middle levels take the same path at every TP size and in both modes, not only the output.
same_levels "mha_f32 triforce T=0: one process, driven TP 1/2/4, lockstep TP 2/4" "$tmp/tri0.json" \
  "$tmp/tri1.json" "$tmp/tri2.json" "$tmp/tri4.json" "$tmp/tril2.json" "$tmp/tril4.json"
same_levels "mha_f32 spec ngram:2 T=0: one process, driven TP 1/2/4, lockstep TP 2/4" "$tmp/spec0.json" \
  "$tmp/spec1.json" "$tmp/spec2.json" "$tmp/spec4.json" "$tmp/specl2.json" "$tmp/specl4.json"
where_drafts "mha_f32 triforce driven TP 2" driven "$tmp/tri2.json"
where_drafts "mha_f32 triforce driven TP 4" driven "$tmp/tri4.json"
where_drafts "mha_f32 triforce lockstep TP 4" lockstep "$tmp/tril4.json"

# Every other method at TP 2, driven, against one process (tokens = ar's at T = 0, and the same counts).
k=0
for m in "--method retrieval --budget 32 --reretrieve every:8" \
         "--method streaming-hier --draft layerskip:1 --budget 32" \
         "--method ngram-triforce --budget 32 --reretrieve below:0.5" \
         "--method spec --draft $fixtures/hf/mqa_f32" \
         "--chain ngram:2>layerskip:1@streaming:4/16>target@retrieval:32/8>target --reretrieve every:8" \
         "--chain target@retrieval:32/8>target@streaming:4/24>model:$fixtures/hf/mqa_f32@full>target"; do
  k=$((k + 1))
  read -r -a extra <<<"$m"
  gen 0 "$tmp/m$k.json" "${common[@]}" "${extra[@]}"
  gen 2 "$tmp/m${k}d.json" "${common[@]}" "${extra[@]}"
  same "mha_f32 $m, one process vs ar" "$tmp/ar.json" "$tmp/m$k.json"
  same_levels "mha_f32 $m, driven TP 2 vs one process" "$tmp/m$k.json" "$tmp/m${k}d.json"
done
where_drafts "mha_f32 spec with a model draft, driven TP 2" driven "$tmp/m4d.json"

# Sampling (T = 0.8): every rank holds the same all-gathered logits and rank 0 (driven) or every rank
# (lockstep) draws the same Philox numbers; the tokens equal one process's (the logits differ by ~1e-6).
samp=("${common[@]}" "${tri[@]}" --temperature 0.8 --top-p 0.95 --seed 3)
gen 0 "$tmp/t0.json" "${samp[@]}"
gen 2 "$tmp/t2.json" "${samp[@]}"
gen 2 "$tmp/tl2.json" "${samp[@]}" --tp-mode lockstep
gen 4 "$tmp/t4.json" "${samp[@]}"
same_levels "mha_f32 triforce T=0.8: one process, driven TP 2/4, lockstep TP 2" "$tmp/t0.json" "$tmp/t2.json" \
  "$tmp/t4.json" "$tmp/tl2.json"
gen 0 "$tmp/ta0.json" "${common[@]}" --temperature 0.8 --seed 5
gen 2 "$tmp/ta2.json" "${common[@]}" --temperature 0.8 --seed 5
same "mha_f32 ar T=0.8, driven TP 2 vs one process" "$tmp/ta0.json" "$tmp/ta2.json"

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
same "gqa_f32 triforce, TP 2 (driven) vs ar" "$tmp/gar.json" "$tmp/gtri.json"
gen 2 "$tmp/gtril.json" "${common[@]}" --method triforce --draft layerskip:1 --budget 64 --chunk-size 8 \
  --tp-mode lockstep
same_levels "gqa_f32 triforce, TP 2 driven vs lockstep" "$tmp/gtri.json" "$tmp/gtril.json"
if timeout 60 "${mpi[@]}" -np 4 "$bin" generate --tp 4 "${common[@]}" >/dev/null 2>"$tmp/err"; then
  echo "FAIL: TP 4 over 2 KV heads was accepted"; exit 1
fi
grep -q -- "--tp 4: .*gqa_f32 has 2 KV heads (6 query heads)" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "gqa_f32 TP 4 refused: $(grep -m1 'triforce: error' "$tmp/err")"
if "$bin" generate --tp 2 "${common[@]}" >/dev/null 2>"$tmp/err"; then echo "FAIL: --tp 2 without mpirun ran"; exit 1; fi
grep -q -- "--tp 2: .*mpirun -np 2" "$tmp/err" && echo "--tp 2 without mpirun refused: $(cat "$tmp/err")"
if "$bin" generate --tp-mode sideways "${common[@]}" >/dev/null 2>"$tmp/err"; then echo "FAIL: --tp-mode sideways ran"; exit 1; fi
grep -q -- "--tp-mode sideways: expected driven" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "bad --tp-mode refused: $(cat "$tmp/err")"

model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f "$model" ]]; then  # 9 heads, 3 KV heads, intermediate 1536: TP 3
  p="The three most important inventions in history are"
  st=(--prompt "$p" --max-new-tokens 12 --method triforce --draft layerskip:24 --budget 8 --chunk-size 4)
  gen 0 "$tmp/sar.json" --prompt "$p" --max-new-tokens 12
  gen 3 "$tmp/sar3.json" --prompt "$p" --max-new-tokens 12
  same "SmolLM2 ar, TP 3 (driven) vs one process" "$tmp/sar.json" "$tmp/sar3.json"
  gen 0 "$tmp/stri.json" "${st[@]}"
  gen 3 "$tmp/stri3.json" "${st[@]}"
  gen 3 "$tmp/stril3.json" "${st[@]}" --tp-mode lockstep
  same "SmolLM2 triforce, TP 3 (driven) vs ar" "$tmp/sar.json" "$tmp/stri3.json"
  same_levels "SmolLM2 triforce: one process, TP 3 driven and lockstep" "$tmp/stri.json" "$tmp/stri3.json" \
    "$tmp/stril3.json"
  where_drafts "SmolLM2 triforce driven TP 3" driven "$tmp/stri3.json"
  # TP 2 splits the 3 KV heads 2 + 1 (and their query groups 6 + 3)
  gen 2 "$tmp/sar2.json" --prompt "$p" --max-new-tokens 12
  same "SmolLM2 ar, TP 2 (uneven heads) vs one process" "$tmp/sar.json" "$tmp/sar2.json"
  gen 2 "$tmp/stri2.json" "${st[@]}"
  same "SmolLM2 triforce, TP 2 (uneven heads) vs ar" "$tmp/sar.json" "$tmp/stri2.json"
fi
