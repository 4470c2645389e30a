#!/usr/bin/env bash
# Issue 17: what each of the persistent step's latency cuts saves, in one call, on one build:
#  - direct: one attention split writes att itself, no partials, counter or combine (TRIFORCE_DIRECT_SINGLE_SPLIT);
#  - kvpf:   each attention task's cached K/V rows asked into L2 at the start of the q/k/v phase
#            (TRIFORCE_PERSISTENT_KV_PREFETCH);
#  - stage:  each block's weight tiles for the next GEMV phase copied into shared memory while the grid runs the
#            current one (TRIFORCE_PERSISTENT_STAGE_WEIGHTS).
# Per configuration: BM_Phases135M (eager, phase profile), BM_Step135M and BM_DraftStep68M eager (the persistent
# step), medians of REPS (3); the first configuration also runs the graph-replayed per-op steps (the peer the
# persistent step must beat). Mask 25: the small models' default launches.
#   bash experiments/h200/persistent_stage_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
reps=${REPS:-3}
configs=${CONFIGS:-none:0:0:0 direct:1:0:0 direct_kvpf:1:1:0 stage:0:0:1 all:1:1:1}
mkdir -p "$out"
first=1
for c in $configs; do
  IFS=: read -r name d k s <<<"$c"
  filter='BM_Phases135M/|BM_Step135M/[0-9]+/0/25/|BM_DraftStep68M/[0-9]+/0/25/'
  [ $first = 1 ] && filter='BM_Phases135M/|BM_Step135M/[0-9]+/[01]/25/|BM_DraftStep68M/[0-9]+/[01]/25/'
  first=0
  TRIFORCE_PERSISTENT_STEP=1 TRIFORCE_DIRECT_SINGLE_SPLIT=$d TRIFORCE_PERSISTENT_KV_PREFETCH=$k \
    TRIFORCE_PERSISTENT_STAGE_WEIGHTS=$s timeout 150 "$build/tests/bench_model_gpu" \
    --benchmark_filter="$filter" --benchmark_counters_tabular=true \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/$name.json" >"$out/$name.log" 2>&1 ||
    echo "persistent_stage_ab: configuration $name failed (see $out/$name.log)"
done
python3 - "$out" $configs <<'PY'
import json, os, sys
out, configs = sys.argv[1], [c.split(":")[0] for c in sys.argv[2:]]
for name in configs:
    f = os.path.join(out, f"{name}.json")
    if not os.path.exists(f):
        continue
    for b in json.load(open(f))["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        ph = " ".join(f"{k[3:]}={v:.0f}" for k, v in b.items() if k.startswith("us_"))
        print(f"persistent_stage_ab {name:12s} {b['run_name']:40s} {b['real_time']:8.1f} us  "
              f"persistent_used={b.get('persistent_used', '-')} {ph}")
PY
