#!/usr/bin/env bash
# Issue 17 (a real run's step time against its benchmark) and issue 20 (speedup on real weights): the step-graph
# warm-up (TRIFORCE_WARM_STEP_GRAPHS=1, ChainOptions::warm_step_graphs: each level's step sizes recorded before
# the first step, the time counted in setup) against the default lazy recording (a key's first use eager, its
# second recorded, inside the decode). spec and triforce with the default model's trained draft at T = 0 on
# held-out book windows of CONTEXT tokens, --compare ar in the same process (ar warms its one step shape too),
# arms interleaved, REPS runs each. One JSON line per run (tokens identical to ar, decode ms/token of both,
# graph_warmup ms, and each model's decode captures / replays / eager steps) in OUT/warm_ab.jsonl; medians printed.
#   bash experiments/h200/warm_ab.sh BIN OUT MODEL PROMPTS_DIR   (REPS, CONTEXT, NEW; DEVICE=cpu for a smoke run)
set -uo pipefail
bin=$1 out=$2 model=$3 prompts=$4
reps=${REPS:-2} context=${CONTEXT:-4096} new=${NEW:-128} device=${DEVICE:-cuda}
mkdir -p "$out"
: >"$out/warm_ab.jsonl"
# Held-out windows, as experiments/draft/eval_draft.sh makes them: the first CONTEXT tokens of the held-out part
# (heldout.py) of the first two books.
mapfile -t books < <(ls "$prompts"/*.txt | sort | head -n 2)
names=()
for f in "${books[@]}"; do
  b=$(basename "$f" .txt)
  python3 experiments/draft/heldout.py "$f" "$out/$b.heldout.txt" &&
    "$bin" tokenize --model "$model" --text-file "$out/$b.heldout.txt" --out "$out/$b.ids" >/dev/null ||
    { echo "warm_ab: cannot make the held-out prompt of $f"; exit 1; }
  [[ $(wc -l <"$out/$b.ids") -ge $context ]] || { echo "warm_ab: $b: held-out part shorter than $context tokens"; continue; }
  head -n "$context" "$out/$b.ids" >"$out/$b-$context.ids"
  names+=("$b")
done
for r in $(seq "$reps"); do
  for w in 0 1; do
    for m in spec triforce; do
      for b in "${names[@]}"; do
        TRIFORCE_WARM_STEP_GRAPHS=$w "$bin" generate --device "$device" --target "$model" --method "$m" \
          --prompt-tokens "$out/$b-$context.ids" --max-new-tokens "$new" --ignore-eos --compare ar --json 2>/dev/null |
          tail -n 1 | python3 -c "
import json, sys
d = json.load(sys.stdin); c = d['compare']
print(json.dumps({'warm': $w, 'method': '$m', 'book': '$b', 'rep': $r, 'identical_to_ar': d['tokens'] == c['tokens'],
  'decode_ms_per_token': d['decode_ms_per_token'], 'ar_decode_ms_per_token': c['decode_ms_per_token'],
  'graph_warmup_ms': d['times_ms']['graph_warmup'], 'ar_graph_warmup_ms': c['times_ms']['graph_warmup'],
  'levels_ms_per_step': [l['ms'] / max(1, l['steps']) for l in d['levels']],
  'graph_steps': d['graph_steps'], 'ar_graph_steps': c['graph_steps']}))" | tee -a "$out/warm_ab.jsonl" | cut -c1-160
      done
    done
  done
done
python3 - "$out/warm_ab.jsonl" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
g = collections.defaultdict(list)
for r in rows:
    g[(r['method'], r['book'], r['warm'])].append(r)
for (m, b, w), v in sorted(g.items()):
    sp = statistics.median(r['ar_decode_ms_per_token'] / r['decode_ms_per_token'] for r in v)
    print(f"warm_ab {m:8s} {b:18s} warm={w}: {statistics.median(r['decode_ms_per_token'] for r in v):.3f} ms/token, "
          f"ar {statistics.median(r['ar_decode_ms_per_token'] for r in v):.3f}, speedup {sp:.2f}x, "
          f"identical {all(r['identical_to_ar'] for r in v)}, levels ms/step {[round(x, 3) for x in v[0]['levels_ms_per_step']]}")
PY
