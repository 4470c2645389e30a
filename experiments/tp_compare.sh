#!/usr/bin/env bash
# Tensor parallelism against TP 1 on one node (the 2-GPU issue's runbook):
#   1. greedy tokens of TP N vs TP 1: SmolLM2-135M (ar and triforce) and the 7B synthetic shape (ar), plus
#      the largest logit difference;
#   2. the 7B shape at 128K: ar and triforce ms/token (one prefill, --compare ar) at TP 1 and TP N, with
#      CUDA graphs on and off, and the allreduce time per layer (bench_allreduce_gpu);
#   3. the same with --offload-kv (each rank offloads its own KV heads).
# usage: experiments/tp_compare.sh BUILD_DIR OUT_DIR [N=2] [CONTEXT=130000] [PARTS=123]
# (PARTS: which of the parts 1-3 to run, e.g. 1 for the correctness runs alone)
# Each run's --json line goes to OUT_DIR/*.json and a summary to OUT_DIR/summary.txt. With fewer GPUs
# than ranks the ranks share a GPU and their collectives go through the host (a correctness run: its
# times are not TP's).
set -euo pipefail
build=$1; out=$2; np=${3:-2}; ctx=${4:-130000}; parts=${5:-123}
tf=$build/triforce
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
mpi=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
smol=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
syn=synthetic:llama2-7b-128k
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
awk 'BEGIN { for (i = 0; i < 2048; i++) print (i * 7919 + 13) % 32000 }' >"$tmp/ids2k.txt"
awk -v n="$ctx" 'BEGIN { for (i = 0; i < n; i++) print (i * 7919 + 13) % 32000 }' >"$tmp/ids_long.txt"
run() {  # run <ranks> <name> args... : one generate, its JSON line kept
  local n=$1 name=$2; shift 2
  local cmd=("$tf" generate --device cuda --ignore-eos --json "$@")
  [[ $n -gt 1 ]] && cmd=("${mpi[@]}" -np "$n" "${cmd[@]}")
  echo "== $name: ${cmd[*]}" >>"$out/commands.txt"
  "${cmd[@]}" 2>"$out/$name.err" | tail -1 >"$out/$name.json" || { echo "FAIL $name"; tail -3 "$out/$name.err"; return 1; }
}
logits() {  # logits <ranks> <name> <model> <ids>
  local n=$1 name=$2 m=$3 ids=$4
  local cmd=("$tf" logits --model "$m" --device cuda --tokens-file "$ids" --last 16 --out "$out/$name.npy")
  [[ $n -gt 1 ]] && cmd=("${mpi[@]}" -np "$n" "${cmd[@]}")
  "${cmd[@]}" >/dev/null 2>"$out/$name.err"
}

# 1. correctness
if [[ $parts == *1* && -f $smol ]]; then
  head -c 12000 "$(dirname "$smol")/prompts/kjv-4-new.txt" >"$tmp/smol_prompt.txt" 2>/dev/null ||
    printf 'The three most important inventions in history are' >"$tmp/smol_prompt.txt"
  for n in 1 "$np"; do
    run "$n" "smol_ar_tp$n" --target "$smol" --prompt-file "$tmp/smol_prompt.txt" --max-new-tokens 64
    run "$n" "smol_triforce_tp$n" --target "$smol" --prompt-file "$tmp/smol_prompt.txt" --max-new-tokens 64 \
      --method triforce --draft layerskip:8 --budget 512 --chunk-size 8
  done
fi
[[ $parts == *1* ]] && for n in 1 "$np"; do
  run "$n" "syn_ar_tp$n" --target "$syn" --prompt-tokens "$tmp/ids2k.txt" --max-new-tokens 32
  logits "$n" "syn_logits_tp$n" "$syn" "$tmp/ids2k.txt"
done

# 2. the 7B shape at long context, graphs on and off
[[ $parts == *2* ]] && for n in 1 "$np"; do
  for g in on off; do
    flag=(); [[ $g == off ]] && flag=(--no-cuda-graphs)
    run "$n" "syn${ctx}_tp${n}_graphs_$g" --target "$syn" --prompt-tokens "$tmp/ids_long.txt" --max-new-tokens 32 \
      --method triforce --compare ar "${flag[@]}"
  done
done
if [[ $parts == *2* && -x $build/tests/bench_allreduce_gpu ]]; then
  for n in 1 "$np"; do
    cmd=("$build/tests/bench_allreduce_gpu" --benchmark_out="$out/allreduce_tp$n.json" --benchmark_out_format=json)
    [[ $n -gt 1 ]] && cmd=("${mpi[@]}" -np "$n" "${cmd[@]}")
    "${cmd[@]}" >"$out/allreduce_tp$n.txt" 2>&1 || echo "FAIL allreduce bench at $n ranks"
  done
fi

# 3. offloaded
[[ $parts == *3* ]] && for n in 1 "$np"; do
  run "$n" "syn${ctx}_tp${n}_offload" --target "$syn" --prompt-tokens "$tmp/ids_long.txt" --max-new-tokens 16 \
    --method triforce --compare ar --offload-kv
done

python3 - "$out" "$np" "$ctx" <<'PY' | tee "$out/summary.txt"
import json, os, sys
import numpy as np
out, n, ctx = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    p = os.path.join(out, name + ".json")
    try: return json.loads(open(p).read())
    except Exception: return None
def toks(d): return d.get("tokens") if d else None
print(f"TP {n} vs TP 1")
for a, b in [("smol_ar_tp1", f"smol_ar_tp{n}"), ("smol_ar_tp1", f"smol_triforce_tp{n}"), ("syn_ar_tp1", f"syn_ar_tp{n}")]:
    x, y = load(a), load(b)
    if x and y:
        same = sum(p == q for p, q in zip(toks(x), toks(y)))
        print(f"  {b} vs {a}: tokens identical {toks(x) == toks(y)} ({same}/{len(toks(x))})")
try:
    l1, l2 = np.load(os.path.join(out, "syn_logits_tp1.npy")), np.load(os.path.join(out, f"syn_logits_tp{n}.npy"))
    print(f"  7B synthetic logits: max |d| {np.abs(l1 - l2).max():.4g}, logit std {l1.std():.3g}, "
          f"argmax equal {(l1.argmax(1) == l2.argmax(1)).sum()}/{len(l1)}")
except Exception as e:
    print("  logits:", e)
for suffix in ["graphs_on", "graphs_off", "offload"]:
    for tp in ["1", n]:
        d = load(f"syn{ctx}_tp{tp}_{suffix}")
        if not d: continue
        c = d.get("compare", {})
        print(f"  {ctx} {suffix:10s} TP {tp}: triforce {d.get('decode_ms_per_token', 0):8.2f} ms/token, "
              f"ar {c.get('decode_ms_per_token', 0):8.2f} ms/token, graphs {d.get('cuda_graphs')}, "
              f"prefill {d.get('prefill_ms', 0) / 1e3:.1f} s, comm {d.get('tp', {}).get('comm', '')}")
for tp in ["1", n]:
    p = os.path.join(out, f"allreduce_tp{tp}.json")
    if not os.path.exists(p): continue
    for b in json.load(open(p)).get("benchmarks", []):
        print(f"  allreduce TP {tp} {b['name']}: {b.get('allreduce_us', 0):.1f} us, per layer {b.get('per_layer_us', 0):.1f} us ({b.get('label', '')})")
PY
