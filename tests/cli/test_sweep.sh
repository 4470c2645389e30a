#!/usr/bin/env bash
# triforce sweep and merge on the CI smoke config (tiny fixture model):
# --dry-run, one-line errors, the HDF5 layout, exactness at T = 0 against the
# ar baseline, shards + merge equal one process, merge refusals, plot.py, and
# text prompts on the default model when it is present.
set -eu
bin=$1; fixtures=$2
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cfg=configs/sweeps/ci-smoke.ini
fail() { echo "FAIL: $*"; exit 1; }
# expect_error <text> <command...>: non-zero exit, one line on stderr containing text, no output file.
expect_error() {
  local want=$1; shift
  if "$@" 2>"$tmp/err" >/dev/null; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/err" || fail "expected '$want' from: $*; got: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "not one line: $(cat "$tmp/err")"
}

# --dry-run: the grid, the memory plan and an estimate; nothing written.
"$bin" sweep --config $cfg --out "$tmp/dry.h5" --dry-run >"$tmp/dry.txt"
grep -q "grid: 24 points in 4 units" "$tmp/dry.txt" || fail "dry-run grid line: $(head -1 "$tmp/dry.txt")"
grep -q "memory plan" "$tmp/dry.txt" && grep -q "estimated time" "$tmp/dry.txt" || fail "dry-run plan lines missing"
[[ $(grep -c "^ *[0-9]" "$tmp/dry.txt") -eq 24 ]] || fail "dry-run should list 24 points"
[[ ! -e $tmp/dry.h5 ]] || fail "--dry-run wrote a file"
# The command line wins over the INI: one context instead of two halves the grid.
"$bin" sweep --config $cfg --context 64 --out "$tmp/dry.h5" --dry-run | grep -q "grid: 12 points" ||
  fail "--context on the command line did not override the config"
echo "dry-run ok"

printf 'budgte = 3\n' >"$tmp/typo.ini"
expect_error "budgte" "$bin" sweep --config "$tmp/typo.ini" --context 64 --out "$tmp/e.h5"
expect_error "--shard 2/2" "$bin" sweep --config $cfg --shard 2/2 --out "$tmp/e.h5"
expect_error "--out" "$bin" sweep --config $cfg
expect_error "--method fast" "$bin" sweep --config $cfg --method fast --out "$tmp/e.h5"
expect_error "--budget" "$bin" sweep --config $cfg --budget 32,x --out "$tmp/e.h5"
expect_error "context 400" "$bin" sweep --config $cfg --context 400 --out "$tmp/e.h5"
[[ ! -e $tmp/e.h5 ]] || fail "a failed sweep left a results file"
expect_error "not an HDF5 file" "$bin" merge "$tmp/m.h5" "$fixtures/hf/gqa_f32/config.json"
echo "errors ok"

# One process, then two shards merged: the same runs.
"$bin" sweep --config $cfg --out "$tmp/all.h5" --quiet
"$bin" sweep --config $cfg --shard 0/2 --out "$tmp/s0.h5" --quiet
"$bin" sweep --config $cfg --shard 1/2 --out "$tmp/s1.h5" --quiet
"$bin" merge "$tmp/merged.h5" "$tmp/s1.h5" "$tmp/s0.h5" 2>"$tmp/merge.log"
grep -q "merged 24 runs from 2 files" "$tmp/merge.log" || fail "merge: $(cat "$tmp/merge.log")"
grep -q "all present" "$tmp/merge.log" || fail "merge did not find every grid point: $(cat "$tmp/merge.log")"
"$bin" merge --list --quiet "$tmp/all.h5" >"$tmp/all.txt"
"$bin" merge --list --quiet "$tmp/merged.h5" >"$tmp/merged.txt"
cmp -s "$tmp/all.txt" "$tmp/merged.txt" || fail "the merged shards differ from one process: $(diff "$tmp/all.txt" "$tmp/merged.txt" | head -4)"
expect_error "duplicate run" "$bin" merge "$tmp/dup.h5" "$tmp/all.h5" "$tmp/s0.h5"
[[ ! -e $tmp/dup.h5 ]] || fail "a refused merge wrote its output"
"$bin" sweep --config $cfg --seed 1 --shard 1/2 --out "$tmp/other.h5" --quiet
expect_error "conflicting /config" "$bin" merge "$tmp/bad.h5" "$tmp/s0.h5" "$tmp/other.h5"
# Rerunning a complete sweep runs nothing.
"$bin" sweep --config $cfg --out "$tmp/all.h5" 2>"$tmp/rerun.log"
grep -q "0 runs written, 24 already done" "$tmp/rerun.log" || fail "rerun: $(tail -1 "$tmp/rerun.log")"
echo "shards + merge ok"

if python3 -c "import h5py, numpy" 2>/dev/null; then
  python3 - "$tmp/merged.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a = f.attrs
for k in ["schema", "schema_version", "git_sha", "git_dirty", "host", "device", "gpu", "cuda_runtime", "nccl",
          "cublas", "world_size", "slurm_job_id", "slurm_array_task_id", "merged_from"]:
    assert k in a, f"root attribute {k} missing"
assert a["schema"] == "triforce-sweep" and a["schema_version"] == 1
assert "target = tests/fixtures/hf/gqa_f32" in f["config"][()].decode()
assert sorted(f["shards"]) == ["0", "1"] and f["shards/0"].attrs["shard"] == "1/2"
runs = f["runs"]
assert len(runs) == 24 and f["summary"].shape == (24,)
by_key = {}
for name, g in runs.items():
    t = g.attrs
    assert name == f"{int(t['index']):06d}"
    n = int(t["n_generated"])
    assert n == 24 and g["tokens"].shape == (n,)
    m = t["method"]
    if m == "ar":
        assert t["speedup_vs_ar"] == 1.0 and t["n_levels"] == 0
        continue
    L = int(t["n_levels"])
    assert L == (1 if m == "spec" else 2), (m, L)
    for l in range(1, L + 1):
        h = g[f"accepted_hist_l{l}"][:]
        assert h.sum() == t[f"steps_l{l}"] and (np.arange(len(h)) * h).sum() == t[f"accepted_l{l}"]
        assert 0 <= t[f"alpha_l{l}"] <= 1 and t[f"tau_l{l}"] >= 1
        assert g[f"steps/drafted_l{l}"][:].sum() == t[f"drafted_l{l}"], (name, l)
        assert g[f"steps/accepted_l{l}"][:].sum() == t[f"accepted_l{l}"], (name, l)
    assert g["steps/generated"][:].sum() == n
    for l in range(1, L + 1):  # per-step phase times sum to the level's total
        assert g[f"steps/ns_l{l}"][:].sum() == t[f"ns_l{l}"], (name, l)
    assert g["steps/ns_l0"][:].min() >= 0
    assert t["prefill_reused"] == 1
    phases = sum(t[k] for k in ["draft_ns", "middle_ns", "verify_ns", "retrieval_rebuild_ns"])
    assert 0 < phases <= t["decode_ns"] <= t["total_ns"], name
    base = runs[f"{int(t['baseline_index']):06d}"].attrs
    assert base["method"] == "ar" and base["context"] == t["context"] and base["temperature"] == t["temperature"]
    assert abs(t["speedup_vs_ar"] - base["decode_ms_per_token"] / t["decode_ms_per_token"]) < 1e-9
    # Exactness: at T = 0 every method's tokens are ar's.
    if t["temperature"] == 0:
        assert t["tokens_equal_ar"] == 1, name
        assert (g["tokens"][:] == runs[f"{int(t['baseline_index']):06d}"]["tokens"][:]).all(), name
s = f["summary"][:]
assert sorted(s["index"]) == list(range(24))
assert set(s["method"]) == {b"ar", b"spec", b"triforce", b"ngram-triforce"}
assert np.isnan(s["alpha_l2"][s["method"] == b"spec"]).all() and (s["alpha_l2"][s["method"] == b"triforce"] >= 0).all()
print("layout ok: 24 runs, exact at T = 0, speedups against their ar baseline")
PY
else
  echo "h5py not importable: the layout check did not run"
fi

if python3 -c "import h5py, matplotlib" 2>/dev/null; then
  python3 experiments/plot.py "$tmp/merged.h5" --out "$tmp/plots" >"$tmp/plots.txt"
  for p in l2_acceptance_vs_budget acceptance_vs_chunk speedup_vs_context latency_breakdown per_position_acceptance gamma_ablation; do
    f="$tmp/plots/$p.png"
    [[ -s $f && $(head -c 4 "$f" | tail -c 3) == PNG ]] || fail "plot.py did not write $p.png"
  done
  echo "plot.py ok: $(wc -l <"$tmp/plots.txt") PNGs"
  # --peers overlays rows of experiments/peers/hf_static_compile.py (the format, not measured numbers):
  # the target's rows at the sweep's contexts, plus one of another model that is left out with a note.
  {
    echo '{"method": "hf-static-compile", "model": "tests/fixtures/hf/gqa_f32", "context": 96, "decode_ms_per_token": 3.0, "floor_ms_per_token": 0.5}'
    echo '{"method": "hf-static-compile", "model": "gqa_f32", "context": 192, "decode_ms_per_token": 3.5, "floor_ms_per_token": 0.6}'
    echo '{"method": "hf-static-eager", "model": "synthetic:llama2-7b-128k", "context": 96, "decode_ms_per_token": 9.0}'
  } >"$tmp/peers.jsonl"
  python3 experiments/plot.py "$tmp/merged.h5" --out "$tmp/peerplots" --peers "$tmp/peers.jsonl" \
    >"$tmp/peerplots.txt" 2>"$tmp/peerplots.err"
  [[ $(wc -l <"$tmp/peerplots.txt") -eq 7 ]] || fail "plot.py --peers should write 7 PNGs: $(cat "$tmp/peerplots.txt")"
  f="$tmp/peerplots/ms_per_token_vs_context.png"
  [[ -s $f && $(head -c 4 "$f" | tail -c 3) == PNG ]] || fail "plot.py --peers did not write ms_per_token_vs_context.png"
  grep -q "1 rows are for other models (synthetic:llama2-7b-128k)" "$tmp/peerplots.err" ||
    fail "plot.py --peers did not name the left-out model: $(cat "$tmp/peerplots.err")"
  [[ ! -e $tmp/plots/ms_per_token_vs_context.png ]] || fail "plot.py without --peers wrote the peer plot"
  echo '{"method": "hf-static-compile", "context": 96}' >"$tmp/badpeers.jsonl"
  expect_error "badpeers.jsonl:1: peer row lacks model, decode_ms_per_token" \
    python3 experiments/plot.py "$tmp/merged.h5" --out "$tmp/badplots" --peers "$tmp/badpeers.jsonl"
  echo "plot.py --peers ok"
else
  echo "h5py/matplotlib not importable: plot.py did not run"
fi

# Text prompts through the target's tokenizer, on the default model.
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $model ]]; then
  printf 'In the beginning God created the heaven and the earth. And the earth was without form, and void.%.0s ' {1..8} >"$tmp/gen.txt"
  "$bin" sweep --prompt-file "$tmp/gen.txt" --context 48 --max-new-tokens 6 --method spec --draft ngram:3 \
    --out "$tmp/text.h5" --quiet
  "$bin" merge --list --quiet "$tmp/text.h5" | grep -q "prompt=gen;context=48" || fail "text prompt run missing"
  # Ids of another tokenizer that do not fit the target's vocabulary are refused before any file is written.
  expect_error "outside the target's vocabulary of 256" "$bin" sweep --target "$fixtures/hf/gqa_f32" \
    --prompt-file "$tmp/gen.txt" --prompt-tokenizer "$model" --context 48 --out "$tmp/vocab.h5"
  [[ ! -e $tmp/vocab.h5 ]] || fail "a refused sweep wrote its file"
  echo "text prompts ok"
fi

# The default prompt set (experiments/prompts/make_default_prompts.sh), cut to a long context.
prompts=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/prompts
if [[ -f $model && -f $prompts/kjv-4-new.txt && -f $prompts/devils-dictionary.txt ]]; then
  "$bin" sweep --prompt-set kjv-4,devils --context 8192 --method ngram-triforce --out "$tmp/set.h5" --dry-run >"$tmp/set.txt"
  grep -q "grid: 4 points" "$tmp/set.txt" || fail "prompt set dry-run: $(head -1 "$tmp/set.txt")"
  grep -q "devils-dictionary" "$tmp/set.txt" && grep -q "kjv-4-new" "$tmp/set.txt" || fail "prompt set names missing"
  echo "default prompt set ok"
fi

# Tensor parallelism: 2 ranks on their shards give the same runs (keys, tokens) as one process, with
# rank 0 running every point and the worker serving its target steps (driven, the default) and with
# both ranks running every point (lockstep); only rank 0 writes.
if command -v mpirun >/dev/null; then
  mpi=(mpirun -np 2); [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root); mpi+=(--oversubscribe)
  for mode in driven lockstep; do
    "${mpi[@]}" "$bin" sweep --config $cfg --out "$tmp/tp2$mode.h5" --quiet --tp-mode $mode
    "$bin" merge --list --quiet "$tmp/tp2$mode.h5" >"$tmp/tp2.txt"
    cmp -s "$tmp/all.txt" "$tmp/tp2.txt" ||
      fail "the 2-rank $mode sweep differs from one process: $(diff "$tmp/all.txt" "$tmp/tp2.txt" | head -4)"
    echo "tensor-parallel sweep ok ($mode): 2 ranks, the same $(wc -l <"$tmp/tp2.txt") runs"
  done
fi
