#!/usr/bin/env python3
"""What the measured speculative runs would give if every step ran at its HBM floor (issue 20 against issue 17).

MODELLED, NOT MEASURED: each run keeps its own measured step counts (steps of every level, tokens drafted,
tokens generated, from the engine's --json levels), and every step is charged its floor, the bytes it must
read over the GPU's HBM read bandwidth:
  target or middle-level step = all weights (the tied lm_head included) + the K/V of its cache,
  draft step                  = the draft's own layers + its output head + the K/V of its StreamingLLM window.
A verification of g + 1 rows reads the same bytes as a one-row step (weights and K/V once), so it is charged
one step; ar is charged its one-row step at the full context. The floor speedup is then
  tokens * T_ar / (sum over levels of steps * T_level + drafted * T_draft)
next to the measured speedup (ar's decode ms/token over the method's, same process, same prefill).

The geometry comes from the draft's config.json, whose triforce_shared_embedding block records the target's.

  python3 experiments/science/floor_model.py EVAL.json [EVAL.json ...] [--draft DIR] [--bw 4.22e12] [--md OUT]
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DRAFT = os.path.join(HERE, "..", "draft", "smollm2-135m-draft")


def layer_params(g):
    h, i = g["hidden_size"], g["intermediate_size"]
    hd = g.get("head_dim", h // g["num_attention_heads"])
    q, kv = g["num_attention_heads"] * hd, g["num_key_value_heads"] * hd
    return h * (q + 2 * kv) + q * h + 3 * h * i


def kv_bytes_per_slot(g, dtype_bytes):
    hd = g.get("head_dim", g["hidden_size"] // g["num_attention_heads"])
    return g["num_hidden_layers"] * 2 * g["num_key_value_heads"] * hd * dtype_bytes


def geometry(draft_dir, dtype_bytes):
    cfg = json.load(open(os.path.join(draft_dir, "config.json")))
    tgt = cfg.get("triforce_shared_embedding", {}).get("target")
    if not tgt:
        sys.exit(f"floor_model: {draft_dir}/config.json: no triforce_shared_embedding.target geometry")
    # The draft's reduced head (FR-Spec): its vocab tensor's length, where the safetensors header has one.
    head_rows = cfg["vocab_size"]
    st = os.path.join(draft_dir, "model.safetensors")
    if os.path.exists(st):
        with open(st, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            hdr = json.loads(f.read(n))
        v = hdr.get("triforce_draft_vocab")
        head_rows = v["shape"][0] if v else cfg["vocab_size"]
    t_weights = (tgt["num_hidden_layers"] * layer_params(tgt) + tgt["vocab_size"] * tgt["hidden_size"]) * dtype_bytes
    d_weights = (cfg["num_hidden_layers"] * layer_params(cfg) + head_rows * cfg["hidden_size"]) * dtype_bytes
    return {"target_weights": t_weights, "target_kv_slot": kv_bytes_per_slot(tgt, dtype_bytes),
            "draft_weights": d_weights, "draft_kv_slot": kv_bytes_per_slot(cfg, dtype_bytes),
            "draft_head_rows": head_rows}


def cache_slots(spec, context):
    """Slots a level's cache holds: target@retrieval:B/C -> B, @streaming:S/W -> S + W, plain -> the context."""
    m = re.search(r"@retrieval:(\d+)/", spec)
    if m:
        return int(m.group(1))
    m = re.search(r"@streaming:(\d+)/(\d+)", spec)
    if m:
        return int(m.group(1)) + int(m.group(2))
    return context


def run_floor(r, geo, bw):
    chain = [s.strip() for s in r["chain"].split(">")]
    if len(chain) != len(r["levels"]) + 1:
        raise ValueError(f"chain {r['chain']!r} has {len(chain)} members for {len(r['levels'])} levels")
    ctx = r["context"]
    t_ar = (geo["target_weights"] + ctx * geo["target_kv_slot"]) / bw
    draft_slots = cache_slots(chain[0], ctx)
    t_draft = (geo["draft_weights"] + draft_slots * geo["draft_kv_slot"]) / bw
    total = r["levels"][0]["drafted"] * t_draft  # every drafted token is one draft step
    per_level = []
    for lv, member in zip(r["levels"], chain[1:]):
        t = (geo["target_weights"] + cache_slots(member, ctx) * geo["target_kv_slot"]) / bw
        total += lv["steps"] * t
        per_level.append((member, lv["steps"], t))
    top = r["levels"][-1]
    tokens = top["steps"] * top["tau"]
    return {"t_ar_us": t_ar * 1e6, "t_draft_us": t_draft * 1e6, "levels": per_level,
            "floor_speedup": tokens * t_ar / total,
            "measured_speedup": r["ar_decode_ms_per_token"] / r["decode_ms_per_token"],
            "measured_ar_over_floor": r["ar_decode_ms_per_token"] * 1e-3 / t_ar}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("evals", nargs="+", help="eval JSONs (experiments/draft/eval_draft.sh) with per-run levels")
    ap.add_argument("--draft", default=DEFAULT_DRAFT, help="the draft's folder (its config.json gives both geometries)")
    ap.add_argument("--bw", type=float, default=4.22e12, help="HBM read bytes/s (the H200's measured 4.22e12)")
    ap.add_argument("--dtype-bytes", type=int, default=2, help="bytes per weight and K/V element (bf16: 2)")
    ap.add_argument("--md", help="also write the table here (markdown)")
    a = ap.parse_args()
    geo = geometry(a.draft, a.dtype_bytes)
    lines = [
        "MODELLED (floor costs with measured step counts), beside MEASURED speedups over ar, T = 0",
        f"bandwidth {a.bw:.3g} B/s; target weights {geo['target_weights'] / 1e6:.1f} MB + "
        f"{geo['target_kv_slot']} B/slot; draft {geo['draft_weights'] / 1e6:.1f} MB "
        f"({geo['draft_head_rows']}-row head) + {geo['draft_kv_slot']} B/slot",
        "",
        "| method | prompt | context | ar floor µs | ar measured / floor | level steps (floor µs each) | "
        "measured speedup | floor speedup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in a.evals:
        try:
            runs = json.load(open(path))["runs"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"floor_model: {path}: expected an eval JSON with 'runs' ({e})")
        for r in runs:
            if r.get("temperature", 0) != 0 or not r.get("levels"):
                continue
            try:
                f = run_floor(r, geo, a.bw)
            except (KeyError, ValueError) as e:
                sys.exit(f"floor_model: {path}: run {r.get('prompt')} {r.get('method')}: {e}")
            lv = "; ".join(f"{m}: {s} ({t * 1e6:.0f})" for m, s, t in f["levels"])
            lines.append(f"| {r['method']} | {r['prompt']} | {r['context']} | {f['t_ar_us']:.0f} | "
                         f"{f['measured_ar_over_floor']:.1f}× | draft {f['t_draft_us']:.0f} µs; {lv} | "
                         f"{f['measured_speedup']:.2f}× | {f['floor_speedup']:.2f}× |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.md:
        with open(a.md + ".tmp", "w") as out:
            out.write(text)
        os.replace(a.md + ".tmp", a.md)


if __name__ == "__main__":
    main()
