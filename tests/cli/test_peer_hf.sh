#!/usr/bin/env bash
# experiments/peers/hf_static_compile.py on the CPU with its tiny synthetic shape
# (eager decode; compiling on a 2-core box takes a minute, the H200 run covers it):
# the cached greedy tokens equal a cache-free recompute, prefill chunking does
# not change them, the row's arithmetic (floor, x_floor, e2e), --model PATH, and
# one-line errors. Needs torch + transformers: TRIFORCE_PEER_PYTHON, else the
# repository's .venv (experiments/peers/README.md), else python3; without them
# it is skipped (exit 77), as in CI.
set -eu
cd "$(dirname "$0")/../.."
fixtures=${2:-tests/fixtures}
py=${TRIFORCE_PEER_PYTHON:-}
[[ -z $py && -x .venv/bin/python ]] && py=.venv/bin/python
py=${py:-python3}
if ! "$py" -c "import torch, transformers" 2>/dev/null; then
  echo "torch + transformers not importable by $py: skipped"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
peer=experiments/peers/hf_static_compile.py
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {
  local want=$1; shift
  if "$py" $peer "$@" 2>"$tmp/err" >/dev/null; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/err" || fail "expected '$want' from: $*; got: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "not one line: $(cat "$tmp/err")"
}
export OMP_NUM_THREADS=1  # seconds on a shared 2-core box; two threads fight the other tests

common=(--model synthetic:tiny --device cpu --dtype f32 --no-compile --new-tokens 12 --warmup 2)
# 300 prompt tokens in 64-token chunks (the last one partial), checked against a cache-free recompute.
"$py" $peer "${common[@]}" --prompt-len 300 --prefill-chunk 64 --check-tokens --label t \
  --out "$tmp/rows.jsonl" >"$tmp/out.jsonl" 2>"$tmp/log"
# The same in one prefill piece.
"$py" $peer "${common[@]}" --prompt-len 300 --prefill-chunk 4096 --out "$tmp/rows.jsonl" >/dev/null 2>>"$tmp/log"
"$py" - "$tmp/rows.jsonl" "$tmp/out.jsonl" <<'PY' || fail "rows: $(cat "$tmp/log")"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [json.loads(l) for l in open(sys.argv[2])] == rows[:1], "stdout and --out differ"
assert len(rows) == 2, len(rows)
a, b = rows
for r in rows:
    assert r["schema"] == "triforce-peer" and r["method"] == "hf-static-eager" and not r["compiled"]
    assert r["context"] == 300 and r["new_tokens"] == 12 and r["model"] == "synthetic:tiny"
    assert len(r["tokens"]) == 12 and len(r["step_ms"]) == 12 and all(t >= 0 for t in r["step_ms"])
    assert r["max_cache_len"] >= 312 and r["max_cache_len"] % 16 == 0
    assert math.isclose(r["decode_ms"], sum(r["step_ms"]), rel_tol=1e-3)
    assert math.isclose(r["e2e_ms"], r["prefill_ms"] + r["decode_ms"], rel_tol=1e-9)
    # floor: weights (h=64, i=160, L=2, vocab 512, untied: 182,400 params) + the mean KV of
    # steps ending at 300..311 tokens (2 layers x 2 KV heads x 16 x K,V), f32, at 4.22 TB/s.
    weights = 4 * (2 * 512 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 160 + 2 * 64) + 64)
    assert r["weight_bytes"] == weights, r["weight_bytes"]
    kv = 2 * 2 * 2 * 16 * 4 * (300 + 5.5)
    assert math.isclose(r["floor_ms_per_token"], (weights + kv) / 4.22e12 * 1e3, rel_tol=1e-9)
    assert math.isclose(r["x_floor"], r["decode_ms_per_token"] / r["floor_ms_per_token"], rel_tol=1e-9)
    for k in ["torch", "transformers", "gpu", "command", "git_sha", "peak_rss_gib", "prefill_tokens_per_s"]:
        assert k in r, k
assert a["check_first_mismatch"] == -1, a["check_first_mismatch"]
assert a["label"] == "t" and a["prefill_chunk"] == 64
assert len(set(a["tokens"])) > 3, a["tokens"]  # the tiny model's tokens follow the context
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
print("rows ok:", a["tokens"])
PY
echo "tiny synthetic ok"

# An HF folder: its config with random weights, and its own weights (--real-weights).
for w in "" --real-weights; do
  "$py" $peer --model "$fixtures/hf/gqa_f32" --device cpu --dtype f32 --no-compile --prompt-len 40 \
    --new-tokens 6 --prefill-chunk 16 --check-tokens $w >"$tmp/hf.jsonl" 2>"$tmp/log" || fail "--model PATH $w: $(cat "$tmp/log")"
  grep -q '"check_first_mismatch": -1' "$tmp/hf.jsonl" || fail "--model PATH $w: tokens"
done
echo "--model PATH ok"

expect_error "--prompt-len: 0: expected a positive integer" --model synthetic:tiny --prompt-len 0
expect_error "unknown synthetic model" --model synthetic:nope --prompt-len 8 --device cpu
expect_error "expected synthetic:NAME or a folder holding config.json" --model "$tmp/none" --prompt-len 8 --device cpu
expect_error "max_position_embeddings 4096" --model synthetic:tiny --prompt-len 4090 --new-tokens 8 --device cpu
expect_error "--eager-too: already eager" --model synthetic:tiny --prompt-len 8 --no-compile --eager-too
expect_error "--real-weights: synthetic:tiny has no weights" --model synthetic:tiny --prompt-len 8 --real-weights
expect_error "--device tpu" --model synthetic:tiny --prompt-len 8 --device tpu
if ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  expect_error "torch sees no CUDA device" --model synthetic:tiny --prompt-len 8
fi
echo "errors ok"
