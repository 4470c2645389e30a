#!/usr/bin/env bash
# TRIFORCE_WARM_STEP_GRAPHS=1 (ChainOptions::warm_step_graphs) forwards filler
# tokens at every proposal size of every level, and lets the drafter propose,
# before the first step, then rolls every cache back to the prompt. On the CPU
# there are no graphs to record, but the forwards and rollbacks run, so this
# checks what the warm-up must never change: the tokens, every level's drafted,
# accepted and rejected counts and its per-step records, at T = 0 and at
# T = 0.6, for ar (its one-token step warmed) and every hierarchy (StreamingLLM drafter, retrieval and streaming
# middle levels, a model drafter with its own cache, prompt lookup, a 4-level
# chain); and that its time is reported as times_ms.graph_warmup, counted in
# setup and not in decode. WARM_ARGS adds generate options (tests/gpu/
# test_warm_step_graphs_gpu.sh runs it on CUDA, where the warm-up records the
# graphs: then the decode's captures and eager steps must not exceed those of
# the run without it).
set -eu
bin=$1; fixtures=$2
extra=(${WARM_ARGS:-})
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fx="$fixtures/hf/gqa_f32"
run() { "$bin" generate --ignore-eos --json --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 48 \
  --budget 64 --chunk-size 8 "${extra[@]}" "$@" 2>"$tmp/err" | tail -n1; }
n=0
for t in 0 0.6; do
  for m in "ar" "spec --draft layerskip:1 --gamma1 3" "spec --draft $fixtures/hf/mha_f32 --gamma1 2" \
    "triforce --draft layerskip:1 --sink 4 --window 32" "triforce --draft layerskip:1 --gamma1 1 --gamma2 4" \
    "ngram-triforce" "retrieval" "streaming-hier --draft layerskip:1 --sink 4 --window 16" \
    "chain --chain ngram:2>layerskip:1@streaming:4/16>target@retrieval:32/8>target --gammas 2,3,4"; do
    if [[ $m == *mha_f32* ]] && ! "$bin" info --model "$fixtures/hf/mha_f32" | grep -q "vocab: 256"; then continue; fi
    run --method $m --temperature $t --seed 3 >"$tmp/off.json"
    TRIFORCE_WARM_STEP_GRAPHS=1 run --method $m --temperature $t --seed 3 >"$tmp/on.json"
    python3 - "$tmp/off.json" "$tmp/on.json" "T=$t $m" <<'PY'
import json, sys
off, on, label = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert off["tokens"] == on["tokens"], f"{label}: tokens differ with the warm-up\n{off['tokens']}\n{on['tokens']}"
keys = ("steps", "drafted", "accepted", "rejected", "accepted_hist")
for a, b in zip(off["levels"], on["levels"]):
    assert all(a[k] == b[k] for k in keys), f"{label}: level {a['level']} differs: {a} vs {b}"
strip = lambda st: [(s["generated"], s["drafted"], s["accepted"]) for s in st]
assert strip(off["steps"]) == strip(on["steps"]), f"{label}: per-step records differ"
t0, t1 = off["times_ms"], on["times_ms"]
assert t0["graph_warmup"] == 0 and t1["graph_warmup"] > 0, (label, t0, t1)
assert t1["setup"] >= t1["graph_warmup"], (label, t1)
assert abs(t1["total"] - (t1["prefill"] + t1["setup"] + t1["retrieval_build"] + t1["draft_prefill"] + t1["decode"])) < 1e-6 * max(1, t1["total"]), t1
cold = lambda j: sum(g["captures"] + g["eager"] for g in j["graph_steps"])
assert cold(on) <= cold(off), f"{label}: the decode recorded more graphs with the warm-up: {on['graph_steps']} vs {off['graph_steps']}"
print(f"{label}: same tokens and counts, warm-up {t1['graph_warmup']:.1f} ms, decode captures + eager steps {cold(off)} -> {cold(on)}")
PY
    n=$((n + 1))
  done
done
TRIFORCE_WARM_STEP_GRAPHS=yes "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 \
  --method spec --draft layerskip:1 2>"$tmp/err" && { echo "TRIFORCE_WARM_STEP_GRAPHS=yes was accepted"; exit 1; }
grep -q "TRIFORCE_WARM_STEP_GRAPHS=yes: expected 0 or 1" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "warm step graphs: $n runs unchanged by the warm-up; a bad value refused"
