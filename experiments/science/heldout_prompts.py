"""Held-out prompts for the science sweep: windows of the books' held-out parts,
exactly the text experiments/draft/heldout.py holds out (the trained draft never
saw it), as one 2-D int32 .npy (a prompt per row) for `triforce sweep
--prompt-tokens`, plus a JSON sidecar naming each row's book and offset.

Each book's held-out part is tokenized by the harness (`triforce tokenize`);
row r is a window of TOKENS consecutive ids of it. Windows of one book do not
overlap (book b's window k starts at token k * TOKENS), and rows go round-robin
over the books (every book's window 0, then every book's window 1, ...), so the
first N rows spread over every book. A sweep cuts each row to its context.

  python3 heldout_prompts.py --triforce BIN --model GGUF --books DIR --tokens 7680 --rows 4 --out P.npy
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "draft"))
import heldout  # noqa: E402  (the one definition of the split)


def write_npy_i32(path, rows):
    """A C-order int32 .npy of shape [len(rows), len(rows[0])], without numpy."""
    shape = (len(rows), len(rows[0]))
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % shape
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        for r in rows:
            f.write(struct.pack("<%di" % len(r), *r))


def tokenize(triforce, model, text, tmp):
    src, ids = os.path.join(tmp, "text.txt"), os.path.join(tmp, "text.ids")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    subprocess.run([triforce, "tokenize", "--model", model, "--text-file", src, "--out", ids],
                   check=True, stdout=subprocess.DEVNULL)
    with open(ids) as f:
        return [int(x) for x in f.read().split()]


def windows(books_ids, tokens, rows):
    """Round-robin non-overlapping windows: [(book index, token offset)], at most `rows`."""
    out, k = [], 0
    while len(out) < rows:
        added = False
        for b, ids in enumerate(books_ids):
            if (k + 1) * tokens <= len(ids) and len(out) < rows:
                out.append((b, k * tokens))
                added = True
        if not added:
            break
        k += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triforce", required=True, help="the triforce binary (its tokenizer)")
    ap.add_argument("--model", required=True, help="the target .gguf or checkpoint whose tokenizer encodes")
    ap.add_argument("--books", required=True, help="folder of *.txt books (experiments/prompts/make_default_prompts.sh)")
    ap.add_argument("--tokens", type=int, required=True, help="tokens per row (the sweep's largest context)")
    ap.add_argument("--rows", type=int, required=True, help="rows (prompts) to write")
    ap.add_argument("--out", required=True, help="the .npy to write; OUT.json describes each row")
    a = ap.parse_args()
    if a.tokens < 1 or a.rows < 1:
        sys.exit("heldout_prompts.py: --tokens and --rows must be at least 1, got %d and %d" % (a.tokens, a.rows))
    books = sorted(f for f in os.listdir(a.books) if f.endswith(".txt")) if os.path.isdir(a.books) else []
    if not books:
        sys.exit("heldout_prompts.py: --books %s: no *.txt books (experiments/prompts/make_default_prompts.sh)" % a.books)
    books_ids, meta = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in books:
            with open(os.path.join(a.books, name), encoding="utf-8") as f:
                text = f.read()
            c = heldout.split_point(text)
            books_ids.append(tokenize(a.triforce, a.model, heldout.split(text)[1], tmp))
            meta.append({"book": name, "chars": len(text), "heldout_from_char": c + 1,
                         "heldout_tokens": len(books_ids[-1])})
    picked = windows(books_ids, a.tokens, a.rows)
    if len(picked) < a.rows:
        sys.exit("heldout_prompts.py: --rows %d: the held-out parts of %s hold only %d non-overlapping windows of "
                 "%d tokens (held-out tokens per book: %s)" % (a.rows, a.books, len(picked), a.tokens,
                                                               ", ".join(str(len(i)) for i in books_ids)))
    write_npy_i32(a.out, [books_ids[b][o:o + a.tokens] for b, o in picked])
    stem = os.path.splitext(os.path.basename(a.out))[0]
    # The sweep names row r of a 2-D array stem#r (a single row: stem).
    name = (lambda r: stem) if len(picked) == 1 else (lambda r: "%s#%d" % (stem, r))
    desc = {"rule": heldout.RULE, "tokens": a.tokens, "books": meta,
            "rows": [{"prompt": name(r), "book": meta[b]["book"], "heldout_token_offset": o}
                     for r, (b, o) in enumerate(picked)]}
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(desc, f, indent=1)
    print("%s: %d held-out prompts of %d tokens (%s)" % (a.out, len(picked), a.tokens,
                                                        ", ".join(sorted({meta[b]["book"] for b, _ in picked}))))


if __name__ == "__main__":
    main()
