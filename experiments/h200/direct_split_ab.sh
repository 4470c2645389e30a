#!/usr/bin/env bash
# Issue 17: what the one-split attention that writes its own rows (StepFusions::direct_single_split,
# TRIFORCE_DIRECT_SINGLE_SPLIT) saves. A cache of at most 512 slots (the split size) has one attention split a layer,
# so that split writes the output and the combine launch goes. In one call, on and off:
#  - bench_model_gpu, graphs on, the small models' default launches (mask 25: PDL and both GEMM epilogues) at
#    256 and 6478 slots (SmolLM2 shape; 6478 is the control: 13 splits, the combine stays) and the 68M draft's
#    250-slot window, steps and verifications; REPS repetitions (5), medians printed;
#  - ncu, one eager SmolLM2-shape step at 256 slots, microseconds per kernel (the issue's per-kernel table);
#  - generate --method ar on the SmolLM2 shape at a 13- and a 6478-token prompt (step_ab.sh, CONFIGS default|no_direct).
#   bash experiments/h200/direct_split_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
reps=${REPS:-5}
mkdir -p "$out"
filter='BM_(Step135M|DraftStep68M)/[0-9]+/1/25/|BM_(Verify135M|DraftVerify68M)/[0-9]+/1/[35]/25/'
for d in 1 0; do
  TRIFORCE_DIRECT_SINGLE_SPLIT=$d timeout 200 "$build/tests/bench_model_gpu" --benchmark_filter="$filter" \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/bench_direct$d.json" >"$out/bench_direct$d.log" 2>&1 ||
    echo "direct_split_ab: the bench with direct=$d failed (see $out/bench_direct$d.log)"
done
python3 - "$out" <<'PY'
import json, os, sys
rows = {}
for d in ("1", "0"):
    f = os.path.join(sys.argv[1], f"bench_direct{d}.json")
    if not os.path.exists(f):
        continue
    for b in json.load(open(f))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            rows.setdefault(b["run_name"], {})[d] = b["real_time"]
for name, v in sorted(rows.items()):
    on, off = v.get("1"), v.get("0")
    ratio = f"{on / off:.3f}" if on and off else "-"
    print(f"direct_split_ab {name:40s} combine {off if off else float('nan'):8.1f} direct {on if on else float('nan'):8.1f} us  direct/combine {ratio}")
PY
if command -v ncu >/dev/null; then
  for d in 1 0; do
    TRIFORCE_DIRECT_SINGLE_SPLIT=$d TRIFORCE_BENCH_STEPS=1 timeout 120 ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum --csv --page raw "$build/tests/bench_model_gpu" \
      --benchmark_filter='BM_Step135M/256/0/25/' >"$out/ncu_step135m_256_direct$d.csv" 2>&1 ||
      echo "direct_split_ab: ncu with direct=$d failed"
  done
  python3 - "$out" <<'PY'
import csv, collections, os, re, sys
for d in ("1", "0"):
    f = os.path.join(sys.argv[1], f"ncu_step135m_256_direct{d}.csv")
    lines = [l for l in open(f) if l.startswith('"')]
    if not lines:
        print(f"direct_split_ab ncu direct={d}: no rows"); continue
    rows = list(csv.DictReader(lines))
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in rows[1:]:  # the first row after the header holds the units
        name = re.sub(r"\(.*", "", r.get("Kernel Name", "?")).replace("void ", "").split("<")[0].split("::")[-1]
        try:
            t = float(r["gpu__time_duration.sum"].replace(",", ""))  # ncu prints thousands separators
        except (KeyError, ValueError):
            continue
        agg[name][0] += 1
        agg[name][1] += t / 1000.0  # ns -> us
    total = sum(v[1] for v in agg.values())
    print(f"direct_split_ab ncu direct={d}: {sum(v[0] for v in agg.values())} launches, {total:.1f} us")
    for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"direct_split_ab ncu direct={d}   {k:40s} {n:4d} x {t / n:6.2f} = {t:7.1f} us")
PY
fi
CONFIGS='default|no_direct' REPS=3 bash "$(dirname "$0")/step_ab.sh" "$build" "$out/step" | grep "^step_ab"
