"""Our PyTorch target (llama_torch.py) against the C++ model: the same tokens
through `triforce logits` and through llama_torch in f32 on the CPU; their
logits must agree within --tol of the largest |logit| (f32 vs f32: only the
summation order differs). With --draft, the same for a draft that borrows the
target's embedding (`triforce logits --draft`). Exit 1 on a mismatch.

  python check_target.py --triforce build-cpu/triforce --model M.gguf [--draft DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--triforce", required=True)
    ap.add_argument("--model", required=True, help=".gguf or HF folder")
    ap.add_argument("--draft", help="a draft folder borrowing the target's embedding: check it instead")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=2e-4)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    target, cfg, embed = lt.build_target(a.model, "cpu", torch.float32)
    ids = torch.randint(0, cfg.vocab, (1, a.tokens), generator=torch.Generator().manual_seed(a.seed))
    model = lt.load_draft(a.draft, embed, "cpu", torch.float32) if a.draft else target
    with torch.no_grad():
        ref = model(ids)[0].numpy()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "l.npy")
        cmd = [a.triforce, "logits", "--model", a.model, "--tokens", ",".join(map(str, ids[0].tolist())), "--out", out]
        if a.draft:
            cmd += ["--draft", a.draft]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        got = np.load(out)
    err = lt.max_rel_err(got, ref)
    same_argmax = float((got.argmax(-1) == ref.argmax(-1)).mean())
    what = f"draft {a.draft}" if a.draft else f"target {a.model}"
    print(f"{what}: {a.tokens} tokens, max |C++ - torch| / max |torch| = {err:.2e}, argmax agree {same_argmax:.3f}")
    if err > a.tol:
        print(f"FAIL: above the tolerance {a.tol}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
