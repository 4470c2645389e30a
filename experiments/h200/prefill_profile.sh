#!/usr/bin/env bash
# Issue 18: where the 7B prefill of 131,072 tokens spends its time, kernel by kernel, in one call after
# experiments/h200/build.sh: one timed prefill (cuDNN attention, chunk 8192, the default GEMMs) under Nsight
# Systems, profiled from cudaProfilerStart (after the untimed first prefill, so cuDNN's plans are built),
# then the per-kernel summary (total ns, instances, average) as CSV and the top 25 lines.
# FILTER (default 'BM_Prefill7B/131072/1/8192/0/0(/|$)') picks another BM_Prefill row (a GPU without room for
# the 128K cache: an H100 takes 'BM_Prefill7B/32768/1/2048/0/0(/|$)').
#   bash experiments/h200/prefill_profile.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[[ -n $nsys ]] || { echo "prefill_profile: nsys not found"; exit 1; }
TRIFORCE_BENCH_STEPS=1 "$nsys" profile --capture-range=cudaProfilerApi --capture-range-end=stop -t cuda \
  -o "$out/prefill" --force-overwrite true "$build/tests/bench_model_gpu" \
  --benchmark_filter="${FILTER:-BM_Prefill7B/131072/1/8192/0/0(/|\$)}" >"$out/nsys.log" 2>&1
echo "nsys: exit $?"
grep -E "BM_Prefill" "$out/nsys.log" | head -3
"$nsys" stats -r cuda_gpu_kern_sum --format csv -o "$out/kern" "$out/prefill.nsys-rep" >/dev/null 2>&1
f=$(ls "$out"/kern*cuda_gpu_kern_sum*.csv 2>/dev/null | head -1)
[[ -n $f ]] && python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total = sum(float(r['Total Time (ns)']) for r in rows)
print(f"kernels: {len(rows)} names, {total / 1e9:.3f} s of GPU time")
for r in rows[:25]:
    t = float(r['Total Time (ns)'])
    print(f"{t / 1e6:9.1f} ms {100 * t / total:5.1f}%  x{r['Instances']:>6}  {r['Name'][:110]}")
PY
