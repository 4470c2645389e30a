#!/usr/bin/env bash
# experiments/science/floor_model.py (the measured speculative runs re-costed at the HBM floor) on a run whose
# floor cost is worked out by hand, and its one-line refusal of a file that is not an eval JSON.
#   tests/cli/test_floor_model.sh TRIFORCE_BIN FIXTURES
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$root/experiments/science/floor_model.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
# spec at 4096: 57 verifications of the target, 228 draft steps, 57 x 2.245614 = 128 tokens. Floors at 4.22 TB/s:
# ar = (268,959,744 B of weights + 4096 x 23,040 B of K/V) / 4.22e12 = 86.10 us; the draft (full cache)
# = (33,030,144 + 4096 x 1,536) / 4.22e12 = 9.32 us; 128 x 86.10 / (57 x 86.10 + 228 x 9.32) = 1.57.
cat >"$tmp/eval.json" <<'JSON'
{"runs": [{"method": "spec", "temperature": 0.0, "prompt": "p", "context": 4096,
  "chain": "model:d > target", "decode_ms_per_token": 0.5, "ar_decode_ms_per_token": 0.8,
  "levels": [{"level": 1, "spec": "target", "gamma": 4, "steps": 57, "drafted": 228, "tau": 2.245614035087719}]}]}
JSON
out=$(python3 "$script" "$tmp/eval.json") || { echo "FAIL: exit $?"; fail=1; }
row=$(grep '^| spec | p | 4096 |' <<<"$out")
if [[ $row == *"| 86 |"* && $row == *"draft 9 µs"* && $row == *"| 1.60× | 1.57× |" ]]; then echo "ok: $row"
else echo "FAIL: row '$row'"; echo "$out"; fail=1; fi
# A JSON without runs, and a draft folder without the target's geometry: one line each, non-zero.
echo '{"rows": []}' >"$tmp/bad.json"
err=$(python3 "$script" "$tmp/bad.json" 2>&1); rc=$?
if [[ $rc -ne 0 && $(wc -l <<<"$err") -eq 1 && $err == "floor_model: $tmp/bad.json: expected an eval JSON"* ]]; then
  echo "ok: $err"; else echo "FAIL: rc=$rc '$err'"; fail=1; fi
mkdir -p "$tmp/d" && echo '{"hidden_size": 8}' >"$tmp/d/config.json"
err=$(python3 "$script" "$tmp/eval.json" --draft "$tmp/d" 2>&1); rc=$?
if [[ $rc -ne 0 && $(wc -l <<<"$err") -eq 1 && $err == *"no triforce_shared_embedding.target geometry"* ]]; then
  echo "ok: $err"; else echo "FAIL: rc=$rc '$err'"; fail=1; fi
exit $fail
