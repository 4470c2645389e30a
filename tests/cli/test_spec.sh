#!/usr/bin/env bash
# Greedy speculative output through the CLI is identical to --method ar, for
# every method and drafter and a 4-level --chain, on a tiny fixture (128
# tokens) and on SmolLM2-135M; every --json line carries phase times and
# ms/token; bad chain specs and gammas are refused with one line naming the option.
set -eu
bin=$1; fixtures=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { "$bin" generate --ignore-eos --json "$@" 2>/dev/null | tail -n1; }
same_tokens() {  # same_tokens <label> <a.json> <b.json>
  python3 - "$@" <<'PY'
import json, sys
label, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert a["tokens"] == b["tokens"], f"{label}: speculative tokens differ from ar\n{a['tokens']}\n{b['tokens']}"
lv = b["levels"][0]
assert lv["drafted"] > 0 and 0 <= lv["alpha"] <= 1 and lv["tau"] >= 1, lv
print(f"{label}: identical to ar, alpha {lv['alpha']:.3f} tau {lv['tau']:.2f}")
PY
}
fx="$fixtures/hf/gqa_f32"
run --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 128 >"$tmp/ar.json"
for d in layerskip:1 ngram:2 ngram:4 "$fixtures/hf/mha_f32"; do
  [[ "$d" == */* ]] && { "$bin" info --model "$d" | grep -q "vocab: 256" || continue; }
  run --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 128 --method spec --draft "$d" --gamma1 3 >"$tmp/s.json" || {
    # A draft of another hidden size is fine; one of another vocabulary must be refused (checked below).
    echo "spec --draft $d failed"; exit 1; }
  same_tokens "gqa_f32 --draft $(basename "$d")" "$tmp/ar.json" "$tmp/s.json"
done
# Hierarchical: draft (StreamingLLM) -> target + retrieval cache -> full target.
for m in "triforce --draft layerskip:1 --sink 4 --window 32" "ngram-triforce" "triforce --draft layerskip:1 --gamma1 1 --gamma2 4"; do
  run --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 128 --budget 64 --chunk-size 8 --method $m >"$tmp/s.json"
  same_tokens "gqa_f32 --method $m" "$tmp/ar.json" "$tmp/s.json"
done
# The other hierarchies and a 4-level chain with per-level gammas.
for m in "retrieval" "streaming-hier --draft layerskip:1 --sink 4 --window 16" "chain --chain ngram:2>layerskip:1@streaming:4/16>target@retrieval:32/8>target --gammas 2,3,4"; do
  run --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 128 --budget 64 --chunk-size 8 --method $m >"$tmp/s.json"
  same_tokens "gqa_f32 --method $m" "$tmp/ar.json" "$tmp/s.json"
done
python3 - "$tmp/ar.json" "$tmp/s.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    j = json.load(open(f))
    t = j["times_ms"]
    for k in ("prefill", "setup", "retrieval_build", "draft_prefill", "draft", "middle", "verify", "retrieval_rebuild", "decode", "total"):
        assert k in t and t[k] >= 0, (f, k, t)
    assert t["decode"] > 0 and j["decode_ms_per_token"] > 0 and j["e2e_ms_per_token"] >= j["decode_ms_per_token"], j
    assert abs(t["total"] - (t["prefill"] + t["setup"] + t["retrieval_build"] + t["draft_prefill"] + t["decode"])) < 1e-6 * max(1, t["total"]), t
    # The chain's bottom is layerskip:1@streaming: it absorbed the prompt in its own phase.
    assert (t["draft_prefill"] > 0) == ("@streaming" in j.get("chain", "").split(">")[0]), (f, t)
    if j["method"] != "ar":
        assert len(j["levels"]) == 3 and len(j["steps"]) == j["levels"][-1]["steps"], j["levels"]
        assert sum(s["generated"] for s in j["steps"]) == j["n_generated"]
print("phase times and ms/token in --json: ok")
PY
# --compare runs a second method on the same prefill and checks the tokens.
"$bin" generate --ignore-eos --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 32 --method triforce \
  --draft layerskip:1 --compare ar --json >"$tmp/c.out" 2>"$tmp/c.err"
grep -q "identical tokens: yes (32 of 32 agree)" "$tmp/c.out"
grep -q "decode speedup of triforce over ar" "$tmp/c.err"
tail -n1 "$tmp/c.out" | python3 -c "import json,sys; j=json.load(sys.stdin); assert j['identical_to_compare'] and j['compare']['method']=='ar'"
echo "--compare ar: ok"
# Bad specs: one line naming the option, non-zero exit.
refused() {  # refused <needle> <args...>
  local needle=$1; shift
  if "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 "$@" 2>"$tmp/err" >/dev/null; then
    echo "FAIL: accepted $*"; exit 1
  fi
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || { echo "FAIL: more than one line for $*"; cat "$tmp/err"; exit 1; }
  grep -q -- "$needle" "$tmp/err" || { echo "FAIL: '$needle' not in: $(cat "$tmp/err")"; exit 1; }
}
refused "--chain" --chain "ngram:2 > target@retrieval"
refused "--chain" --chain "bogus:1 > target"
refused "--chain" --chain "target > ngram:2"
refused "--gammas" --chain "ngram:2 > target" --gammas 2,6
refused "--gammas" --method triforce --gammas 2,x
refused "--gamma2" --method spec --gamma2 3
refused "--method" --method fastest
refused "--budget" --method triforce --budget 12 --chunk-size 8
echo "bad chains and gammas refused"
# synthetic:NAME drafts wherever a checkpoint goes (seeded apart from a synthetic target of the
# same shape): --draft and a model: level of --chain, on a synthetic:llama-68m target.
python3 -c "import random; random.seed(3); print('\n'.join(str(random.randrange(3, 32000)) for _ in range(160)))" >"$tmp/syn.txt"
syn() { run --target synthetic:llama-68m --prompt-tokens "$tmp/syn.txt" --max-new-tokens 12 "$@"; }
syn >"$tmp/syn_ar.json"
syn --method triforce --draft synthetic:llama-68m --sink 4 --window 32 --budget 64 >"$tmp/syn_tf.json"
same_tokens "synthetic:llama-68m triforce --draft synthetic:llama-68m" "$tmp/syn_ar.json" "$tmp/syn_tf.json"
python3 -c "import json; t=json.load(open('$tmp/syn_tf.json'))['times_ms']; assert t['draft_prefill'] > 0, t"
# graph_steps: the target, then the draft model by its level spec; CPU models record no graphs.
python3 - "$tmp/syn_tf.json" "$tmp/syn_ar.json" <<'PY'
import json, sys
tf, ar = (json.load(open(f))["graph_steps"] for f in sys.argv[1:])
assert [g["model"] for g in tf] == ["target", "model:synthetic:llama-68m@streaming:4/32"], tf
assert [g["model"] for g in ar] == ["target"], ar
for g in tf + ar:
    assert g["captures"] == g["replays"] == g["eager"] == g["attention_split_slots"] == 0, g
PY
syn --chain "model:synthetic:llama-68m@streaming:4/32 > target@retrieval:64/8 > target" >"$tmp/syn_ch.json"
same_tokens "synthetic:llama-68m --chain model:synthetic:llama-68m@streaming" "$tmp/syn_ar.json" "$tmp/syn_ch.json"
refused "--draft synthetic:llama-68m: vocabulary of 32000 tokens" --method spec --draft synthetic:llama-68m
refused "--draft synthetic:nope: unknown synthetic model" --method spec --draft synthetic:nope
echo "synthetic drafts: ok"
# Re-retrieval changes only the middle level's proposals: still identical to ar.
for rr in every:16 below:0.9; do
  run --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 128 --budget 64 --chunk-size 8 \
    --method triforce --draft layerskip:1 --reretrieve $rr >"$tmp/s.json"
  same_tokens "gqa_f32 --reretrieve $rr" "$tmp/ar.json" "$tmp/s.json"
  python3 -c "import json; j=json.load(open('$tmp/s.json')); assert j['retrieval_rebuilds'] > 0, j['retrieval_rebuilds']; print('  rebuilds:', j['retrieval_rebuilds'])"
done
if "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 --method triforce --reretrieve often 2>"$tmp/err"; then
  echo "FAIL: --reretrieve often was accepted"; exit 1
fi
grep -q -- "--reretrieve often" "$tmp/err"
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f "$model" ]]; then
  p="The three most important inventions in history are"
  if "$bin" generate --prompt "Hi" --max-new-tokens 2 --method triforce --draft synthetic:llama-68m 2>"$tmp/err" >/dev/null; then
    echo "FAIL: a synthetic:llama-68m draft for SmolLM2 was accepted"; exit 1
  fi
  [[ $(wc -l <"$tmp/err") -eq 1 ]] && grep -q -- "--draft synthetic:llama-68m: vocabulary of 32000 tokens, the target has 49152" "$tmp/err"
  run --prompt "$p" --max-new-tokens 48 >"$tmp/ar2.json"
  for d in ngram:3 layerskip:24; do
    run --prompt "$p" --max-new-tokens 48 --method spec --draft "$d" >"$tmp/s2.json"
    same_tokens "SmolLM2 --draft $d" "$tmp/ar2.json" "$tmp/s2.json"
  done
  for m in "triforce --draft layerskip:24" ngram-triforce retrieval "streaming-hier --draft layerskip:24 --window 8"; do
    run --prompt "$p" --max-new-tokens 48 --budget 8 --chunk-size 4 --method $m >"$tmp/s2.json"
    same_tokens "SmolLM2 --method $m" "$tmp/ar2.json" "$tmp/s2.json"
  done
  # A draft whose vocabulary differs from the target's is refused with one line.
  if "$bin" generate --prompt hi --max-new-tokens 2 --method spec --draft "$fx" 2>"$tmp/err"; then
    echo "FAIL: a 256-token draft was accepted for a 49152-token target"; exit 1
  fi
  grep -q "vocabulary" "$tmp/err" && echo "vocab mismatch refused: $(cat "$tmp/err")"
fi
