#!/usr/bin/env bash
# A/B of T > 0 sampling on the device (speculative/device_sampler.h: the q and p rows stay where the logits are,
# only the decisions come back; TRIFORCE_DEVICE_SAMPLING=1) against the rows copied to the host
# and sampled there (TRIFORCE_DEVICE_SAMPLING=0), on the default model and its trained draft: spec and triforce
# at T = 0.6, top-p 0.9, each with --compare ar (ar samples the same way in the same process), on the held-out
# part of the first BOOKS prompt books at each context, SEEDS seeds, arms interleaved. Prints one JSON line per
# run (OUT/runs.jsonl) and a table of the mean ms/token and speedup over ar per cell (OUT/table.txt).
#   bash experiments/h200/sampled_ab.sh BIN OUT MODEL PROMPTS_DIR [DRAFT_DIR]
#   env: CONTEXTS=4096,7680 BOOKS=2 SEEDS=2 NEW=128 TEMP=0.6 TOP_P=0.9
set -euo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 BIN OUT MODEL PROMPTS_DIR [DRAFT_DIR]" >&2; exit 2; }
bin=$(realpath "$1") out=$2 model=$3 prompts=$4
here=$(cd "$(dirname "$0")/.." && pwd)
draft=${5:-$here/draft/smollm2-135m-draft}
IFS=, read -ra ctxs <<<"${CONTEXTS:-4096,7680}"
books=${BOOKS:-2} seeds=${SEEDS:-2} new=${NEW:-128} temp=${TEMP:-0.6} top_p=${TOP_P:-0.9}
mkdir -p "$out/prompts"
: >"$out/runs.jsonl"
files=()
for b in $(ls "$prompts"/*.txt | sort | head -n "$books"); do
  name=$(basename "$b" .txt)
  python3 "$here/draft/heldout.py" "$b" "$out/prompts/$name.heldout.txt"
  "$bin" tokenize --model "$model" --text-file "$out/prompts/$name.heldout.txt" --out "$out/prompts/$name.ids" >/dev/null
  for n in "${ctxs[@]}"; do
    [[ $(wc -l <"$out/prompts/$name.ids") -ge $n ]] || { echo "sampled_ab: $name has < $n held-out tokens" >&2; continue; }
    head -n "$n" "$out/prompts/$name.ids" >"$out/prompts/$name-$n.ids"
    files+=("$out/prompts/$name-$n.ids")
  done
done
for f in "${files[@]}"; do
  for s in $(seq "$seeds"); do
    for m in spec triforce; do
      for a in 1 0; do
        TRIFORCE_DEVICE_SAMPLING=$a "$bin" generate --device cuda --target "$model" --draft "$draft" --method $m \
          --prompt-tokens "$f" --max-new-tokens "$new" --ignore-eos --temperature "$temp" --top-p "$top_p" \
          --seed "$s" --compare ar --json 2>"$out/last.err" | tail -n 1 |
          python3 -c "
import json, sys
d = json.load(sys.stdin)
lv = d['levels']
print(json.dumps({'device_sampling_env': $a, 'device_sampling': d.get('device_sampling'), 'method': '$m',
  'prompt': '$(basename "$f" .ids)', 'seed': $s, 'n_prompt': d['n_prompt'],
  'decode_ms_per_token': d['decode_ms_per_token'], 'ar_decode_ms_per_token': d['compare']['decode_ms_per_token'],
  'ar_device_sampling': d['compare'].get('device_sampling'),
  'alpha': [l['alpha'] for l in lv], 'tau_top': lv[-1]['tau']}))" | tee -a "$out/runs.jsonl"
      done
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/table.txt"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1] + "/runs.jsonl")]
cells = collections.defaultdict(list)
for r in rows:
    cells[(r["method"], r["prompt"], r["device_sampling_env"])].append(r)
print(f"{'method':9} {'prompt':28} {'rows on':7} {'runs':>4} {'ms/token':>9} {'ar ms/token':>11} {'speedup':>8} {'alpha':>14}")
for (m, p, a), rs in sorted(cells.items()):
    ms = sum(r["decode_ms_per_token"] for r in rs) / len(rs)
    ar = sum(r["ar_decode_ms_per_token"] for r in rs) / len(rs)
    sp = sum(r["ar_decode_ms_per_token"] / r["decode_ms_per_token"] for r in rs) / len(rs)
    al = "/".join(f"{sum(r['alpha'][i] for r in rs) / len(rs):.2f}" for i in range(len(rs[0]["alpha"])))
    print(f"{m:9} {p:28} {'device' if a else 'host':7} {len(rs):>4} {ms:>9.3f} {ar:>11.3f} {sp:>7.2f}x {al:>14}")
PY
