"""A tiny draft that borrows its target's embedding, exported exactly as
train_draft.py exports the real one (llama_torch.export_draft): the target's
first layer plus seeded noise, so the draft is not a copy of anything.

  python make_tiny_draft.py --target tests/fixtures/hf/gqa_f32 --out tests/fixtures/draft/gqa_f32_draft
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="HF folder or .gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    target, cfg, embed = lt.build_target(a.target, "cpu", torch.float32)
    dc = lt.Config(cfg.vocab, cfg.hidden, cfg.inter, a.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.eps,
                   cfg.theta, cfg.max_pos)
    draft = lt.Llama(dc, embed)
    sd = {}
    for i in range(a.layers):
        for k, v in target.layers[i % cfg.layers].state_dict().items():
            sd[f"layers.{i}.{k}"] = v + 0.05 * v.std() * torch.randn_like(v)
    sd["norm.weight"] = target.norm.weight.clone()
    draft.load_state_dict(sd)
    lt.export_draft(draft, cfg, embed, a.out, {"made_by": "experiments/draft/make_tiny_draft.py", "seed": a.seed})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
