#!/usr/bin/env bash
# Token-id inputs (--prompt-tokens of generate and logits' --tokens): every bad file or list gives one line
# naming it, exit 1, and no output file. The lines are the ones docs/RELIABILITY.md quotes.
set -eu
bin=$1; fixtures=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
m=$fixtures/hf/gqa_f32
source "$(dirname "$0")/expect_error.sh"
gen=("$bin" generate --target "$m" --max-new-tokens 2 --prompt-tokens)
printf '1\nx\n' >"$tmp/word.txt"
printf '5\n4294967296\n' >"$tmp/wide.txt"
printf '7\n-3\n' >"$tmp/negative.txt"
printf '\n  \n' >"$tmp/blank.txt"
python3 -c "import numpy as np, sys; np.save(sys.argv[1], np.ones(4, np.float32))" "$tmp/float.npy" 2>/dev/null || true
expect_error "$tmp/none.txt: cannot open token file" "${gen[@]}" "$tmp/none.txt"
expect_error "$tmp/word.txt:2: expected one token id per line (0 to 2147483647)" "${gen[@]}" "$tmp/word.txt"
expect_error "$tmp/wide.txt:2: expected one token id per line (0 to 2147483647)" "${gen[@]}" "$tmp/wide.txt"
expect_error "$tmp/negative.txt:2: expected one token id per line (0 to 2147483647)" "${gen[@]}" "$tmp/negative.txt"
expect_error "$tmp/blank.txt: no token ids" "${gen[@]}" "$tmp/blank.txt"
[[ -f $tmp/float.npy ]] && expect_error "$tmp/float.npy: expected an int32 .npy array of token ids" "${gen[@]}" "$tmp/float.npy"
expect_error "--tokens: 'x' is not a token id" "$bin" logits --model "$m" --tokens 1,x,3 --out "$tmp/l.npy"
expect_error "--tokens: expected a comma-separated list of token ids" "$bin" logits --model "$m" --tokens , --out "$tmp/l.npy"
[[ ! -e $tmp/l.npy ]] || fail "a refused logits run wrote its output"
echo "token files ok"
