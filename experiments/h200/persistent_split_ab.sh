#!/usr/bin/env bash
# Issue 17: the persistent step's attention phase against the split size. At 256 slots the default 512-slot split
# gives each of SmolLM2's 3 KV heads one block that walks the whole cache (about 11 us a layer, persistent.md);
# smaller splits spread it over more blocks at the price of a combine. No code changes: TRIFORCE_ATTN_SPLIT_SLOTS
# sets the model's split, which the persistent kernel takes. Per split: BM_Phases135M (eager, phase profile) and
# BM_Step135M eager (the persistent step: TRIFORCE_PERSISTENT_STEP=1) and graphs (the per-op step, which the
# persistent one does not replace under graphs), mask 25 (the small models' defaults), medians of REPS (3).
#   bash experiments/h200/persistent_split_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
reps=${REPS:-3}
splits=${SPLITS:-512 256 128 64}
mkdir -p "$out"
for s in $splits; do
  TRIFORCE_PERSISTENT_STEP=1 TRIFORCE_ATTN_SPLIT_SLOTS=$s timeout 120 "$build/tests/bench_model_gpu" \
    --benchmark_filter='BM_Phases135M/|BM_Step135M/[0-9]+/[01]/25/' --benchmark_counters_tabular=true \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/split$s.json" >"$out/split$s.log" 2>&1 ||
    echo "persistent_split_ab: split $s failed (see $out/split$s.log)"
done
python3 - "$out" $splits <<'PY'
import json, os, sys
out, splits = sys.argv[1], sys.argv[2:]
for s in splits:
    f = os.path.join(out, f"split{s}.json")
    if not os.path.exists(f):
        continue
    for b in json.load(open(f))["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        ph = " ".join(f"{k[3:]}={v:.0f}" for k, v in b.items() if k.startswith("us_"))
        print(f"persistent_split_ab split={s:>3} {b['run_name']:32s} {b['real_time']:8.1f} us  persistent_used={b.get('persistent_used', '-')} {ph}")
PY
