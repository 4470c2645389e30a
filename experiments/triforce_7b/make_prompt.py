#!/usr/bin/env python3
"""The study's prompt: N token ids (i * 7919) % vocab as a 1-D int32 .npy (a random-weight model sees no text).

    python3 experiments/triforce_7b/make_prompt.py OUT.npy [N] [VOCAB]
"""
import sys

import numpy as np

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 122880
vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 32000
ids = (np.arange(n, dtype=np.int64) * 7919 % vocab).astype(np.int32)
np.save(out, ids)
print(f"{out}: {n} ids")
