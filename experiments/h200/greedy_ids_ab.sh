#!/usr/bin/env bash
# A/B of the T = 0 decisions taken on the device (LlamaModel::forward_greedy, TRIFORCE_DEVICE_ARGMAX=1, the
# default) against forward()'s logits copied back and scanned on the host (TRIFORCE_DEVICE_ARGMAX=0), on the
# default model: `generate --method ar` at the README's 8-token prompt and at a 6,478-token one (issue 17's
# rows; REPS runs each, arms interleaved), then the trained draft's held-out evaluation at T = 0 (spec and
# triforce, --compare ar) in each arm.
#   bash experiments/h200/greedy_ids_ab.sh BIN OUT MODEL PROMPTS_DIR
set -uo pipefail
bin=$1 out=$2 model=$3 prompts=$4
reps=${REPS:-2} contexts=${CONTEXTS:-4096}
mkdir -p "$out"
head -c 26000 "$prompts/kjv-4-new.txt" >"$out/long.txt"
for r in $(seq "$reps"); do
  for a in 1 0; do
    for p in short long; do
      src=(--prompt "The three most important inventions in history are")
      [[ $p == long ]] && src=(--prompt-file "$out/long.txt")
      TRIFORCE_DEVICE_ARGMAX=$a "$bin" generate --device cuda --target "$model" --method ar --max-new-tokens 256 \
        --ignore-eos "${src[@]}" --json 2>/dev/null | tail -n 1 |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'device_argmax': $a, 'prompt': '$p', 'n_prompt': d['n_prompt'], 'decode_ms_per_token': d['decode_ms_per_token']}))" \
        | tee -a "$out/generate_ar.jsonl"
    done
  done
done
for a in 1 0; do
  TRIFORCE_DEVICE_ARGMAX=$a bash experiments/draft/eval_draft.sh "$bin" "$out/eval_argmax$a" --model "$model" \
    --prompts "$prompts" --device cuda --books 2 --contexts "$contexts" --short 0 --baseline none --sampled 0 2>&1 |
    grep -E "^trained|^draft" | sed "s/^/argmax on device=$a: /"
done
