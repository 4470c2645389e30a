#!/usr/bin/env python3
"""Plots from a `triforce sweep` (or `triforce merge`) HDF5 file.

    python3 experiments/plot.py RESULTS.h5 [--out DIR] [--peers PEERS.jsonl ...]

Writes six PNGs into DIR (default: next to the file, in <name>_plots/):
  l2_acceptance_vs_budget.png   acceptance of the top level (L2: retrieval-cache target vs full target) vs budget
  acceptance_vs_chunk.png       acceptance per level vs retrieval chunk size
  speedup_vs_context.png        decode speedup over ar at the same point vs context length
  latency_breakdown.png         decode ms/token split by phase (draft, middle, verify, re-retrieval, other)
  per_position_acceptance.png   P(accepted length > i) per draft position, from the accepted-length histograms
  gamma_ablation.png            speedup and acceptance vs gamma1 and gamma2
  simulated_speedup.png         (files with --simulate-acceptance runs only) speedup vs the simulated top-level
                                rate, one line per lower-level rate
Runs with simulated acceptance (run attribute simulated_acceptance, docs/RESULTS.md) are never mixed with
real ones: their legend labels say "SIMULATED a=A1/A2" and the title says the file holds them.
Points that share a plotted value are averaged (error bars: standard deviation). A plot whose
parameter the sweep did not vary still shows the points it has; one without any says so.
The layout it reads is docs/RESULTS.md.

--peers FILE.jsonl (repeatable): rows of a peer measured on the same GPU
(experiments/peers/hf_static_compile.py; one JSON object per line with method, model, context,
decode_ms_per_token, and optionally label, floor_ms_per_token). Rows for the sweep's target are
overlaid: speedup_vs_context gains each method's speedup over the peer at the same context
(dashed), latency_breakdown a hatched bar per peer and context, and a seventh plot,
ms_per_token_vs_context.png, puts decode ms/token of every method, the peers and their bandwidth
floor side by side. Without --peers the six plots are as above.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

import h5py
import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PHASES = [("draft_ms_per_token", "draft"), ("middle_ms_per_token", "middle levels"),
          ("verify_ms_per_token", "top verify"), ("rebuild_ms_per_token", "re-retrieval"),
          ("other_ms_per_token", "other")]


def load(path):
    with h5py.File(path, "r") as f:
        if f.attrs.get("schema") not in ("triforce-sweep", b"triforce-sweep"):
            sys.exit(f"{path}: not a triforce sweep file (root attribute schema)")
        table = f["summary"][:]
        rows = []
        for r in table:
            row = {}
            for name in table.dtype.names:
                v = r[name]
                row[name] = v.decode() if isinstance(v, bytes) else v.item()
            rows.append(row)
        hists = {}
        simulated = {}
        for name, g in f["runs"].items():
            sim = g.attrs.get("simulated_acceptance", "")
            simulated[int(g.attrs["index"])] = sim.decode() if isinstance(sim, bytes) else str(sim)
            n = int(g.attrs.get("n_levels", 0))
            hists[int(g.attrs["index"])] = {l: g[f"accepted_hist_l{l}"][:] for l in range(1, n + 1)
                                            if f"accepted_hist_l{l}" in g}
        title = f"{f.attrs.get('name', '')} | {os.path.basename(str(f.attrs.get('target', '')))} | " \
                f"{f.attrs.get('device', '')} | git {str(f.attrs.get('git_sha', ''))[:10]}"
    for r in rows:
        r["simulated_acceptance"] = simulated.get(int(r["index"]), "")
    if any(r["simulated_acceptance"] for r in rows):
        title += "\nincludes SIMULATED acceptance runs (--simulate-acceptance: decisions drawn, tokens not the target's)"
    return rows, hists, title


def finite(v):
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def mean_std(vals):
    a = np.asarray(vals, dtype=float)
    return float(a.mean()), float(a.std()) if len(a) > 1 else 0.0


def series(rows, x, y, group, keep=lambda r: True):
    """{group label: ([x], [mean y], [std y])} over rows with finite x and y."""
    acc = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if not keep(r) or not finite(r.get(x)) or not finite(r.get(y)) or r.get(x) == -1:
            continue
        acc[group(r)][r[x]].append(r[y])
    out = {}
    for g, by_x in sorted(acc.items()):
        xs = sorted(by_x)
        ms = [mean_std(by_x[v]) for v in xs]
        out[g] = (xs, [m for m, _ in ms], [s for _, s in ms])
    return out


def draw(ax, data, xlabel, ylabel, logx=False):
    if not data:
        ax.text(0.5, 0.5, "no runs in this file vary this", ha="center", va="center", transform=ax.transAxes)
    for label, (xs, ys, es) in data.items():
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx and data:
        ax.set_xscale("log", base=2)
    elif data:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if data:
        ax.legend(fontsize=7)


def spec_rows(r):
    return r["method"] != "ar"


def sim_tag(r):
    """' SIMULATED a=A1/A2' for a simulated run, '' for a real one."""
    return f" SIMULATED a={r['simulated_acceptance']}" if r.get("simulated_acceptance") else ""


def label(r, *keys):
    parts = [r["method"]]
    for k in keys:
        parts.append(f"{k}={r[k]:g}" if isinstance(r[k], float) else f"{k}={r[k]}")
    return " ".join(parts) + sim_tag(r)


def save(fig, out, name, title):
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PEER_KEYS = ("method", "model", "context", "decode_ms_per_token")


def load_peers(paths):
    """Peer rows from JSON-lines files; a bad line stops with one line naming the file and line."""
    rows = []
    for path in paths:
        try:
            lines = open(path).read().splitlines()
        except OSError as e:
            sys.exit(f"--peers {path}: {e.strerror}")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON object ({e.msg})")
            if not isinstance(r, dict):
                sys.exit(f"{path}:{n}: not a JSON object")
            missing = [k for k in PEER_KEYS if k not in r]
            if missing:
                sys.exit(f"{path}:{n}: peer row lacks {', '.join(missing)} (expected {', '.join(PEER_KEYS)})")
            if not isinstance(r["context"], int) or not isinstance(r["decode_ms_per_token"], (int, float)) \
                    or r["decode_ms_per_token"] <= 0:
                sys.exit(f"{path}:{n}: context must be an integer and decode_ms_per_token a positive number")
            rows.append(r)
    return rows


def same_model(a, b):
    a, b = str(a), str(b)
    return a == b or os.path.basename(os.path.normpath(a)) == os.path.basename(os.path.normpath(b))


def peer_name(p):
    return p["method"] + (f" [{p['label']}]" if p.get("label") else "")


def peer_series(peers, y):
    """{peer name: ([context], [mean y], [std y])}."""
    acc = defaultdict(lambda: defaultdict(list))
    for p in peers:
        if finite(p.get(y)):
            acc[peer_name(p)][p["context"]].append(p[y])
    return {g: (sorted(v), [mean_std(v[c])[0] for c in sorted(v)], [mean_std(v[c])[1] for c in sorted(v)])
            for g, v in sorted(acc.items())}


def speedup_over_peers(rows, peers):
    """{'<method> T=.. over <peer>': series}: the peer's decode ms/token / the run's, at the same context."""
    by = defaultdict(list)
    for p in peers:
        by[(peer_name(p), p["context"])].append(p["decode_ms_per_token"])
    out = []
    for name in sorted({peer_name(p) for p in peers}):
        tagged = []
        for r in rows:
            ms = by.get((name, r["context"]))
            if ms and finite(r.get("decode_ms_per_token")) and r["decode_ms_per_token"] > 0:
                tagged.append(dict(r, over_peer=float(np.mean(ms)) / r["decode_ms_per_token"], peer=name))
        out.append(series(tagged, "context", "over_peer", lambda r: label(r, "temperature") + f" over {r['peer']}"))
    merged = {}
    for d in out:
        merged.update(d)
    return merged


def plot_ms_per_token(rows, peers, out, title):
    fig, ax = plt.subplots(figsize=(6, 4))
    data = series(rows, "context", "decode_ms_per_token", lambda r: label(r, "temperature"))
    draw(ax, data, "context length (tokens)", "decode ms per token", logx=True)
    for name, (xs, ys, es) in peer_series(peers, "decode_ms_per_token").items():
        ax.errorbar(xs, ys, yerr=es, marker="s", ls="--", capsize=3, label=f"peer: {name}")
    floor = peer_series([dict(p, method="floor", label="") for p in peers], "floor_ms_per_token")
    for _, (xs, ys, _) in floor.items():
        ax.plot(xs, ys, color="black", ls=":", marker="_", label="bandwidth floor (weights + KV) / peak")
    if peers:
        ax.legend(fontsize=7)
        if not data:
            ax.set_xscale("log", base=2)
    return save(fig, out, "ms_per_token_vs_context.png", title)


def plot_all(path, out, peers=None):
    rows, hists, title = load(path)
    overlay = peers is not None
    if overlay:
        with h5py.File(path, "r") as f:
            target = str(f.attrs.get("target", ""))
        mine = [p for p in peers if same_model(p["model"], target)]
        if len(mine) < len(peers):
            others = sorted({str(p["model"]) for p in peers if not same_model(p["model"], target)})
            print(f"--peers: {len(peers) - len(mine)} rows are for other models ({', '.join(others)}), "
                  f"not this sweep's target {target}; left out", file=sys.stderr)
        peers = mine
    os.makedirs(out, exist_ok=True)
    written = []
    # Methods with a retrieval level: their top level is L2 (retrieval-cache target vs full target).
    retrieval = lambda r: r["method"] != "ar" and r.get("resolved_budget", -1) != -1  # noqa: E731
    two_level = lambda r: retrieval(r) and finite(r.get("alpha_l2"))  # noqa: E731

    fig, ax = plt.subplots(figsize=(6, 4))
    draw(ax, series(rows, "resolved_budget", "alpha_top", lambda r: label(r, "context", "temperature"), retrieval),
         "retrieval budget (tokens)", "L2 acceptance (top level)", logx=True)
    written.append(save(fig, out, "l2_acceptance_vs_budget.png", title))

    fig, ax = plt.subplots(figsize=(6, 4))
    data = series(rows, "resolved_chunk", "alpha_top", lambda r: label(r, "context") + " top", retrieval)
    data.update(series(rows, "resolved_chunk", "alpha_l1", lambda r: label(r, "context") + " L1", two_level))
    draw(ax, data, "retrieval chunk size (tokens)", "acceptance", logx=True)
    written.append(save(fig, out, "acceptance_vs_chunk.png", title))

    fig, ax = plt.subplots(figsize=(6, 4))
    draw(ax, series(rows, "context", "speedup_vs_ar", lambda r: label(r, "temperature"), spec_rows),
         "context length (tokens)", "decode speedup over ar", logx=True)
    if overlay and peers:
        for name, (xs, ys, es) in speedup_over_peers(rows, peers).items():
            ax.errorbar(xs, ys, yerr=es, marker="x", ls="--", capsize=3, label=name)
        ax.set_ylabel("decode speedup over ar (solid) / over the peer (dashed)")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    written.append(save(fig, out, "speedup_vs_context.png", title))

    # Latency: one bar per (method, context), averaged over everything else.
    groups = defaultdict(list)
    for r in rows:
        if finite(r.get("decode_ms_per_token")):
            groups[(r["method"] + sim_tag(r), r["context"])].append(r)
    peer_groups = defaultdict(list)
    for p in peers or []:
        peer_groups[(f"peer: {peer_name(p)}", p["context"])].append(p["decode_ms_per_token"])
    keys = sorted(list(groups) + list(peer_groups), key=lambda k: (k[1], k[0]))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(keys) + 2), 4))
    bottom = np.zeros(len(keys))
    for field, name in PHASES:
        vals = np.array([np.nanmean([r.get(field, np.nan) for r in groups[k]]) if k in groups else 0.0
                         for k in keys]) if keys else []
        vals = np.nan_to_num(vals)
        ax.bar(range(len(keys)), vals, bottom=bottom, label=name)
        bottom = bottom + vals
    if peer_groups:  # a peer reports decode time only: one hatched bar, no phases
        vals = [float(np.mean(peer_groups[k])) if k in peer_groups else 0.0 for k in keys]
        ax.bar(range(len(keys)), vals, color="lightgray", hatch="//", edgecolor="gray",
               label="peer decode (no phase split)")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{m}\nctx {c}" for m, c in keys], fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("decode ms per token")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    written.append(save(fig, out, "latency_breakdown.png", title))

    # Per-position acceptance: r_i = P(a > i) from the summed accepted-length histograms.
    fig, ax = plt.subplots(figsize=(6, 4))
    summed = defaultdict(lambda: None)
    by_index = {int(r["index"]): r for r in rows}
    for idx, levels in hists.items():
        r = by_index.get(idx)
        if r is None:
            continue
        top = max(levels) if levels else 0
        for l, h in levels.items():
            key = f"{r['method']}{sim_tag(r)} " + ("top" if l == top else f"L{l}")
            cur = summed[key]
            if cur is None or len(cur) < len(h):
                cur = np.pad(cur if cur is not None else np.zeros(0), (0, len(h) - (0 if cur is None else len(cur))))
            cur = cur.copy()
            cur[: len(h)] += h
            summed[key] = cur
    any_drawn = False
    for key, h in sorted(summed.items()):
        steps = h.sum()
        if steps == 0 or len(h) < 2:
            continue
        rate = [h[i + 1:].sum() / steps for i in range(len(h) - 1)]
        ax.plot(range(1, len(rate) + 1), rate, marker="o", ls="-" if key.endswith("top") else "--", label=key)
        any_drawn = True
    if not any_drawn:
        ax.text(0.5, 0.5, "no speculative runs", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=7)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(accepted length >= i)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    written.append(save(fig, out, "per_position_acceptance.png", title))

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, g in enumerate(["gamma1", "gamma2"]):
        keep = lambda r, g=g: spec_rows(r) and r.get(g, -1) != -1  # noqa: E731
        draw(axes[0][col], series(rows, g, "speedup_vs_ar", lambda r: label(r, "context"), keep), g,
             "decode speedup over ar")
        draw(axes[1][col], series(rows, g, "alpha_top", lambda r: label(r, "context"), keep), g,
             "top-level acceptance")
    written.append(save(fig, out, "gamma_ablation.png", title))
    if overlay:
        written.append(plot_ms_per_token(rows, peers, out, title))

    # Simulated acceptance study: speedup vs the top level's simulated rate, a line per lower-level rates.
    sim = [r for r in rows if r.get("simulated_acceptance")]
    if sim:
        for r in sim:
            rates = [float(a) for a in r["simulated_acceptance"].split("/")]
            r["sim_top"] = rates[-1]
            r["sim_lower"] = "/".join(f"{a:g}" for a in rates[:-1])
        fig, ax = plt.subplots(figsize=(6, 4))
        group = lambda r: f"{r['method']} SIMULATED" + (f" a1={r['sim_lower']}" if r["sim_lower"] else "") + \
            f" ctx={r['context']}"  # noqa: E731
        draw(ax, series(sim, "sim_top", "speedup_vs_ar", group), "SIMULATED top-level acceptance rate",
             "decode speedup over ar (real)")
        ax.xaxis.set_major_locator(matplotlib.ticker.AutoLocator())
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        written.append(save(fig, out, "simulated_speedup.png", title))
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--out", help="folder for the PNGs (default: <file stem>_plots next to the file)")
    ap.add_argument("--peers", action="append", metavar="FILE.jsonl",
                    help="peer rows (experiments/peers/hf_static_compile.py --out) to overlay; repeatable")
    a = ap.parse_args()
    out = a.out or os.path.splitext(a.file)[0] + "_plots"
    peers = load_peers(a.peers) if a.peers else None
    for p in plot_all(a.file, out, peers):
        print(p)


if __name__ == "__main__":
    main()
