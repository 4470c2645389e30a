#!/usr/bin/env bash
# --simulate-acceptance through the CLI on the tiny fixture: generate marks the
# run (--json "simulated_acceptance": [A1, A2], false for a real run; the
# SIMULATED line; per-level counts), --compare skips the token-identity check
# with a note, bad rates are refused with one line naming the option; the
# sweep grid key runs simulated points beside real ones, marks their progress
# lines, run attributes and keys, and never compares their tokens with ar.
set -eu
bin=$1; fixtures=$2
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fx="$fixtures/hf/gqa_f32"
gen=("$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --ignore-eos --method triforce --draft layerskip:1)

"${gen[@]}" --max-new-tokens 48 --simulate-acceptance 0.4,0.9 --compare ar --json >"$tmp/sim.out" 2>"$tmp/sim.err"
grep -q "^  \[triforce\] SIMULATED acceptance 0.4/0.9" "$tmp/sim.err" || fail "no SIMULATED line: $(cat "$tmp/sim.err")"
grep -q "SIMULATED at 0.9: " "$tmp/sim.err" || fail "no per-level simulated rate"
grep -q "^identical tokens: not checked: triforce ran with SIMULATED acceptance 0.4/0.9, so its tokens differ from ar's by design" \
  "$tmp/sim.out" || fail "no compare note: $(grep identical "$tmp/sim.out")"
"${gen[@]}" --max-new-tokens 48 --json >"$tmp/real.out" 2>/dev/null
"${gen[@]}" --max-new-tokens 48 --simulate-acceptance 1,1 --json >"$tmp/one.out" 2>/dev/null
"${gen[@]}" --max-new-tokens 48 --simulate-acceptance 0.4,0.9 --json >"$tmp/again.out" 2>/dev/null
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
last = lambda f: json.loads(open(f"{d}/{f}").read().strip().splitlines()[-1])
s, r, one, again = last("sim.out"), last("real.out"), last("one.out"), last("again.out")
assert s["simulated_acceptance"] == [0.4, 0.9], s["simulated_acceptance"]
assert s["identical_to_compare"] is None and s["compare"]["simulated_acceptance"] is False
assert r["simulated_acceptance"] is False
for l in s["levels"]:
    assert l["drafted"] > 0 and l["accepted"] + l["rejected"] > 0 and l["rejected"] <= l["steps"], l
assert s["tokens"] != s["compare"]["tokens"], "simulated tokens equal ar's"
assert again["tokens"] == s["tokens"], "the same seed gave other tokens"
for l in one["levels"]:
    assert l["accepted"] == l["drafted"] and l["rejected"] == 0, l
print("generate: json marker, compare note, seed, rates 1,1: ok")
PY
refused() {  # refused <needle> <args...>: one line naming --simulate-acceptance and needle, non-zero exit
  local needle=$1; shift
  if "$@" 2>"$tmp/err" >/dev/null; then fail "accepted: $*"; fi
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "more than one line for $*: $(cat "$tmp/err")"
  grep -q -- "--simulate-acceptance" "$tmp/err" && grep -q -- "$needle" "$tmp/err" || fail "'$needle' not in: $(cat "$tmp/err")"
}
refused "2 verifying level" "${gen[@]}" --max-new-tokens 4 --simulate-acceptance 0.9
refused "outside \[0, 1\]" "${gen[@]}" --max-new-tokens 4 --simulate-acceptance 0.4,1.5
refused "not a number" "${gen[@]}" --max-new-tokens 4 --simulate-acceptance 0.4,high
refused "method ar" "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 --simulate-acceptance 0.5
refused "1 verifying level" "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 \
  --method spec --draft layerskip:1 --simulate-acceptance 0.5,0.5
echo "generate: bad rates refused"

# Sweep: 2 simulated tuples + a real run of triforce, spec with its own 1-level tuple, ar once.
sw=("$bin" sweep --target "$fx" --prompt-tokens "$fx/prompt.npy" --method triforce,spec --draft layerskip:1
    --context 96 --max-new-tokens 16 --budget 32 --sink 4 --window 24 --temperature 0 --seed 0)
"${sw[@]}" --simulate-acceptance "0.3|0.6/0.9, 0.5, none" --out "$tmp/s.h5" --dry-run >"$tmp/dry.txt"
grep -q "grid: 6 points" "$tmp/dry.txt" || fail "dry-run: $(head -1 "$tmp/dry.txt")"
[[ $(grep -c "SIMULATED acceptance" "$tmp/dry.txt") -eq 3 ]] || fail "dry-run marks: $(cat "$tmp/dry.txt")"
"${sw[@]}" --simulate-acceptance "0.3|0.6/0.9, 0.5, none" --out "$tmp/s.h5" 2>"$tmp/sweep.err"
[[ $(grep -c "SIMULATED acceptance" "$tmp/sweep.err") -eq 3 ]] || fail "progress lines: $(cat "$tmp/sweep.err")"
grep -q "triforce .*SIMULATED acceptance 0.6/0.9" "$tmp/sweep.err" || fail "no 0.6/0.9 progress line"
"${sw[@]}" --simulate-acceptance "0.3|0.6/0.9, 0.5, none" --out "$tmp/s.h5" 2>&1 | grep -q "6 of 6 runs already done" ||
  fail "resume did not find the simulated runs"
if "${sw[@]}" --simulate-acceptance "0.3/0.9" --out "$tmp/e.h5" 2>"$tmp/err"; then
  fail "a grid with no tuple for spec was accepted"
fi
grep -q -- "--simulate-acceptance: no entry has 1 rate(s) for method spec" "$tmp/err" || fail "$(cat "$tmp/err")"
[[ ! -e $tmp/e.h5 ]] || fail "a refused sweep left a file"
if python3 -c "import h5py" 2>/dev/null; then
  python3 - "$tmp/s.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
sims = {}
for name, g in f["runs"].items():
    a = g.attrs
    s = a["simulated_acceptance"]
    s = s.decode() if isinstance(s, bytes) else str(s)
    m = a["method"].decode() if isinstance(a["method"], bytes) else str(a["method"])
    key = a["key"].decode() if isinstance(a["key"], bytes) else str(a["key"])
    sims[(m, s)] = int(a["tokens_equal_ar"])
    assert ("simulate_acceptance=" in key) == bool(s), key
assert sims == {("ar", ""): 1, ("triforce", "0.3/0.9"): -1, ("triforce", "0.6/0.9"): -1, ("triforce", ""): 1,
                ("spec", "0.5"): -1, ("spec", ""): 1}, sims
print("sweep: run attributes and keys ok")
PY
else
  echo "h5py not importable: the attribute check did not run"
fi
if python3 -c "import h5py, matplotlib" 2>/dev/null; then
  python3 experiments/plot.py "$tmp/s.h5" --out "$tmp/plots" >/dev/null
  [[ -s $tmp/plots/simulated_speedup.png ]] || fail "plot.py wrote no simulated_speedup.png"
  echo "plot.py: simulated_speedup.png written"
fi
echo PASS
