"""Distil a small draft for SmolLM2-135M-Instruct from the target itself.

The draft is a llama of the target's width with --layers layers (initialised
from evenly spaced target layers and the final norm) that SHARES the target's
embedding: only its layers are trained and exported, and the C++ loader borrows
the target's embedding (config.json triforce_shared_embedding,
src/model/shared_embedding.h). Its output head is the target's embedding rows
of a reduced vocabulary (FR-Spec; --vocab K): the K token ids most frequent in
the target's own generations, stored with the draft as triforce_draft_vocab
(src/model/draft_vocab.h). The draft's q is 0 outside that set; rejection
sampling stays exact at every T because the residual norm(max(p - q, 0)) puts
p's mass outside the set back (and T = 0 is the target's argmax whatever the
draft says). Loss: KL(p restricted to the set and renormalised || q) at every
position, so the draft learns the target's distribution inside its set.

Data (all public domain or made here): the default prompt books
(experiments/prompts/make_default_prompts.sh), split by SPLIT RULE below; the
target's own continuations (greedy and T = 0.6) of windows of the train part;
and the target's continuations (greedy and T = 0.6) of short, varied prompts
(short_prompts.py: sentence openings, questions, instructions, raw and in the
target's chat template), whose held-out part and the README's prompt are never
trained on.

SPLIT RULE (heldout.py): for each book, c = the index of the first "\\n" at or
after floor(0.85 * len(text)) (characters of the UTF-8 decoded file); text[:c]
is train, text[c + 1:] is held out. Short prompts: short_prompts.RULE.

Tokens come from the harness's own tokenizer (`triforce tokenize`), so the draft
sees exactly what `generate` feeds it. Tokenizing needs the binary; --prep-data
does it once (on any machine) into an .npz that --data reads, so the GPU run
needs only torch, numpy and the gguf package.

  python train_draft.py --gguf M.gguf --prompts DIR --triforce BIN --out DIR [--minutes 5] [--device cuda]
  python train_draft.py --gguf M.gguf --prompts DIR --triforce BIN --prep-data data.npz   # tokenize only
  python train_draft.py --gguf M.gguf --data data.npz --out DIR --minutes 5               # train from it
  python train_draft.py ... --smoke --device cpu      # a minute or two on a CPU: wiring only
"""
import argparse
import concurrent.futures
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
import short_prompts  # noqa: E402
import llama_torch as lt  # noqa: E402

MAX_EXPORT_BYTES = 16 * 1024 * 1024


def tokenize(triforce, model, text, special=False):
    """Token ids of `text` as the harness encodes it; special=True as `generate` encodes a prompt."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "t.txt"), os.path.join(tmp, "t.npy")
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        subprocess.run([triforce, "tokenize", "--model", model, "--text-file", src, "--out", out]
                       + ([] if special else ["--no-special"]), check=True, stdout=subprocess.DEVNULL)
        return np.load(out).astype(np.int64)


def short_prompt_texts(a, system):
    """(train, held): each a list of prompt texts, raw and in the chat template."""
    train, held = short_prompts.split()
    if a.smoke:
        train, held = train[:8], held[-3:]
    both = lambda ps: [t for _, t in ps] + [short_prompts.chat(t, system) for _, t in ps]  # noqa: E731
    return both(train), both(held)


def ragged_pack(seqs):
    lens = np.array([len(x) for x in seqs], dtype=np.int64)
    return np.concatenate(seqs).astype(np.int32) if len(seqs) else np.zeros(0, np.int32), lens


def ragged_unpack(flat, lens):
    out, o = [], 0
    for n in lens:
        out.append(flat[o:o + n].astype(np.int64))
        o += n
    return out


def prepare_data(a, log):
    """Books (train / held-out parts) and short prompts (train / held-out), tokenized by the harness."""
    books = sorted(glob.glob(os.path.join(a.prompts, "*.txt")))
    if not books:
        raise SystemExit(f"--prompts {a.prompts}: no *.txt books (make them with experiments/prompts/make_default_prompts.sh)")
    if a.smoke:
        books = books[:2]
    system = short_prompts.system_line(a.gguf)
    sp_train, sp_held = short_prompt_texts(a, system)
    jobs = []
    for b in books:
        with open(b, encoding="utf-8") as f:
            text = f.read()
        if a.smoke:
            text = text[:40000]
        c = heldout.split_point(text)
        log["data"]["books"].append({"file": os.path.basename(b), "chars": len(text), "split_char": c})
        jobs += [(text[:c], False), (text[c + 1:], False)]
    jobs += [(t, True) for t in sp_train + sp_held]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(16, os.cpu_count() or 1))) as ex:
        toks = list(ex.map(lambda j: tokenize(a.triforce, a.gguf, *j), jobs))
    nb = 2 * len(books)
    d = {"book_train": toks[0:nb:2], "book_held": toks[1:nb:2], "short_train": toks[nb:nb + len(sp_train)],
         "short_held": toks[nb + len(sp_train):], "chat_system": system or ""}
    return d


def save_data(path, d, log):
    arrays = {"chat_system": np.array(d["chat_system"]), "books": np.array(json.dumps(log["data"]["books"]))}
    for k in ("book_train", "book_held", "short_train", "short_held"):
        arrays[k], arrays[k + "_lens"] = ragged_pack(d[k])
    np.savez_compressed(path, **arrays)


def load_data(path, log):
    z = np.load(path)
    d = {k: ragged_unpack(z[k], z[k + "_lens"]) for k in ("book_train", "book_held", "short_train", "short_held")}
    d["chat_system"] = str(z["chat_system"])
    log["data"]["books"] = json.loads(str(z["books"]))
    return d


def windows(rng, parts, n, length):
    """n random windows of `length` tokens, a part chosen in proportion to its size."""
    sizes = np.array([max(0, len(p) - length) for p in parts], dtype=np.float64)
    if sizes.sum() <= 0:
        raise SystemExit(f"the books are shorter than a {length}-token window")
    which = rng.choice(len(parts), size=n, p=sizes / sizes.sum())
    return np.stack([parts[w][s:s + length] for w, s in ((w, rng.integers(0, len(parts[w]) - length)) for w in which)])


def make_generations(a, target, train, rng, device, gen):
    """The target's own continuations of train windows: half greedy, half T = 0.6."""
    out = []
    for i in range(a.gen_batches):
        prompts = torch.from_numpy(windows(rng, train, a.gen_batch, a.gen_prompt)).to(device)
        temp = 0.0 if i % 2 == 0 else 0.6
        out.append(lt.generate(target, prompts, a.gen_new, temp, gen).cpu())
    return torch.cat(out) if out else torch.zeros(0, a.gen_prompt + a.gen_new, dtype=torch.long)


def make_short_generations(a, target, prompts, samples, device, gen):
    """The target's continuations of each short prompt: one greedy, `samples` at T = 0.6.
    Returns (tokens [N, L] right-padded, lengths [N], prompt lengths [N]) on the CPU."""
    rows = [(p, 0.0) for p in prompts] + [(p, 0.6) for p in prompts for _ in range(samples)]
    seqs, lens, plens = [], [], []
    for i in range(0, len(rows), a.short_batch):
        chunk = rows[i:i + a.short_batch]
        temps = torch.tensor([t for _, t in chunk], device=device)
        s, n = lt.generate_ragged(target, [list(p) for p, _ in chunk], a.short_new, temps, gen)
        seqs.append(s.cpu())
        lens.append(n.cpu())
        plens += [len(p) for p, _ in chunk]
    L = max(x.shape[1] for x in seqs)
    seq = torch.cat([F.pad(x, (0, L - x.shape[1])) for x in seqs])
    return seq, torch.cat(lens), torch.tensor(plens)


def generated_tokens(seq, lens, plens):
    """The generated part of each row, flattened (numpy)."""
    pos = torch.arange(seq.shape[1])[None]
    keep = (pos >= plens[:, None]) & (pos < lens[:, None])
    return seq[keep].numpy()


def choose_vocab(k, vocab, generated):
    """The k most frequent ids in the target's generations (ties: lower id), sorted."""
    counts = np.bincount(np.concatenate(generated), minlength=vocab)
    order = np.lexsort((np.arange(vocab), -counts))  # by count descending, then id
    return np.sort(order[:k]), counts


def coverage(ids, tokens):
    inset = np.zeros(max(int(ids.max()) + 1, int(tokens.max()) + 1 if len(tokens) else 1), dtype=bool)
    inset[ids] = True
    return float(inset[tokens].mean()) if len(tokens) else float("nan")


def init_draft(a, target, cfg, embed_dev, head_ids):
    """Layers at evenly spaced target depths (first and last included) and the final norm;
    the head is the embedding's rows at head_ids (or all of them)."""
    picks = [round(i * (cfg.layers - 1) / max(1, a.layers - 1)) for i in range(a.layers)]
    dc = lt.Config(cfg.vocab, cfg.hidden, cfg.inter, a.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.eps,
                   cfg.theta, cfg.max_pos)
    head = None if head_ids is None else embed_dev[head_ids]
    draft = lt.Llama(dc, embed_dev, head)
    sd = {}
    for i, p in enumerate(picks):
        for k, v in target.layers[p].state_dict().items():
            sd[f"layers.{i}.{k}"] = v.float()
    sd["norm.weight"] = target.norm.weight.float()
    draft.load_state_dict(sd)
    return draft.to(embed_dev.device), picks


def kl_and_agree(draft, target, ids, amp, head_ids, mask=None):
    """Per position, with p the target's softmax and q the draft's over its set S:
    KL(p restricted to S and renormalised || q) (the loss), top-1 agreement (the
    target's argmax over the whole vocabulary == the draft's), the T = 1
    acceptance sum_S min(p, q), and p(S). Means over the positions `mask` keeps."""
    with torch.no_grad(), amp():
        p_logits = target(ids).float()
    with amp():
        q_logits = draft(ids).float()
    logp_all = torch.log_softmax(p_logits, dim=-1)
    logp = logp_all if head_ids is None else logp_all[..., head_ids]
    logq = torch.log_softmax(q_logits, dim=-1)
    mass = logp.exp().sum(-1)
    logp_s = logp - torch.log(mass.clamp_min(1e-30))[..., None]
    kl = (logp_s.exp() * (logp_s - logq)).sum(-1)
    q_top = q_logits.argmax(-1) if head_ids is None else head_ids[q_logits.argmax(-1)]
    agree = (p_logits.argmax(-1) == q_top).float()
    accept = torch.minimum(logp.exp(), logq.exp()).sum(-1)
    if mask is None:
        mask = torch.ones_like(kl)
    n = mask.sum().clamp_min(1)
    mean = lambda x: (x.detach() * mask).sum() / n  # noqa: E731
    return (kl * mask).sum() / n, mean(agree), mean(accept), mean(mass)


@torch.no_grad()
def evaluate(draft, target, batches, amp, head_ids):
    r = {"kl": [], "top1_agree": [], "accept_t1": [], "in_set_mass": []}
    for ids, mask in batches:
        for k, v in zip(r, kl_and_agree(draft, target, ids, amp, head_ids, mask)):
            r[k].append(float(v))
    return {k: float(np.mean(v)) for k, v in r.items()}


def padded_mask(lens, L, device):
    return (torch.arange(L, device=device)[None] < lens.to(device)[:, None]).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="the target, SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--prompts", help="folder of the default prompt books (*.txt); not with --data")
    ap.add_argument("--triforce", help="the triforce binary (its tokenizer); not with --data")
    ap.add_argument("--data", help="tokenized data written by --prep-data (then no --prompts/--triforce)")
    ap.add_argument("--prep-data", metavar="NPZ", help="only tokenize the books and short prompts into NPZ, then exit")
    ap.add_argument("--out", help="output folder: config.json, model.safetensors, NOTE.md, train_log.json")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=16384, help="the draft head's reduced vocabulary size (0: the whole)")
    ap.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of the whole run")
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: as many as the budget allows)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gen-batches", type=int, default=2)
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--gen-prompt", type=int, default=256)
    ap.add_argument("--gen-new", type=int, default=256)
    ap.add_argument("--short-new", type=int, default=192, help="new tokens per short-prompt continuation")
    ap.add_argument("--short-samples", type=int, default=2, help="T = 0.6 continuations per short prompt (plus one greedy)")
    ap.add_argument("--short-batch", type=int, default=2048, help="rows per batched short-prompt generation")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny data and steps: checks the wiring on a CPU")
    a = ap.parse_args()
    if a.smoke:
        a.seq_len, a.batch, a.gen_batches, a.gen_batch, a.gen_prompt, a.gen_new = 64, 2, 2, 2, 16, 16
        a.short_new, a.short_samples, a.short_batch = 16, 1, 64
        a.eval_batches, a.warmup = 1, 2
        a.steps = a.steps or 20
        a.minutes = min(a.minutes, 5.0)
    if not a.data and not (a.prompts and a.triforce):
        raise SystemExit("--prompts DIR and --triforce BIN are required (or --data NPZ from --prep-data)")
    if not a.prep_data and not a.out:
        raise SystemExit("--out DIR is required")
    if not 1 <= a.layers <= 4:
        raise SystemExit(f"--layers {a.layers}: expected 1..4")
    if a.vocab < 0:
        raise SystemExit(f"--vocab {a.vocab}: expected 0 (the whole vocabulary) or a size K > 0")
    t_start = time.time()
    deadline = t_start + 60 * a.minutes
    log = {"args": vars(a), "command": " ".join([os.path.basename(sys.executable), "experiments/draft/train_draft.py"] + sys.argv[1:]),
           "data": {"split_rule": heldout.RULE, "short_prompt_rule": short_prompts.RULE, "books": []},
           "torch": torch.__version__}
    if a.prep_data:
        save_data(a.prep_data, prepare_data(a, log), log)
        print(f"[draft] wrote {a.prep_data} in {time.time() - t_start:.0f} s", flush=True)
        return
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    log["device"] = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    dev = torch.device(a.device)
    if a.device == "cpu":
        # one thread for the smoke run: OpenMP barriers spin badly on a shared 2-core machine
        torch.set_num_threads(1 if a.smoke else max(1, min(4, os.cpu_count() or 1)))
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if a.device == "cuda" else \
        (lambda: torch.autocast("cpu", enabled=False))

    target, cfg, embed = lt.build_target(a.gguf, dev, dtype)
    log["time_load_s"] = time.time() - t_start
    d = load_data(a.data, log) if a.data else prepare_data(a, log)
    train, held = d["book_train"], d["book_held"]
    for b, tr, he in zip(log["data"]["books"], train, held):
        b["train_tokens"], b["held_out_tokens"] = int(len(tr)), int(len(he))
    log["time_tokenize_s"] = time.time() - t_start - log["time_load_s"]
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    t0 = time.time()
    gens = make_generations(a, target, train, rng, dev, gen)
    t1 = time.time()
    short = make_short_generations(a, target, d["short_train"], a.short_samples, dev, gen)
    short_held = make_short_generations(a, target, d["short_held"], 1, dev, gen)
    t2 = time.time()
    log["data"]["generations"] = {"sequences": int(gens.shape[0]), "prompt_tokens": a.gen_prompt,
                                  "new_tokens": a.gen_new, "temperatures": [0.0, 0.6], "seconds": t1 - t0}
    log["data"]["short"] = {"train_prompts": len(d["short_train"]), "held_out_prompts": len(d["short_held"]),
                            "train_sequences": int(short[0].shape[0]), "held_out_sequences": int(short_held[0].shape[0]),
                            "new_tokens": a.short_new, "samples_t0p6": a.short_samples, "seconds": t2 - t1,
                            "chat_system": d["chat_system"],
                            "prompt_tokens_max": int(max(len(p) for p in d["short_train"]))}
    print(f"[draft] generations: books {gens.shape[0]} x {gens.shape[1]} in {t1 - t0:.0f} s, short prompts "
          f"{short[0].shape[0]} (+{short_held[0].shape[0]} held out) x {short[0].shape[1]} in {t2 - t1:.0f} s", flush=True)

    # The reduced vocabulary: the most frequent ids in the target's own generations (train prompts only).
    head_ids = None
    if a.vocab and a.vocab < cfg.vocab:
        book_gen = gens[:, a.gen_prompt:].reshape(-1).numpy()
        ids_np, counts = choose_vocab(a.vocab, cfg.vocab, [book_gen, generated_tokens(*short)])
        held_gen = generated_tokens(*short_held)
        held_books = np.concatenate(held)
        log["vocab"] = {"k": int(a.vocab), "counted_tokens": int(counts.sum()),
                        "distinct_generated": int((counts > 0).sum()),
                        "coverage_train_generations": coverage(ids_np, np.concatenate([book_gen, generated_tokens(*short)])),
                        "coverage_held_out_short_generations": coverage(ids_np, held_gen),
                        "coverage_held_out_books": coverage(ids_np, held_books)}
        for k in (1024, 2048, 4096, 8192, 16384, 32768):
            if k < cfg.vocab:
                ik, _ = choose_vocab(k, cfg.vocab, [book_gen, generated_tokens(*short)])
                log["vocab"][f"coverage_held_out_short_at_{k}"] = coverage(ik, held_gen)
                log["vocab"][f"coverage_held_out_books_at_{k}"] = coverage(ik, held_books)
        print(f"[draft] vocabulary {a.vocab}: coverage of held-out short-prompt generations "
              f"{log['vocab']['coverage_held_out_short_generations']:.4f}, held-out books "
              f"{log['vocab']['coverage_held_out_books']:.4f}", flush=True)
        head_ids = torch.from_numpy(ids_np).to(dev)
    log["time_data_s"] = time.time() - t_start

    draft, picks = init_draft(a, target, cfg, embed.to(dev, dtype), head_ids)
    log["init_layers"] = picks
    eval_rng = np.random.default_rng(a.seed + 1)
    eval_books = [(torch.from_numpy(windows(eval_rng, held, a.batch, a.seq_len)).to(dev), None)
                  for _ in range(a.eval_batches)]
    sh_seq, sh_len, _ = short_held
    eval_short = [(sh_seq.to(dev), padded_mask(sh_len, sh_seq.shape[1], dev))]
    log["eval_before"] = {"books": evaluate(draft, target, eval_books, amp, head_ids),
                          "short": evaluate(draft, target, eval_short, amp, head_ids)}
    print(f"[draft] before training: held-out books {log['eval_before']['books']}, short {log['eval_before']['short']}",
          flush=True)

    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0,
                            **({"fused": True} if a.device == "cuda" else {}))
    total = a.steps
    losses = []
    step, t_train = 0, time.time()
    order = np.random.default_rng(a.seed + 2)
    reserve = 25.0 if not a.smoke else 5.0  # final eval + export
    sq, sl, _ = short
    short_rows = max(1, a.batch * a.seq_len // sq.shape[1])

    def batch_for(step):
        """Steps cycle: book windows, the target's book continuations, its short-prompt continuations."""
        kind = step % 3
        if kind == 1 and len(gens):
            idx = order.integers(0, len(gens), size=max(1, a.batch * a.seq_len // gens.shape[1]))
            return gens[idx].to(dev), None
        if kind == 2 and len(sq):
            idx = torch.from_numpy(order.integers(0, len(sq), size=short_rows))
            L = int(sl[idx].max())
            return sq[idx, :L].to(dev), padded_mask(sl[idx], L, dev)
        return torch.from_numpy(windows(rng, train, a.batch, a.seq_len)).to(dev), None

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    while True:
        if total and step >= total:
            break
        # Fix the schedule from the measured step time (--steps N reproduces it). Steps 12..24 are timed, not
        # the first 12: those pay CUDA's lazy init and a plan per new batch shape, which on the H200 made the
        # estimate 255 ms/step against about 60 ms after, and stopped a 5.5-minute run after 52 s of training.
        if not total and step == 12:
            sync()
            t_steady = time.time()
        if not total and step == 24:
            sync()
            per = (time.time() - t_steady) / 12
            total = max(25, int((deadline - time.time() - reserve) / per) + 24)
            print(f"[draft] {per * 1e3:.0f} ms/step (steps 13-24): {total} steps in the budget", flush=True)
        lr_total = total or 10_000
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / lr_total))))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, mask = batch_for(step)
        kl, agree, accept, mass = kl_and_agree(draft, target, ids, amp, head_ids, mask)
        opt.zero_grad(set_to_none=True)
        kl.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 30 == 0 or step == 1 or (total and step == total):
            losses.append({"step": step, "source": ["books", "book generations", "short prompts"][(step - 1) % 3],
                           "kl": float(kl.detach()), "top1_agree": float(agree), "accept_t1": float(accept),
                           "lr": lr, "s": time.time() - t_start})
            print(f"[draft] step {step}/{total or '?'}: KL {float(kl.detach()):.3f}, agree {float(agree):.3f}, "
                  f"accept(T=1) {float(accept):.3f}, lr {lr:.2e}, {time.time() - t_start:.0f} s", flush=True)
        if time.time() > deadline - reserve:
            print(f"[draft] wall-clock budget reached at step {step}", flush=True)
            break
    log["steps"] = step
    log["losses"] = losses
    log["time_train_s"] = time.time() - t_train
    log["eval_after"] = {"books": evaluate(draft, target, eval_books, amp, head_ids),
                         "short": evaluate(draft, target, eval_short, amp, head_ids)}
    print(f"[draft] after {step} steps: held-out books {log['eval_after']['books']}, short {log['eval_after']['short']}",
          flush=True)

    vocab_ids = None if head_ids is None else head_ids.cpu().numpy()
    lt.export_draft(draft, cfg, embed, a.out, {"seed": a.seed, "steps": step, "layers": a.layers,
                                               "vocab": a.vocab}, vocab_ids)
    size = os.path.getsize(os.path.join(a.out, "model.safetensors"))
    if size > MAX_EXPORT_BYTES:
        raise SystemExit(f"{a.out}/model.safetensors is {size} bytes, above the 16 MB limit")
    # The export as the C++ loader reads it (f16 weights) against the trained draft.
    back = lt.load_draft(a.out, draft.embed.float(), dev, torch.float32)
    with torch.no_grad():
        x = eval_books[0][0][:1, :128]
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
    sh = log["data"].get("short", {})
    v = log.get("vocab")
    rows = "\n".join(f"| {x['file']} | {x['chars']} | {x['split_char']} | {x['train_tokens']} | {x['held_out_tokens']} |"
                     for x in log["data"]["books"])
    curve = "\n".join(f"| {x['step']} | {x['source']} | {x['kl']:.3f} | {x['top1_agree']:.3f} | {x['accept_t1']:.3f} | "
                      f"{x['lr']:.2e} | {x['s']:.0f} |" for x in log["losses"])
    smoke = ("**SMOKE RUN** (`--smoke`: two book excerpts, a few short prompts, a handful of steps on a CPU): these "
             "weights only wire the loader and the tests. They are not a useful draft; the H200 run replaces them.\n\n"
             if a.smoke else "")
    if v:
        ks = sorted(int(k.rsplit("_", 1)[1]) for k in v if k.startswith("coverage_held_out_short_at_"))
        cov_rows = "\n".join(f"| {k} | {v[f'coverage_held_out_short_at_{k}']:.4f} | {v[f'coverage_held_out_books_at_{k}']:.4f} |"
                             for k in ks)
        head = f"""Its output head covers a reduced vocabulary (FR-Spec): the {v['k']} token ids most frequent in the target's
own generations from the train prompts ({v['counted_tokens']} generated tokens, {v['distinct_generated']} distinct ids),
stored as `triforce_draft_vocab` (I32 [{v['k']}], sorted) in model.safetensors; the C++ loader gathers those rows of
the borrowed embedding as the draft's lm_head (src/model/draft_vocab.h), so a draft step computes {v['k']} logits
instead of the whole vocabulary's, and the forward returns -inf for every other id. The draft's q is 0 outside the
set; speculative sampling stays exact at every temperature, since a proposal x (always in the set) is accepted with
min(1, p(x)/q(x)) and a rejection resamples from norm(max(p - q, 0)), which holds all of p's mass outside the set:
the committed token is distributed as p. At T = 0 the committed token is the target's argmax whatever the draft
proposes. The price is acceptance: at most p(set) per token.

Coverage (fraction of tokens inside the set) of text never trained on: the target's continuations of the held-out
short prompts, and the held-out book text:

| K | held-out short-prompt generations | held-out books |
|---|---|---|
{cov_rows}

"""
    else:
        head = "Its output head is the whole vocabulary (`--vocab 0`).\n\n"
    ev = lambda x: f"{x['kl']:.3f} | {x['top1_agree']:.3f} | {x['accept_t1']:.3f} | {x['in_set_mass']:.3f}"  # noqa: E731
    note = f"""# Trained draft for SmolLM2-135M-Instruct

{smoke}A {a.layers}-layer llama of the target's width (576 hidden, 9 q / 3 KV heads, 1536 intermediate) that borrows
the target's embedding (`triforce_shared_embedding` in config.json; the C++ loader points the draft at the target's
own embedding tensor, src/model/shared_embedding.h). Only the layers and the final norm are stored
(`model.safetensors`, f16, {log['export']['bytes']} bytes). `triforce generate` uses it as the draft when no
`--draft` is given and the target is SmolLM2-135M-Instruct (src/speculative/default_draft.h).

{head}Initialised from target layers {log['init_layers']} and the final norm; distilled with KL(p on the set,
renormalised || q) at every position; AdamW (0.9, 0.95), lr {a.lr} with {a.warmup} warm-up steps and a cosine to
10%, gradient clip 1; seed {a.seed}; steps cycle book windows of {a.seq_len} tokens (batch {a.batch}), the target's
book continuations, and its short-prompt continuations.

## Data
Split rule: {log['data']['split_rule']}. Tokens from `triforce tokenize` (the harness's tokenizer; prompts encoded
as `generate` encodes them).

| book | chars | split at | train tokens | held-out tokens |
|---|---|---|---|---|
{rows}

Book generations: the target's continuations of {g.get('sequences', 0)} train windows of {g.get('prompt_tokens', 0)}
tokens, {g.get('new_tokens', 0)} new tokens each, alternating batches greedy / T = 0.6 ({g.get('seconds', 0):.0f} s).

Short prompts (experiments/draft/short_prompts.py: sentence openings, questions, instructions from templates, fixed
seed; {log['data']['short_prompt_rule']}): {sh.get('train_prompts', 0)} train prompts (raw, as `generate --prompt`
feeds them, and in the target's chat template with its default system line), each continued greedily and
{sh.get('samples_t0p6', 0)} times at T = 0.6, {sh.get('new_tokens', 0)} new tokens ({sh.get('train_sequences', 0)}
sequences); the {sh.get('held_out_prompts', 0)} held-out prompts (the README's among them) continued once greedily and
once at T = 0.6 for the evaluation below only ({sh.get('seconds', 0):.0f} s for all).

## Run
{log['device']}, torch {log['torch']}: {log['steps']} steps, {log['time_train_s']:.0f} s of training,
{log['time_total_s']:.0f} s in all (target load {log['time_load_s']:.0f} s; data, generations and the vocabulary up to
{log['time_data_s']:.0f} s).

Never trained on (KL as the loss; top-1: the draft's argmax is the target's; accept: sum over the set of
min(p, q), the expected acceptance at T = 1; p(set): the target's mass inside the draft's set):

| held-out data | when | KL | top-1 | accept (T = 1) | p(set) |
|---|---|---|---|---|---|
| book text | before (target layers {log['init_layers']}) | {ev(b['books'])} |
| book text | after | {ev(e['books'])} |
| short-prompt continuations | before | {ev(b['short'])} |
| short-prompt continuations | after | {ev(e['short'])} |

The f16 export against the trained f32 draft: max |diff| / max |logit| = {log['export']['f16_roundtrip_max_rel_err']:.1e}.

| step | batch | KL | top-1 | accept (T = 1) | lr | s |
|---|---|---|---|---|---|---|
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
