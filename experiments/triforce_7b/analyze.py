#!/usr/bin/env python3
"""The TriForce-at-scale study: tables, the analytic model beside every measured speedup, and plots.

    python3 experiments/triforce_7b/analyze.py --out DIR SWEEP.h5 [SWEEP.h5 ...] [--peers PEERS.jsonl]

Reads `triforce sweep` files (docs/RESULTS.md). For every speculative run it fills the paper's cost model with
the run's own step times (../shared/reference/triforce.md, 1.7):

    ms/token ~ (T3 + m * (D + T2)) / E,   speedup ~ ar_ms / that   (paper form: E * T3 / (T3 + m (D + T2)))

T3 = the top level's mean verification step (ns_l2 / steps_l2), T2 = the middle level's mean step (ns_l1 /
steps_l1), D = the drafter's time per middle step (gamma1 draft steps: draft_ns / steps_l1), m = middle steps
per top step, E = tokens committed per top step. What the model leaves out is the loop's own bookkeeping
(rollbacks, host copies; `other`) and re-retrieval, so measured / model - 1 says how much time the model does not
account for. Writes DIR/summary.json, DIR/summary.md (the tables) and PNG plots.
"""
import argparse
import json
import math
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def attr(g, name, default=None):
    v = g.attrs.get(name, default)
    if isinstance(v, bytes):
        return v.decode()
    if hasattr(v, "item"):
        return v.item()
    return v


def sim_rates(g):
    for name in ("simulated_acceptance", "simulate_acceptance"):
        v = attr(g, name)
        if v is None:
            continue
        if isinstance(v, str):
            if v in ("", "none", "false"):
                return None
            return [float(x) for x in v.replace("/", ",").split(",") if x]
        try:
            vals = [float(x) for x in v]
            return vals or None
        except TypeError:
            return None if v in (0, -1) else [float(v)]
    return None


def load(path):
    runs = []
    with h5py.File(path, "r") as f:
        meta = {k: attr(f, k) for k in ("name", "git_sha", "gpu", "command", "target", "device")}
        by_index = {}
        for _, g in f["runs"].items():
            r = {k: attr(g, k) for k in g.attrs.keys()}
            r["sim"] = sim_rates(g)
            r["file"] = os.path.basename(path)
            r["sweep"] = meta["name"]
            by_index[int(r["index"])] = r
        for r in by_index.values():
            b = by_index.get(int(r.get("baseline_index", -1)))
            r["ar_ms"] = b["decode_ms_per_token"] if b else float("nan")
            r["ar_e2e_ms"] = b["e2e_ms_per_token"] if b else float("nan")
            r["ar_total_ms"] = b["total_ns"] / 1e6 if b else float("nan")
            runs.append(r)
    return meta, runs


def from_generate(path, ar, label):
    """A `triforce generate --json` run as a sweep-like row (ms/token of `ar` from its own run)."""
    with open(path) as f:
        j = json.loads(f.read().strip().splitlines()[-1])
    lv = {l["level"]: l for l in j.get("levels", [])}
    t = j["times_ms"]
    r = {"method": j["method"], "draft": j["chain"].split(" > ")[0], "gamma1": j["gammas"][0],
         "gamma2": j["gammas"][-1], "budget": j["budget"], "context": j["n_prompt"], "n_generated": j["n_generated"],
         "decode_ms_per_token": j["decode_ms_per_token"], "e2e_ms_per_token": j["e2e_ms_per_token"],
         "prefill_ms": j["prefill_ms"], "ar_ms": ar["decode_ms_per_token"], "ar_e2e_ms": ar["e2e_ms_per_token"],
         "ar_total_ms": ar["prefill_ms"] + ar["decode_ms_per_token"] * j["n_generated"], "tokens_equal_ar": -1,
         "sim": j.get("simulated_acceptance") or None, "file": os.path.basename(path), "sweep": label, "index": -1,
         "n_levels": len(lv), "draft_ns": t["draft"] * 1e6, "total_ns": t["total"] * 1e6,
         "draft_prefill_ns": t.get("draft_prefill", 0) * 1e6, "retrieval_build_ns": t["retrieval_build"] * 1e6,
         "setup_ns": t["setup"] * 1e6, "retrieval_rebuild_ns": t["retrieval_rebuild"] * 1e6, "prefill_ns": t["prefill"] * 1e6}
    for l, x in lv.items():
        r[f"steps_l{l}"], r[f"ns_l{l}"] = x["steps"], x["ms"] * 1e6
        r[f"alpha_l{l}"] = x["alpha"]
    r["speedup_vs_ar"] = r["ar_ms"] / r["decode_ms_per_token"]
    # ar's end to end for the same token count: its prefill + n x its decode ms/token (its own run was shorter).
    r["speedup_e2e_vs_ar"] = r["ar_total_ms"] / t["total"]
    r["other_ms_per_token"] = (t["decode"] - t["draft"] - t["middle"] - t["verify"] - t["retrieval_rebuild"]) / j["n_generated"]
    return r


def model(r):
    s1, s2 = r.get("steps_l1", 0), r.get("steps_l2", 0)
    if not s1 or not s2 or r.get("n_levels", 0) != 2:
        return None
    T3 = r["ns_l2"] / s2 / 1e6
    T2 = r["ns_l1"] / s1 / 1e6
    D = r["draft_ns"] / s1 / 1e6
    m = s1 / s2
    E = r["n_generated"] / s2
    ms = (T3 + m * (D + T2)) / E
    return {"T3_ms": T3, "T2_ms": T2, "draft_per_middle_step_ms": D, "T1_ms": D / max(1, r.get("gamma1", 2) or 2),
            "m": m, "E": E, "model_ms_per_token": ms, "model_speedup": r["ar_ms"] / ms,
            "paper_form_speedup": E * T3 / (T3 + m * (D + T2)),
            "measured_over_model": (r["ar_ms"] / r["decode_ms_per_token"]) / (r["ar_ms"] / ms)}


def fmt(v, p=2):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{p}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--peers", help="JSON lines from experiments/peers/hf_static_compile.py")
    ap.add_argument("--generate", nargs="*", default=[], help="`triforce generate --json` lines (e.g. offloaded runs)")
    ap.add_argument("--generate-ar", help="the ar run the --generate runs are compared with")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    metas, runs = [], []
    for p in a.files:
        m_, r_ = load(p)
        metas.append(m_)
        runs += r_
    if a.generate:
        with open(a.generate_ar) as f:
            ar = json.loads(f.read().strip().splitlines()[-1])
        runs += [from_generate(p, ar, "offloaded") for p in a.generate]
    rows = []
    for r in runs:
        if r["method"] == "ar":
            continue
        mo = model(r)
        row = {k: r.get(k) for k in ("sweep", "file", "index", "method", "draft", "gamma1", "gamma2", "budget",
                                     "context", "n_generated", "alpha_l1", "alpha_l2", "decode_ms_per_token",
                                     "e2e_ms_per_token", "speedup_vs_ar", "speedup_e2e_vs_ar", "ar_ms", "ar_e2e_ms",
                                     "prefill_ms", "tokens_equal_ar")}
        row["simulated"] = r["sim"]
        for k in ("draft_prefill_ns", "retrieval_build_ns", "setup_ns", "retrieval_rebuild_ns", "total_ns",
                  "prefill_ns"):
            if k in r:
                row[k.replace("_ns", "_ms")] = r[k] / 1e6
        row["other_ms_per_token"] = r.get("other_ms_per_token")
        row["e2e_total_ms"] = r.get("total_ns", 0) / 1e6
        row["ar_e2e_total_ms"] = r["ar_total_ms"]
        row["speedup_e2e_vs_ar"] = r.get("speedup_e2e_vs_ar")
        if mo:
            row.update(mo)
        rows.append(row)
    peers = []
    if a.peers and os.path.exists(a.peers):
        with open(a.peers) as f:
            peers = [json.loads(l) for l in f if l.strip()]
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"sweeps": metas, "runs": rows, "peers": peers}, f, indent=1, default=str)

    lines = ["| sweep | draft | γ1/γ2 | acceptance (set) | α1 / α2 measured | ms/token | ar ms/token | speedup "
             "| model speedup | measured / model | T1 / T2 / T3 ms | m | E | other ms/token |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["sweep"], str(r["draft"]), str(r["simulated"]))):
        sim = "real" if not r["simulated"] else "SIMULATED " + "/".join(f"{x:g}" for x in r["simulated"])
        lines.append(f"| {r['sweep']} | {r['draft']} | {r['gamma1']}/{r['gamma2']} | {sim} | "
                     f"{fmt(r['alpha_l1'], 3)} / {fmt(r['alpha_l2'], 3)} | {fmt(r['decode_ms_per_token'])} | "
                     f"{fmt(r['ar_ms'])} | {fmt(r['speedup_vs_ar'])}x | {fmt(r.get('model_speedup'))}x | "
                     f"{fmt(r.get('measured_over_model'), 3)} | {fmt(r.get('T1_ms'), 3)} / {fmt(r.get('T2_ms'))} / "
                     f"{fmt(r.get('T3_ms'))} | {fmt(r.get('m'))} | {fmt(r.get('E'))} | {fmt(r['other_ms_per_token'], 3)} |")
    lines += ["", "| sweep | draft | acceptance | prefill ms | draft prefill ms (% of prefill) | retrieval build ms "
              "| setup ms | e2e 256 tokens s (ar) | e2e speedup |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["sweep"], str(r["draft"]), str(r["simulated"]))):
        sim = "real" if not r["simulated"] else "SIMULATED " + "/".join(f"{x:g}" for x in r["simulated"])
        dp = r.get("draft_prefill_ms")
        pct = f" ({100 * dp / r['prefill_ms']:.2f}%)" if dp is not None and r.get("prefill_ms") else ""
        lines.append(f"| {r['sweep']} | {r['draft']} | {sim} | {fmt(r.get('prefill_ms'), 0)} | {fmt(dp)}{pct} | "
                     f"{fmt(r.get('retrieval_build_ms'))} | {fmt(r.get('setup_ms'))} | "
                     f"{fmt(r['e2e_total_ms'] / 1e3)} ({fmt(r['ar_e2e_total_ms'] / 1e3)}) | "
                     f"{fmt(r['speedup_e2e_vs_ar'])}x |")
    if peers:
        lines += ["", "| peer | context | ms/token, median | prefill ms | median / floor |", "|---|---|---|---|---|"]
        for p in peers:
            lines.append(f"| {p.get('method', p.get('label', 'peer'))} | {p.get('context', p.get('prompt_len'))} | "
                         f"{fmt(p.get('ms_per_token_median'))} (mean {fmt(p.get('decode_ms_per_token'))}) | "
                         f"{fmt(p.get('prefill_ms'), 0)} | {fmt(p.get('x_floor_median'))} |")
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    # The acceptance grid: on-chip runs of one draft (the offloaded ones live on another scale).
    grid = [r for r in rows if r["simulated"] and len(r["simulated"]) == 2 and r.get("model_speedup")
            and r["sweep"] != "offloaded" and r["draft"] == "synthetic:llama-68m"]
    if grid:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for a1 in sorted({r["simulated"][0] for r in grid}):
            pts = sorted((r["simulated"][1], r["speedup_vs_ar"], r["model_speedup"]) for r in grid
                         if r["simulated"][0] == a1)
            ln, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"measured, α1 = {a1:g}")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "x--", color=ln.get_color(),
                    label=f"model (same run's step times), α1 = {a1:g}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("α2 (retrieval level → target), SIMULATED")
        ax.set_ylabel("decode speedup over ar")
        ax.set_title("TriForce on one H200, 7B/122,880 (SIMULATED acceptance)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "speedup_vs_acceptance.png"), dpi=110)
    bars = [r for r in rows if r.get("model_speedup") and r["sweep"] not in ("offloaded",) and "grid" not in r["sweep"]]
    if bars:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        labels, parts = [], {"draft": [], "middle": [], "verify": [], "other": []}
        for r in bars[:12]:
            labels.append(f"{r['draft'].replace('synthetic:', '')}\n"
                          + ("real" if not r["simulated"] else "SIMULATED " + "/".join(f"{x:g}" for x in r["simulated"])))
            E = r["E"]
            parts["draft"].append(r["draft_per_middle_step_ms"] * r["m"] / E)
            parts["middle"].append(r["T2_ms"] * r["m"] / E)
            parts["verify"].append(r["T3_ms"] / E)
            parts["other"].append(max(0.0, r["decode_ms_per_token"] - r["model_ms_per_token"]))
        bottom = [0.0] * len(labels)
        for k, v in parts.items():
            ax.bar(range(len(labels)), v, bottom=bottom, label=k)
            bottom = [b + x for b, x in zip(bottom, v)]
        ax.set_xticks(range(len(labels)), labels, fontsize=6)
        ax.set_ylabel("decode ms/token")
        ax.set_title("Where a token's time goes, on chip (per top step / E)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "latency_breakdown.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
