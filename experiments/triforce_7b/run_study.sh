#!/usr/bin/env bash
# The TriForce-at-scale study on one GPU (issue 16; results/h200/triforce-7b/README.md). Parts:
#   onchip   configs/sweeps/triforce-7b-onchip.ini: real and paper-rate (SIMULATED) runs, 68M and layerskip:2
#            drafts, T = 0 and 0.6, one shared prefill, ar as the baseline
#   grid     configs/sweeps/triforce-7b-grid.ini: the SIMULATED acceptance grid, one shared prefill
#   offload  --offload-kv: ar (OFFLOAD_AR_TOKENS tokens; its per-token cost is flat) and triforce at the paper's
#            rates (SIMULATED) for each gamma2 in OFFLOAD_GAMMA2, 256 tokens; one prefill each (a second pinned
#            copy of the 64 GB cache does not fit the host, so no --compare)
#   peer     HF transformers, StaticCache + torch.compile, the same shape (experiments/peers)
#   TRIFORCE_BIN=build/triforce bash experiments/triforce_7b/run_study.sh OUT onchip grid offload peer
set -uo pipefail
out=${1:?usage: run_study.sh OUT PART...}; shift
cd "$(dirname "$0")/../.."
bin=${TRIFORCE_BIN:-build/triforce}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
ids=$out/ids.npy
[[ -f $ids ]] || python3 experiments/triforce_7b/make_prompt.py "$ids" 122880 || exit 1
common=(--target synthetic:llama2-7b-128k --device cuda --prompt-tokens "$ids" --ignore-eos --json)
for part in "$@"; do
  t=$SECONDS
  case $part in
    onchip|grid)
      "$bin" sweep --config configs/sweeps/triforce-7b-$part.ini --prompt-tokens "$ids" --out "$out/$part.h5" \
        > "$out/$part.log" 2>&1
      grep -E "^\[|error" "$out/$part.log" | cut -c1-220 | tail -40 ;;
    offload)
      "$bin" generate "${common[@]}" --offload-kv --method ar --max-new-tokens "${OFFLOAD_AR_TOKENS:-32}" \
        > "$out/offload_ar.log" 2>&1; tail -1 "$out/offload_ar.log" > "$out/offload_ar.json"
      grep -E "ms/token|error" "$out/offload_ar.log" | head -5
      for g2 in ${OFFLOAD_GAMMA2:-16}; do
        "$bin" generate "${common[@]}" --offload-kv --method triforce --draft synthetic:llama-68m --budget 4096 \
          --chunk-size 8 --gamma1 2 --gamma2 "$g2" --simulate-acceptance 0.35,0.9137 --max-new-tokens 256 \
          > "$out/offload_triforce_g$g2.log" 2>&1
        tail -1 "$out/offload_triforce_g$g2.log" > "$out/offload_triforce_g$g2.json"
        grep -E "ms/token|SIMULATED|error" "$out/offload_triforce_g$g2.log" | head -6
      done ;;
    peer)
      timeout "${PEER_TIMEOUT:-400}" python3 experiments/peers/hf_static_compile.py --model synthetic:llama2-7b-128k \
        --prompt-len 122880 --new-tokens 256 --prefill-chunk "${PEER_PREFILL_CHUNK:-16384}" --label h200 \
        --out "$out/peers_7b.jsonl" > "$out/peer.log" 2>&1
      tail -5 "$out/peer.log" ;;
    *) echo "run_study.sh: unknown part '$part' (onchip, grid, offload, peer)" >&2; exit 2 ;;
  esac
  echo "== $part: $((SECONDS - t)) s"
done
