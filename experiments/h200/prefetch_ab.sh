#!/usr/bin/env bash
# Issue 17: does bounding the skinny GEMM's L2 weight prefetch (TRIFORCE_PREFETCH_MIB=auto: only the blocks whose
# rows start in the matrix's first quarter of L2 prefetch; kernels/pdl.cuh) take back what PDL and the norm
# prologue cost the 7B steps (8-19% slower with every block prefetching its 128 KB tile at once,
# results/h100/step-fusions)? Both prefetch settings, in one call, over the masks that prefetch (1 PDL, 25 PDL with
# both epilogues, 32 the norm prologue) and their baselines (0, 24), on the 7B decode at 8K and the retrieval step
# (graphs), and on the SmolLM2-shape step, whose default has PDL on. Three repetitions each, medians printed.
#   bash experiments/h200/prefetch_ab.sh BUILD_DIR OUT
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
filter='BM_Decode7B/8192/1/(0|1|24|25|32)/|BM_RetrievalStep7B/4097/1/1/(0|1|24|25|32)/|BM_Step135M/(256|6478)/1/(0|1|25|33)/'
for p in all auto; do
  TRIFORCE_PREFETCH_MIB=$p "$build/tests/bench_model_gpu" --benchmark_filter="$filter" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/prefetch_$p.json" >"$out/prefetch_$p.log" 2>&1 ||
    echo "prefetch_ab: the $p run failed (see $out/prefetch_$p.log)"
done
python3 - "$out" <<'PY'
import json, os, sys
rows = {}
for p in ("all", "auto"):
    f = os.path.join(sys.argv[1], f"prefetch_{p}.json")
    if not os.path.exists(f):
        continue
    for b in json.load(open(f))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            rows.setdefault(b["run_name"], {})[p] = b["real_time"]
for name, v in sorted(rows.items()):
    a, u = v.get("all"), v.get("auto")
    ratio = f"{u / a:.3f}" if a and u else "-"
    print(f"prefetch_ab {name:45s} all {a if a else float('nan'):9.3f} auto {u if u else float('nan'):9.3f} auto/all {ratio}")
PY
