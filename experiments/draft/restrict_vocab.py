#!/usr/bin/env python3
"""Give an already trained draft a reduced vocabulary (FR-Spec) without retraining: copy DRAFT_DIR to OUT_DIR
with the I32 tensor triforce_draft_vocab (src/model/draft_vocab.h) added to its model.safetensors. The ids are
the K most frequent in the given token files (.npy int32, e.g. `triforce tokenize --out x.npy` of the train
split of the default books), ties and any ids never seen filled by the lowest id (byte-level BPE ids are roughly
in merge order, i.e. frequency order on the tokenizer's own corpus). train_draft.py --vocab K picks its ids from
the target's generations instead and trains the head on them; this is the cheap variant for measuring.

  python3 experiments/draft/restrict_vocab.py DRAFT_DIR OUT_DIR K TOKENS.npy [TOKENS.npy ...]
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    src, dst, k, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    cfg = json.load(open(os.path.join(src, "config.json")))
    vocab = int(cfg["vocab_size"])
    if not 0 < k < vocab:
        raise SystemExit(f"K {k}: expected 0 < K < the vocabulary ({vocab})")
    counts = np.zeros(vocab, dtype=np.int64)
    for f in files:
        t = np.load(f)
        if t.dtype != np.int32 or t.ndim != 1 or (len(t) and (t.min() < 0 or t.max() >= vocab)):
            raise SystemExit(f"{f}: expected int32 [n] token ids in [0, {vocab})")
        counts += np.bincount(t, minlength=vocab)
    order = np.lexsort((np.arange(vocab), -counts))  # by count, descending; then by id
    ids = np.sort(order[:k]).astype(np.int32)
    st = os.path.join(src, "model.safetensors")
    raw = open(st, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    if "triforce_draft_vocab" in header:
        raise SystemExit(f"{st}: already has triforce_draft_vocab")
    data = raw[8 + n:]
    end = max(v["data_offsets"][1] for name, v in header.items() if name != "__metadata__")
    header["triforce_draft_vocab"] = {"dtype": "I32", "shape": [k], "data_offsets": [end, end + 4 * k]}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f != "model.safetensors" and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(dst, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(h)) + h + data[:end] + ids.tobytes())
    seen = int((counts > 0).sum())
    print(f"{dst}: {k} ids, {min(seen, k)} seen in {int(counts.sum())} tokens, "
          f"coverage of those tokens {counts[ids].sum() / max(1, counts.sum()):.4f}")


if __name__ == "__main__":
    main()
