#!/usr/bin/env bash
# Bad input gives a one-line error naming the file or option, and a non-zero exit.
set -u
bin=$1; fixtures=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
expect_error() {  # expect_error <pattern> <cmd...>
  local pattern=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local lines; lines=$(grep -c . "$tmp/err")
  if [[ $rc -eq 0 ]]; then echo "FAIL (exit 0): $*"; fails=$((fails+1)); return; fi
  if [[ $lines -ne 1 ]]; then echo "FAIL ($lines stderr lines): $*"; cat "$tmp/err"; fails=$((fails+1)); return; fi
  if ! grep -q -- "$pattern" "$tmp/err"; then echo "FAIL (no '$pattern' in error): $*"; cat "$tmp/err"; fails=$((fails+1)); return; fi
  echo "ok: $(cat "$tmp/err")"
}
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf

expect_error "nope.gguf" "$bin" info --model "$tmp/nope.gguf"
expect_error "unrecognised\|unrecognized" "$bin" info --bogus-flag
expect_error "--context" "$bin" info --model "$model" --context -5
expect_error "unknown command" "$bin" frobnicate
# KV offloading is a CUDA feature: refused on the CPU with one line.
printf '1\n2\n3\n' >"$tmp/ids.txt"
expect_error "--offload-kv: needs --device cuda" "$bin" generate --target "$fixtures/hf/gqa_f32" \
  --prompt-tokens "$tmp/ids.txt" --max-new-tokens 2 --offload-kv
expect_error "--on-chip-layers: needs --offload-kv" "$bin" generate --target "$fixtures/hf/gqa_f32" \
  --prompt-tokens "$tmp/ids.txt" --max-new-tokens 2 --on-chip-layers 1
expect_error "--on-chip-layers" "$bin" info --model "$fixtures/hf/gqa_f32" --offload-kv --on-chip-layers 9
expect_error "--offload-kv: needs --device cuda" "$bin" info --model "$fixtures/hf/gqa_f32" --device cpu --offload-kv
expect_error "tokens" "$bin" logits --model "$model" --tokens 1,x,3 --out "$tmp/l.npy"
if [[ -f "$model" ]]; then
  head -c 5000000 "$model" >"$tmp/trunc.gguf"
  expect_error "trunc.gguf" "$bin" info --model "$tmp/trunc.gguf"
  head -c 100 "$model" >"$tmp/short.gguf"
  expect_error "short.gguf" "$bin" info --model "$tmp/short.gguf"
  printf 'XXXX' | dd of="$tmp/badmagic.gguf" bs=1 count=4 conv=notrunc 2>/dev/null
  cat "$model" >"$tmp/badmagic.gguf"; printf 'XXXX' | dd of="$tmp/badmagic.gguf" bs=1 count=4 conv=notrunc 2>/dev/null
  expect_error "badmagic.gguf" "$bin" info --model "$tmp/badmagic.gguf"
  expect_error "trunc.gguf" "$bin" generate --target "$tmp/trunc.gguf" --prompt hi --max-new-tokens 2
fi
# A truncated safetensors checkpoint names the file.
if [[ -d "$fixtures/hf/mha_f32" ]]; then
  cp -r "$fixtures/hf/mha_f32" "$tmp/ck"
  st="$tmp/ck/model.safetensors"; sz=$(stat -c %s "$st"); head -c $((sz / 2)) "$st" >"$st.x"; mv "$st.x" "$st"
  expect_error "model.safetensors" "$bin" logits --model "$tmp/ck" --tokens 1,2,3 --out "$tmp/l.npy"
  [[ -e "$tmp/l.npy" ]] && { echo "FAIL: a failed logits run left $tmp/l.npy"; fails=$((fails+1)); }
  cp -r "$fixtures/hf/mha_f32" "$tmp/ck2"; rm "$tmp/ck2/model.safetensors"
  expect_error "safetensors" "$bin" logits --model "$tmp/ck2" --tokens 1,2,3 --out "$tmp/l.npy"
  expect_error "vocabulary" "$bin" logits --model "$fixtures/hf/mha_f32" --tokens 1,2,99999 --out "$tmp/l.npy"
fi
# Checkpoint validation (docs/RELIABILITY.md): damaged or unsupported checkpoints are refused, never loaded.
if [[ -d "$fixtures/hf/mha_f32" ]]; then
  # Two tensors sharing bytes, in a hand-built safetensors file.
  cp -r "$fixtures/hf/mha_f32" "$tmp/overlap"
  hdr='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
  n=${#hdr}
  { printf "$(printf '\\%03o\\%03o' $((n & 255)) $((n >> 8)))"; printf '\0\0\0\0\0\0'; printf '%s' "$hdr"; printf '\0\0\0\0'; } \
    >"$tmp/overlap/model.safetensors"
  expect_error "model.safetensors: tensor b: data_offsets 0..4 overlap tensor a" \
    "$bin" logits --model "$tmp/overlap" --tokens 1,2,3 --out "$tmp/l.npy"
  [[ -e "$tmp/l.npy" ]] && { echo "FAIL: a refused checkpoint left $tmp/l.npy"; fails=$((fails+1)); }
  # Sliding-window attention is math we do not run: refused, not ignored.
  cp -r "$fixtures/hf/mha_f32" "$tmp/swa"
  sed -i 's/"vocab_size": 256/"vocab_size": 256, "sliding_window": 4096/' "$tmp/swa/config.json"
  expect_error "config.json: sliding_window = 4096 is refused" "$bin" info --model "$tmp/swa"
  # A tied config with its own lm_head in the weights.
  cp -r "$fixtures/hf/mha_f32" "$tmp/tied"
  sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$tmp/tied/config.json"
  expect_error "lm_head.weight is present but the config ties" "$bin" info --model "$tmp/tied"
fi
# A GGUF header claiming 2^60 tensors is refused before anything is allocated.
if [[ -f "$fixtures/io/quants.gguf" ]]; then
  cp "$fixtures/io/quants.gguf" "$tmp/count.gguf"
  printf '\0\0\0\0\0\0\0\020' | dd of="$tmp/count.gguf" bs=1 seek=8 conv=notrunc 2>/dev/null
  expect_error "count.gguf: corrupt: tensor count 1152921504606846976 is impossible" "$bin" info --model "$tmp/count.gguf"
fi
# TRIFORCE_* knobs (docs/RELIABILITY.md, "Environment variables"): a misspelt name, a bad value, a CMake option.
expect_error "TRIFORCE_FUSED_NORMGEMM is not a triforce environment variable (did you mean TRIFORCE_FUSED_NORM_GEMM?" \
  env TRIFORCE_FUSED_NORMGEMM=1 "$bin" generate --target "$fixtures/hf/gqa_f32" --prompt-tokens "$tmp/ids.txt" --max-new-tokens 2
expect_error "TRIFORCE_PDL=yes: expected 0 or 1" \
  env TRIFORCE_PDL=yes "$bin" info --model "$fixtures/hf/gqa_f32"
expect_error "TRIFORCE_CUDA is a CMake option" env TRIFORCE_CUDA=OFF "$bin" info --model "$fixtures/hf/gqa_f32"
mkdir -p "$tmp/hf"; echo '{"hidden_size": 64,' >"$tmp/hf/config.json"
expect_error "config.json" "$bin" info --model "$tmp/hf"
[[ $fails -eq 0 ]] && echo "all error cases ok" || { echo "$fails error cases failed"; exit 1; }
