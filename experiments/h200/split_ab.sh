#!/usr/bin/env bash
# Issue 17: the decode attention's split size (TRIFORCE_ATTN_SPLIT_SLOTS: a number for every model, or auto for
# the per-model rule ops::attention_split_slots_auto, 16 slots per KV head; 512 by default) against the step benchmarks of every shape the hierarchy runs: the 68M draft (250-slot cache), the
# SmolLM2-135M step and verify at 256 and 6478 slots, the 7B decode at 8K and the 7B retrieval step (n = 1),
# graphs on, the default launch switches (PDL on for the small models, off for the 7B), three repetitions each. One JSON file per split size.
#   bash experiments/h200/split_ab.sh BUILD_DIR OUT [SPLITS]   (SPLITS default "512 auto 256 128 64")
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
for s in ${3:-512 auto 256 128 64}; do
  TRIFORCE_ATTN_SPLIT_SLOTS=$s "$build/tests/bench_model_gpu" \
    --benchmark_filter='BM_(DraftStep68M|Step135M)/[0-9]+/1/1(/|$)|BM_Verify135M/[0-9]+/1/3/1(/|$)|BM_Decode7B/8192/1/0(/|$)|BM_RetrievalStep7B/[0-9]+/1/1/0(/|$)' \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_out="$out/split_$s.json" \
    --benchmark_out_format=json 2>&1 | grep -E "_median|ERROR" | sed "s/^/split $s: /" | cut -c1-110
done
