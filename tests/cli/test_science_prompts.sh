#!/usr/bin/env bash
# The science sweep's prompts (experiments/science/heldout_prompts.py) are windows of the books' held-out
# parts only: every row equals the harness's tokenization of text[c + 1:] (c = the first newline at or
# after floor(0.85 * chars), recomputed here, not imported) at the offset its sidecar names; windows of a
# book do not overlap and rows go round-robin over the books; too many rows is one line and exit 1; the
# sweep takes the file as prompts named heldout#r. Two small made-up books, the default model's tokenizer.
set -eu
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $model ]] || { echo "the default model $model is missing: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$here/expect_error.sh"
mkdir "$tmp/books"
python3 - "$tmp/books" <<'PY'
import sys
for name, word in (("a.txt", "apple"), ("b.txt", "birch")):
    with open(sys.argv[1] + "/" + name, "w") as f:
        # TRAIN / HELD markers are not what the test checks (the split rule is); they make a failure readable.
        for i in range(400):
            f.write("%s line %d of the %s book, words %d.\n" % ("TRAIN" if i < 340 else "HELD", i, word, i * i))
PY
script=$here/../../experiments/science/heldout_prompts.py
python3 "$script" --triforce "$bin" --model "$model" --books "$tmp/books" --tokens 64 --rows 5 --out "$tmp/heldout.npy" >/dev/null
python3 - "$bin" "$model" "$tmp" <<'PY'
import json, math, struct, subprocess, sys
bin_, model, tmp = sys.argv[1:]
def fail(msg):
    sys.exit("FAIL: " + msg)
raw = open(tmp + "/heldout.npy", "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
header = raw[10:10 + hlen].decode("latin1")
if "'<i4'" not in header or "(5, 64)" not in header:
    fail("header " + header)
data = struct.unpack("<%di" % (5 * 64), raw[10 + hlen:])
rows = [list(data[r * 64:(r + 1) * 64]) for r in range(5)]
desc = json.load(open(tmp + "/heldout.json"))
held = {}
for name in ("a.txt", "b.txt"):
    text = open(tmp + "/books/" + name, encoding="utf-8").read()
    c = text.find("\n", int(math.floor(0.85 * len(text))))
    open(tmp + "/h.txt", "w", encoding="utf-8").write(text[c + 1:])
    subprocess.run([bin_, "tokenize", "--model", model, "--text-file", tmp + "/h.txt", "--out", tmp + "/h.ids"],
                   check=True, stdout=subprocess.DEVNULL)
    held[name] = [int(x) for x in open(tmp + "/h.ids").read().split()]
    if not text[c + 1:].startswith("HELD line 341 "):
        fail("the split rule moved: held-out part starts %r" % text[c + 1:c + 20])
want = [("a.txt", 0), ("b.txt", 0), ("a.txt", 64), ("b.txt", 64), ("a.txt", 128)]
got = [(r["book"], r["heldout_token_offset"]) for r in desc["rows"]]
if got != want:
    fail("rows %s, expected round-robin non-overlapping windows %s" % (got, want))
for r, (book, off) in enumerate(got):
    if rows[r] != held[book][off:off + 64]:
        fail("row %d is not %s's held-out tokens at %d" % (r, book, off))
    if desc["rows"][r]["prompt"] != "heldout#%d" % r:
        fail("row %d named %s" % (r, desc["rows"][r]["prompt"]))
print("held-out rows: %d windows, each the held-out tokenization at its offset" % len(rows))
PY
expect_error "--rows 50: the held-out parts of $tmp/books hold only" \
  python3 "$script" --triforce "$bin" --model "$model" --books "$tmp/books" --tokens 64 --rows 50 --out "$tmp/x.npy"
expect_error "--books $tmp/none: no *.txt books" \
  python3 "$script" --triforce "$bin" --model "$model" --books "$tmp/none" --tokens 64 --rows 1 --out "$tmp/x.npy"
[[ ! -e $tmp/x.npy ]] || fail "a refused run wrote its output"
"$bin" sweep --target "$model" --prompt-tokens "$tmp/heldout.npy" --context 32,64 --method triforce --budget 16 \
  --out "$tmp/s.h5" --dry-run >"$tmp/dry.txt"
for r in 0 1 2 3 4; do grep -q " heldout#$r " "$tmp/dry.txt" || fail "the sweep did not list heldout#$r: $(cat "$tmp/dry.txt")"; done
echo "science prompts ok"
