#!/usr/bin/env bash
# Issue 17: ms/token of `generate --method ar` (T = 0, graphs on) on MODEL (default synthetic:smollm2-135m,
# whose step costs what the real SmolLM2's does: same shapes and dtype) at the issue's two prompt lengths
# (13 and 6478 tokens), for each step configuration in turn: the defaults (the two GEMM epilogues on since
# results/h100/step-fusions; no_epilogues is the default before it; no_direct launches the attention combine for one split too), each launch-removing fusion alone,
# all three together, the persistent step kernel, and the decode attention's split size (TRIFORCE_ATTN_SPLIT_SLOTS,
# 512 by default: at 256 slots one CTA per KV head walks the whole cache; auto: 64 for SmolLM2's 3 KV heads). Every configuration runs REPS times in its own process;
# one JSON line per run in OUT/step_ab.jsonl, the medians printed, and which configurations gave the same tokens.
#   bash experiments/h200/step_ab.sh BUILD_DIR OUT [MODEL]
set -uo pipefail
build=$1 out=$2 model=${3:-synthetic:smollm2-135m}
reps=${REPS:-3}
mkdir -p "$out"
: >"$out/step_ab.jsonl"
configs=(
  "default:"
  "no_epilogues:TRIFORCE_FUSED_GATE_UP_SILU=0 TRIFORCE_FUSED_QKV_ROPE=0"
  "prefetch_auto:TRIFORCE_PREFETCH_MIB=auto"
  "no_direct:TRIFORCE_DIRECT_SINGLE_SPLIT=0"
  "norm_gemm:TRIFORCE_FUSED_NORM_GEMM=1"
  "gate_up_silu:TRIFORCE_FUSED_GATE_UP_SILU=1"
  "qkv_rope:TRIFORCE_FUSED_QKV_ROPE=1"
  "epilogues:TRIFORCE_FUSED_GATE_UP_SILU=1 TRIFORCE_FUSED_QKV_ROPE=1"
  "all3:TRIFORCE_FUSED_NORM_GEMM=1 TRIFORCE_FUSED_GATE_UP_SILU=1 TRIFORCE_FUSED_QKV_ROPE=1"
  "persistent:TRIFORCE_PERSISTENT_STEP=1"
  "split64:TRIFORCE_ATTN_SPLIT_SLOTS=64"
  "split128:TRIFORCE_ATTN_SPLIT_SLOTS=128"
  "split256:TRIFORCE_ATTN_SPLIT_SLOTS=256"
  "split_auto:TRIFORCE_ATTN_SPLIT_SLOTS=auto"
  "all3_split_auto:TRIFORCE_FUSED_NORM_GEMM=1 TRIFORCE_FUSED_GATE_UP_SILU=1 TRIFORCE_FUSED_QKV_ROPE=1 TRIFORCE_ATTN_SPLIT_SLOTS=auto"
  "combine:TRIFORCE_FUSED_COMBINE=1"
  "all3_split_auto_combine:TRIFORCE_FUSED_NORM_GEMM=1 TRIFORCE_FUSED_GATE_UP_SILU=1 TRIFORCE_FUSED_QKV_ROPE=1 TRIFORCE_ATTN_SPLIT_SLOTS=auto TRIFORCE_FUSED_COMBINE=1"
)
# CONFIGS=REGEX keeps the configurations whose name matches (all by default).
if [[ -n ${CONFIGS-} ]]; then
  kept=(); for c in "${configs[@]}"; do [[ ${c%%:*} =~ ^($CONFIGS)$ ]] && kept+=("$c"); done; configs=("${kept[@]}")
fi
for len in 13 6478; do
  python3 -c "print('\n'.join(str((i * 7919 + 13) % 49152) for i in range($len)))" >"$out/prompt-$len.ids"
  for c in "${configs[@]}"; do
    name=${c%%:*} envs=${c#*:}
    for r in $(seq "$reps"); do
      env $envs "$build/triforce" generate --device cuda --target "$model" --method ar \
        --prompt-tokens "$out/prompt-$len.ids" --max-new-tokens 256 --ignore-eos --json 2>>"$out/step_ab.err" |
        tail -n 1 | python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
print(json.dumps({'config': '$name', 'prompt': $len, 'rep': $r, 'decode_ms_per_token': d['decode_ms_per_token'],
                  'ids_sha': hash(tuple(d.get('ids', d.get('tokens', []))))}))" >>"$out/step_ab.jsonl" ||
        echo "step_ab: $name at $len failed (see step_ab.err)"
    done
  done
done
python3 - "$out/step_ab.jsonl" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
g = collections.defaultdict(list)
ids = collections.defaultdict(lambda: collections.defaultdict(set))  # prompt -> output hash -> configurations
for r in rows:
    g[(r['prompt'], r['config'])].append(r['decode_ms_per_token'])
    ids[r['prompt']][r['ids_sha']].add(r['config'])
for (p, c), v in sorted(g.items()):
    print(f"step_ab prompt {p:5d} {c:13s} median {statistics.median(v):.4f} ms/token over {len(v)}")
for p, outs in ids.items():
    print(f"step_ab prompt {p}: {len(outs)} distinct output(s) across configurations")
    for k, (h, cs) in enumerate(sorted(outs.items(), key=lambda hc: -len(hc[1]))):
        print(f"step_ab prompt {p}: output {k + 1}: {' '.join(sorted(cs))}")
PY
