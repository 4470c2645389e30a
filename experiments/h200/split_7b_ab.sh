#!/usr/bin/env bash
# Issue 17, the 7B decode at 8K (target <= 1.12x its floor): which of the fixed costs around the GEMMs pay.
#  - the decode attention's split size (TRIFORCE_ATTN_SPLIT_SLOTS: 512 today; 1024 and 2048 give an 8K cache one
#    wave of split blocks and fewer partials to combine), with the default launches (mask 24: both GEMM
#    epilogues) and with the combine done by the last split block (mask 28);
#  - PDL with the bounded L2 prefetch (mask 25, TRIFORCE_PREFETCH_MIB=auto);
#  - the small models' steps at split 512 and at the per-model rule (auto);
#  - ncu, one eager 7B decode step at 8K, microseconds per kernel (the issue's per-kernel table).
# Graphs on unless the name says eager; medians of REPS (3).
#   bash experiments/h200/split_7b_ab.sh BUILD_DIR OUT [SPLITS]   (SPLITS default "512 1024 2048")
set -uo pipefail
build=$1 out=$2
reps=${REPS:-3}
bench=$build/tests/bench_model_gpu
mkdir -p "$out"
run() {  # name filter [env...]
  local name=$1 filter=$2
  shift 2
  env "$@" timeout 240 "$bench" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/$name.json" --benchmark_out_format=json \
    >"$out/$name.log" 2>&1 || echo "split_7b_ab: $name failed (see $out/$name.log)"
}
for s in ${3:-512 1024 2048}; do
  run "decode7b_split$s" 'BM_Decode7B/(8192|32768)/1/(24|28)/' TRIFORCE_ATTN_SPLIT_SLOTS=$s
done
run decode7b_pdl_auto 'BM_Decode7B/8192/1/25/' TRIFORCE_PREFETCH_MIB=auto
for s in 512 auto; do
  run "small_split$s" 'BM_(DraftStep68M|Step135M)/[0-9]+/1/25/|BM_Verify135M/[0-9]+/1/3/25/' TRIFORCE_ATTN_SPLIT_SLOTS=$s
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
for f in sorted(os.listdir(out)):
    if not f.endswith(".json"):
        continue
    try:
        data = json.load(open(os.path.join(out, f)))
    except ValueError:
        print(f"split_7b_ab {f}: unreadable"); continue
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            print(f"split_7b_ab {f[:-5]:22s} {b['run_name']:44s} {b['real_time']:9.3f} {b['time_unit']}")
PY
if command -v ncu >/dev/null; then
  TRIFORCE_BENCH_STEPS=1 timeout 200 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw "$bench" \
    --benchmark_filter='BM_Decode7B/8192/0/24/' >"$out/ncu_decode7b_8192.csv" 2>&1 ||
    echo "split_7b_ab: ncu failed"
  python3 - "$out/ncu_decode7b_8192.csv" <<'PY'
import csv, collections, re, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
allrows = list(csv.DictReader(lines)) if lines else []
rows = allrows[1:]  # the first row after the header holds the units
units = allrows[0] if allrows else {}
print("split_7b_ab ncu units:", units.get("gpu__time_duration.sum"), units.get("dram__bytes_read.sum"))
scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(units.get("dram__bytes_read.sum", "byte"), 1)
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in rows:
    name = re.sub(r"\(.*", "", r.get("Kernel Name", "?")).replace("void ", "").split("<")[0].split("::")[-1]
    try:
        t = float(r["gpu__time_duration.sum"].replace(",", ""))
        b = float(r.get("dram__bytes_read.sum", "0").replace(",", "") or 0) * scale
    except (KeyError, ValueError):
        continue
    a = agg[name]
    a[0] += 1; a[1] += t / 1000.0; a[2] += b
total = sum(v[1] for v in agg.values())
print(f"split_7b_ab ncu: {sum(v[0] for v in agg.values())} launches, {total:.1f} us")
for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"split_7b_ab ncu   {k:36s} {n:4d} x {t / n:7.2f} = {t:8.1f} us  {b / 1e9:7.3f} GB  {b / (t * 1e6) if t else 0:5.2f} TB/s")
PY
fi
