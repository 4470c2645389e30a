"""Distil a small draft for SmolLM2-135M-Instruct from the target itself.

The draft is a llama of the target's width with --layers layers (initialised
from evenly spaced target layers and the final norm) that SHARES the target's
embedding and tied lm_head: only its layers are trained and exported, and the
C++ loader borrows the target's embedding (config.json triforce_shared_embedding,
src/model/shared_embedding.h). Loss: KL(target softmax || draft softmax) over the
whole vocabulary at every position.

Data (all public domain): the default prompt books (experiments/prompts/
make_default_prompts.sh), split by SPLIT RULE below, plus the target's own
continuations (greedy and T = 0.6) of windows of the train part. The held-out
part is never trained on; eval_draft.sh measures acceptance on it.

SPLIT RULE (heldout.py): for each book, c = the index of the first "\\n" at or
after floor(0.85 * len(text)) (characters of the UTF-8 decoded file); text[:c]
is train, text[c + 1:] is held out.

Tokens come from the harness's own tokenizer (`triforce tokenize`), so the draft
sees exactly what `generate` feeds it.

  python train_draft.py --gguf M.gguf --prompts DIR --triforce BIN --out DIR [--minutes 7] [--device cuda]
  python train_draft.py ... --smoke --device cpu      # a minute on a CPU: wiring only
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heldout  # noqa: E402
import llama_torch as lt  # noqa: E402

MAX_EXPORT_BYTES = 16 * 1024 * 1024


def tokenize(triforce, model, text, tmp):
    src, out = os.path.join(tmp, "t.txt"), os.path.join(tmp, "t.npy")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    subprocess.run([triforce, "tokenize", "--model", model, "--text-file", src, "--out", out, "--no-special"],
                   check=True, stdout=subprocess.DEVNULL)
    return np.load(out).astype(np.int64)


def load_books(a, log):
    books = sorted(glob.glob(os.path.join(a.prompts, "*.txt")))
    if not books:
        raise SystemExit(f"--prompts {a.prompts}: no *.txt books (make them with experiments/prompts/make_default_prompts.sh)")
    if a.smoke:
        books = books[:2]
    train, held = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for b in books:
            with open(b, encoding="utf-8") as f:
                text = f.read()
            if a.smoke:
                text = text[:40000]
            c = heldout.split_point(text)
            train.append(tokenize(a.triforce, a.gguf, text[:c], tmp))
            held.append(tokenize(a.triforce, a.gguf, text[c + 1:], tmp))
            log["data"]["books"].append({"file": os.path.basename(b), "chars": len(text), "split_char": c,
                                         "train_tokens": int(len(train[-1])), "held_out_tokens": int(len(held[-1]))})
    return train, held


def windows(rng, parts, n, length):
    """n random windows of `length` tokens, a part chosen in proportion to its size."""
    sizes = np.array([max(0, len(p) - length) for p in parts], dtype=np.float64)
    if sizes.sum() <= 0:
        raise SystemExit(f"the books are shorter than a {length}-token window")
    which = rng.choice(len(parts), size=n, p=sizes / sizes.sum())
    return np.stack([parts[w][s:s + length] for w, s in ((w, rng.integers(0, len(parts[w]) - length)) for w in which)])


def make_generations(a, target, train, rng, device, log):
    """The target's own continuations of train windows: half greedy, half T = 0.6."""
    gen = torch.Generator(device=device).manual_seed(a.seed)
    out = []
    t0 = time.time()
    for i in range(a.gen_batches):
        prompts = torch.from_numpy(windows(rng, train, a.gen_batch, a.gen_prompt)).to(device)
        temp = 0.0 if i % 2 == 0 else 0.6
        out.append(lt.generate(target, prompts, a.gen_new, temp, gen).cpu())
    g = torch.cat(out) if out else torch.zeros(0, a.gen_prompt + a.gen_new, dtype=torch.long)
    log["data"]["generations"] = {"sequences": int(g.shape[0]), "prompt_tokens": a.gen_prompt,
                                  "new_tokens": a.gen_new, "temperatures": [0.0, 0.6], "seconds": time.time() - t0}
    return g


def init_draft(a, target, cfg, embed_dev):
    """Layers at evenly spaced target depths (first and last included) and the final norm."""
    picks = [round(i * (cfg.layers - 1) / max(1, a.layers - 1)) for i in range(a.layers)]
    dc = lt.Config(cfg.vocab, cfg.hidden, cfg.inter, a.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.eps,
                   cfg.theta, cfg.max_pos)
    draft = lt.Llama(dc, embed_dev)
    sd = {}
    for i, p in enumerate(picks):
        for k, v in target.layers[p].state_dict().items():
            sd[f"layers.{i}.{k}"] = v.float()
    sd["norm.weight"] = target.norm.weight.float()
    draft.load_state_dict(sd)
    return draft.to(embed_dev.device), picks


def kl_and_agree(draft, target, ids, amp):
    """Mean KL(p_target || q_draft) per token, and top-1 agreement."""
    with torch.no_grad(), amp():
        p_logits = target(ids).float()
    with amp():
        q_logits = draft(ids).float()
    logp = torch.log_softmax(p_logits, dim=-1)
    logq = torch.log_softmax(q_logits, dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    agree = (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean()
    return kl, agree


@torch.no_grad()
def evaluate(draft, target, batches, amp):
    ks, ags = [], []
    for ids in batches:
        k, g = kl_and_agree(draft, target, ids, amp)
        ks.append(float(k))
        ags.append(float(g))
    return {"kl": float(np.mean(ks)), "top1_agree": float(np.mean(ags))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="the target, SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--prompts", required=True, help="folder of the default prompt books (*.txt)")
    ap.add_argument("--triforce", required=True, help="the triforce binary (its tokenizer)")
    ap.add_argument("--out", required=True, help="output folder: config.json, model.safetensors, NOTE.md, train_log.json")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=7.0, help="wall-clock budget of the whole run")
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: as many as the budget allows)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gen-batches", type=int, default=4)
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--gen-prompt", type=int, default=256)
    ap.add_argument("--gen-new", type=int, default=256)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--smoke", action="store_true", help="tiny data and steps: checks the wiring on a CPU in a minute")
    a = ap.parse_args()
    if a.smoke:
        a.seq_len, a.batch, a.gen_batches, a.gen_batch, a.gen_prompt, a.gen_new = 64, 2, 2, 2, 16, 16
        a.eval_batches, a.warmup = 1, 2
        a.steps = a.steps or 20
        a.minutes = min(a.minutes, 5.0)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if not 1 <= a.layers <= 4:
        raise SystemExit(f"--layers {a.layers}: expected 1..4")
    t_start = time.time()
    deadline = t_start + 60 * a.minutes
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    dev = torch.device(a.device)
    if a.device == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if a.device == "cuda" else \
        (lambda: torch.autocast("cpu", enabled=False))
    log = {"args": vars(a), "command": " ".join([os.path.basename(sys.executable), "experiments/draft/train_draft.py"] + sys.argv[1:]),
           "data": {"split_rule": heldout.RULE, "books": []},
           "torch": torch.__version__, "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}

    target, cfg, embed = lt.build_target(a.gguf, dev, dtype)
    log["time_load_s"] = time.time() - t_start
    train, held = load_books(a, log)
    gens = make_generations(a, target, train, rng, dev, log)
    log["time_data_s"] = time.time() - t_start

    draft, picks = init_draft(a, target, cfg, embed.to(dev, dtype))
    log["init_layers"] = picks
    eval_rng = np.random.default_rng(a.seed + 1)
    eval_sets = [torch.from_numpy(windows(eval_rng, held, a.batch, a.seq_len)).to(dev) for _ in range(a.eval_batches)]
    log["eval_before"] = evaluate(draft, target, eval_sets, amp)
    print(f"[draft] before training: held-out KL {log['eval_before']['kl']:.3f}, "
          f"top-1 agree {log['eval_before']['top1_agree']:.3f}", flush=True)

    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0,
                            **({"fused": True} if a.device == "cuda" else {}))
    total = a.steps
    losses = []
    step, t_train = 0, time.time()
    gen_order = np.random.default_rng(a.seed + 2)
    reserve = 20.0 if not a.smoke else 5.0  # export + final eval

    def batch_for(step):
        if len(gens) and step % 2 == 1:
            idx = gen_order.integers(0, len(gens), size=max(1, a.batch * a.seq_len // gens.shape[1]))
            return gens[idx].to(dev)
        return torch.from_numpy(windows(rng, train, a.batch, a.seq_len)).to(dev)

    while True:
        if total and step >= total:
            break
        if not total and step == 10:  # fix the schedule from the measured step time: --steps N reproduces it
            per = (time.time() - t_train) / 10
            total = max(11, int((deadline - time.time() - reserve) / per) + 10)
            print(f"[draft] {per * 1e3:.0f} ms/step: {total} steps in the budget", flush=True)
        lr_total = total or 10_000
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / lr_total))))
        for g in opt.param_groups:
            g["lr"] = lr
        ids = batch_for(step)
        kl, agree = kl_and_agree(draft, target, ids, amp)
        opt.zero_grad(set_to_none=True)
        kl.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1 or (total and step == total):
            losses.append({"step": step, "kl": float(kl.detach()), "top1_agree": float(agree), "lr": lr,
                           "s": time.time() - t_start})
            print(f"[draft] step {step}/{total or '?'}: KL {float(kl.detach()):.3f}, agree {float(agree):.3f}, lr {lr:.2e}, "
                  f"{time.time() - t_start:.0f} s", flush=True)
        if time.time() > deadline - reserve:
            print(f"[draft] wall-clock budget reached at step {step}", flush=True)
            break
    log["steps"] = step
    log["losses"] = losses
    log["time_train_s"] = time.time() - t_train
    log["eval_after"] = evaluate(draft, target, eval_sets, amp)
    print(f"[draft] after {step} steps: held-out KL {log['eval_after']['kl']:.3f}, "
          f"top-1 agree {log['eval_after']['top1_agree']:.3f}", flush=True)

    lt.export_draft(draft, cfg, embed, a.out, {"seed": a.seed, "steps": step, "layers": a.layers})
    size = os.path.getsize(os.path.join(a.out, "model.safetensors"))
    if size > MAX_EXPORT_BYTES:
        raise SystemExit(f"{a.out}/model.safetensors is {size} bytes, above the 16 MB limit")
    # The export as the C++ loader reads it (f16 weights) against the trained draft.
    back = lt.load_draft(a.out, draft.embed.float(), dev, torch.float32)
    with torch.no_grad():
        x = eval_sets[0][:1, :128]
        err = lt.max_rel_err(back(x).float().cpu().numpy(), draft.float()(x).float().cpu().numpy())
    log["export"] = {"bytes": size, "f16_roundtrip_max_rel_err": err}
    log["time_total_s"] = time.time() - t_start
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    write_note(a, log)
    print(f"[draft] wrote {a.out} ({size / 1e6:.1f} MB) in {log['time_total_s']:.0f} s", flush=True)


def write_note(a, log):
    b, e = log["eval_before"], log["eval_after"]
    g = log["data"].get("generations", {})
    rows = "\n".join(f"| {x['file']} | {x['chars']} | {x['split_char']} | {x['train_tokens']} | {x['held_out_tokens']} |"
                     for x in log["data"]["books"])
    curve = "\n".join(f"| {x['step']} | {x['kl']:.3f} | {x['top1_agree']:.3f} | {x['lr']:.2e} | {x['s']:.0f} |"
                      for x in log["losses"])
    smoke = ("**SMOKE RUN** (`--smoke`: two book excerpts, a handful of steps on a CPU): these weights only wire "
             "the loader, the default-draft resolution and the tests. They are not a useful draft; the H200 run "
             "replaces them.\n\n" if a.smoke else "")
    note = f"""# Trained draft for SmolLM2-135M-Instruct

{smoke}A {a.layers}-layer llama of the target's width (576 hidden, 9 q / 3 KV heads, 1536 intermediate) that borrows
the target's embedding and tied lm_head (`triforce_shared_embedding` in config.json; the C++ loader points the
draft at the target's own embedding tensor, src/model/shared_embedding.h). Only the layers and the final norm
are stored (`model.safetensors`, f16, {log['export']['bytes']} bytes). `triforce generate` uses it as the draft
when no `--draft` is given and the target is SmolLM2-135M-Instruct (src/speculative/default_draft.h).

Initialised from target layers {log['init_layers']} and the final norm; distilled with KL(target || draft) over
the full vocabulary at every position; AdamW (0.9, 0.95), lr {a.lr} with {a.warmup} warm-up steps and a cosine to
10%, gradient clip 1; seed {a.seed}; sequences of {a.seq_len} tokens, batch {a.batch}.

## Data
Split rule: {log['data']['split_rule']}. Tokens from `triforce tokenize` (the harness's tokenizer).

| book | chars | split at | train tokens | held-out tokens |
|---|---|---|---|---|
{rows}

Generations: the target's continuations of {g.get('sequences', 0)} train windows of {g.get('prompt_tokens', 0)} tokens,
{g.get('new_tokens', 0)} new tokens each, alternating batches greedy / T = 0.6 ({g.get('seconds', 0):.0f} s). Training
steps alternate book windows and generated sequences.

## Run
{log['device']}, torch {log['torch']}: {log['steps']} steps, {log['time_train_s']:.0f} s of training,
{log['time_total_s']:.0f} s in all (target load {log['time_load_s']:.0f} s; data and generations up to
{log['time_data_s']:.0f} s).

| held-out text (never trained on) | KL(target, draft) / token | top-1 agreement |
|---|---|---|
| before training (target layers {log['init_layers']}) | {b['kl']:.3f} | {b['top1_agree']:.3f} |
| after | {e['kl']:.3f} | {e['top1_agree']:.3f} |

The f16 export against the trained f32 draft: max |diff| / max |logit| = {log['export']['f16_roundtrip_max_rel_err']:.1e}.

| step | KL | top-1 agree | lr | s |
|---|---|---|---|---|
{curve}

## Rebuild
```
{log['command']}
```
(`--steps {log['steps']}` fixes the step count that the wall-clock budget chose; `train_log.json` has every number.)
Acceptance through the harness: `experiments/draft/eval_draft.sh`.
"""
    with open(os.path.join(a.out, "NOTE.md"), "w") as f:
        f.write(note)


if __name__ == "__main__":
    main()
