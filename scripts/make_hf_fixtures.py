#!/usr/bin/env python3
"""Generate HF-transformers reference fixtures for the C++ CPU Llama forward.

Usage:
  python3 scripts/make_hf_fixtures.py --out DIR --tiny
  python3 scripts/make_hf_fixtures.py --out DIR --smollm GGUF_PATH

DIR plays the role of tests/fixtures: outputs go to DIR/hf/<name>/... and
DIR/smollm2/...  Everything is computed in float32 on the CPU with eager
attention and fixed seeds.

(a) --tiny: tiny random LlamaForCausalLM checkpoints (save_pretrained), each
    re-read from disk and upcast to float32, with
      prompt.npy  int32 [300]        random token ids (seeded)
      logits.npy  float32 [300, V]   one forward over the prompt
      greedy.npy  int32 [32]         model.generate(do_sample=False), EOS disabled
    plus DIR/hf/manifest.json.
(b) --smollm: SmolLM2-135M-Instruct as transformers loads it from the GGUF
    (gguf_file=...), its tokenizer, logits for a fixed prompt, 64 greedy
    tokens, tokenizer ids for assorted texts.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import time
import traceback

import numpy as np

T0 = time.time()


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


def versions():
    import torch
    import transformers
    v = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for mod in ("safetensors", "tokenizers", "gguf"):
        try:
            from importlib.metadata import version as _ver
            v[mod] = _ver(mod)
        except Exception as e:  # noqa
            v[mod] = "unavailable: %s" % e
    return v


def setup_torch():
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(False)
    return torch


def tf_major():
    import transformers
    return int(transformers.__version__.split(".")[0])


def load_causal_lm(path, **kw):
    import torch
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="eager", **kw)
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                 attn_implementation="eager", **kw)
    if any(p.dtype != torch.float32 for p in m.parameters()):
        m = m.float()
    m = m.eval()
    return m


def greedy_generate(model, prompt_ids, n_new):
    """Pure greedy continuation with EOS disabled (no min-length masking)."""
    import torch
    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, max_new_tokens=n_new, min_new_tokens=n_new,
                          eos_token_id=None, bos_token_id=None, pad_token_id=0,
                          num_beams=1, temperature=None, top_p=None, top_k=None)
    inp = torch.tensor([list(prompt_ids)], dtype=torch.long)
    out = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gc)
    new = out[0, inp.shape[1]:].tolist()
    if len(new) != n_new:
        raise RuntimeError("generate produced %d tokens, wanted %d" % (len(new), n_new))
    return new


def full_forward_argmax_check(model, prompt_ids, new_ids):
    """Recompute argmax with one no-cache forward over prompt+generated[:-1]."""
    import torch
    seq = list(prompt_ids) + list(new_ids[:-1])
    x = torch.tensor([seq], dtype=torch.long)
    lg = model(input_ids=x, use_cache=False).logits[0].float()
    am = lg[len(prompt_ids) - 1:].argmax(-1).tolist()
    n_match = sum(int(a == b) for a, b in zip(am, new_ids))
    return n_match


# --------------------------------------------------------------------------
# (a) tiny random checkpoints
# --------------------------------------------------------------------------

def tiny_specs():
    base = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                max_position_embeddings=512, initializer_range=0.2, rms_norm_eps=1e-5,
                tie_word_embeddings=False, hidden_act="silu", attention_bias=False,
                mlp_bias=False)
    S = []

    def add(name, dtype="float32", rope=None, sharded=False, seed=None, **over):
        cfg = dict(base)
        cfg.update(over)
        S.append(dict(name=name, cfg=cfg, dtype=dtype, rope=rope, sharded=sharded,
                      seed=len(S) + 1 if seed is None else seed))

    add("mha_f32")
    add("gqa_f32", hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16)
    add("mqa_f32", num_key_value_heads=1)
    add("tied_f32", tie_word_embeddings=True)
    add("headdim32_f32", head_dim=32)
    add("rope_linear", rope=dict(rope_type="linear", factor=4.0))
    # dynamic NTK: max_position_embeddings is set to 64 (= original) so that HF's
    # dynamic update kicks in for seq_len > 64 regardless of which of the two keys
    # the implementation consults.
    add("rope_dynamic", rope=dict(rope_type="dynamic", factor=4.0,
                                  original_max_position_embeddings=64),
        max_position_embeddings=64)
    add("rope_yarn", rope=dict(rope_type="yarn", factor=8.0,
                               original_max_position_embeddings=64))
    add("rope_llama3", rope=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=64))
    add("mha_f16", dtype="float16")
    add("mha_bf16", dtype="bfloat16")
    add("sharded_f32", sharded=True)
    return S


def make_config(spec):
    from transformers import LlamaConfig
    kw = dict(spec["cfg"])
    kw.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    rope = spec["rope"]
    theta = 10000.0
    if tf_major() >= 5:
        rp = dict(rope_type="default") if rope is None else dict(rope)
        rp["rope_theta"] = theta
        cfg = LlamaConfig(**kw, rope_parameters=rp)
    else:
        cfg = LlamaConfig(**kw, rope_theta=theta, rope_scaling=rope)
    return cfg


def run_tiny(out_root, n_prompt=300, n_greedy=32, only=None):
    torch = setup_torch()
    from transformers import LlamaForCausalLM
    hf_root = os.path.join(out_root, "hf")
    os.makedirs(hf_root, exist_ok=True)
    manifest = []
    failures = []
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    for spec in tiny_specs():
        name = spec["name"]
        if only and name not in only:
            continue
        d = os.path.join(hf_root, name)
        try:
            log("=== tiny fixture", name)
            if os.path.isdir(d):
                shutil.rmtree(d)
            os.makedirs(d)
            torch.manual_seed(1000 + spec["seed"])
            cfg = make_config(spec)
            model = LlamaForCausalLM(cfg).eval()
            model = model.to(tdt[spec["dtype"]])
            save_kw = dict(safe_serialization=True)
            if spec["sharded"]:
                save_kw["max_shard_size"] = "100KB"
            try:
                model.save_pretrained(d, **save_kw)
            except TypeError:
                save_kw.pop("safe_serialization")
                model.save_pretrained(d, **save_kw)
            del model
            # drop generation_config.json noise (eos etc. not needed)
            gcp = os.path.join(d, "generation_config.json")
            if os.path.exists(gcp):
                os.remove(gcp)
            with open(os.path.join(d, "config.json")) as f:
                cj = json.load(f)
            log("config.json for", name, ":\n" + json.dumps(cj, indent=1, sort_keys=True))
            log("files:", sorted(os.listdir(d)))

            m = load_causal_lm(d)
            rng = np.random.RandomState(12345 + spec["seed"])
            prompt = rng.randint(0, cfg.vocab_size, size=n_prompt).astype(np.int32)
            x = torch.tensor([prompt.tolist()], dtype=torch.long)
            logits = m(input_ids=x, use_cache=False).logits[0].float().numpy().astype(np.float32)
            assert logits.shape == (n_prompt, cfg.vocab_size), logits.shape
            log("logits", logits.shape, "std %.4f" % logits.std(),
                "row0 argmax", int(logits[0].argmax()))
            greedy = greedy_generate(m, prompt.tolist(), n_greedy)
            n_match = full_forward_argmax_check(m, prompt.tolist(), greedy)
            log("greedy", greedy, "full-forward argmax matches %d/%d" % (n_match, n_greedy))
            np.save(os.path.join(d, "prompt.npy"), prompt)
            np.save(os.path.join(d, "logits.npy"), logits)
            np.save(os.path.join(d, "greedy.npy"), np.asarray(greedy, dtype=np.int32))
            rope = spec["rope"]
            manifest.append(dict(
                name=name, path="hf/" + name,
                rope_type=(rope or {}).get("rope_type", "default"),
                dtype=spec["dtype"],
                heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads,
                head_dim=getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads),
                hidden=cfg.hidden_size, vocab=cfg.vocab_size, layers=cfg.num_hidden_layers,
                tied=bool(cfg.tie_word_embeddings),
                sharded=os.path.exists(os.path.join(d, "model.safetensors.index.json")),
                n_prompt=n_prompt, n_greedy=n_greedy,
                greedy_full_forward_argmax_matches=n_match,
            ))
            del m
        except Exception:
            traceback.print_exc()
            failures.append(name)
            log("FAILED", name)
    with open(os.path.join(hf_root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    v = versions()
    write_readme(os.path.join(hf_root, "README.md"), "HF tiny-Llama reference fixtures", v, [
        "Made by `scripts/make_hf_fixtures.py --tiny` (random LlamaForCausalLM, "
        "`initializer_range=0.2`, seeds fixed per fixture, saved with `save_pretrained`, "
        "re-read from disk, upcast to float32, eager attention, CPU).",
        "`prompt.npy` int32 [n_prompt] random ids; `logits.npy` float32 [n_prompt, vocab] from "
        "one no-cache forward; `greedy.npy` int32 [n_greedy] from "
        "`model.generate(do_sample=False)` with EOS disabled (default KV cache; for dynamic rope "
        "HF recomputes frequencies as the sequence grows, so cached keys keep their old "
        "rotation).",
        "`manifest.json`: list of {name, path (relative to tests/fixtures), rope_type, dtype, "
        "heads, kv_heads, head_dim, hidden, vocab, layers, tied, sharded, n_prompt, n_greedy, "
        "greedy_full_forward_argmax_matches (how many greedy tokens equal the argmax of a single "
        "no-cache forward over prompt+greedy; < n_greedy is expected only for rope_dynamic)}.",
        "rope_dynamic uses max_position_embeddings=64 (= original_max_position_embeddings) so "
        "HF's dynamic NTK update is active for the 300-token prompt.",
        "Failures: %s" % (failures or "none"),
    ])
    log("tiny done; failures:", failures)
    return failures


def write_readme(path, title, v, lines):
    with open(path, "w") as f:
        f.write("# %s\n\n" % title)
        for ln in lines:
            f.write("- %s\n" % ln)
        f.write("\nGenerated %s on %s (device machine: NVIDIA H200 host, computed on CPU in "
                "float32).\n\nVersions:\n\n" % (v["date_utc"], v["platform"]))
        for k in sorted(v):
            f.write("- %s: %s\n" % (k, v[k]))


# --------------------------------------------------------------------------
# (b) SmolLM2-135M-Instruct from GGUF
# --------------------------------------------------------------------------

SMOL_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea,"
TOK_TEXTS = [
    "Hello world",
    "  leading spaces and  double  spaces",
    "line one\nline two\n\nline four\n",
    "digits 1234567 and 3.14159, 2026-12-02",
    "café naïve résumé é",
    "中文测试，你好世界",
    "robot 🤖 emoji 👍🏽",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>assistant\n",
    "\ttabs\tand trailing space ",
    "Don't you think it's OK? I'll say \"yes\".",
    "",
]


def run_smollm(out_root, gguf_path, n_greedy=64):
    torch = setup_torch()
    from transformers import AutoTokenizer
    d = os.path.join(out_root, "smollm2")
    os.makedirs(d, exist_ok=True)
    gdir, gfile = os.path.split(os.path.abspath(gguf_path))
    v = versions()
    meta = dict(versions=v, gguf_file=gfile, prompt_text=SMOL_PROMPT)
    log("loading tokenizer from gguf")
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gfile)
    log("tokenizer", type(tok).__name__, "bos", tok.bos_token, tok.bos_token_id,
        "eos", tok.eos_token, tok.eos_token_id)
    meta["tokenizer_class"] = type(tok).__name__
    meta["bos_token"], meta["bos_token_id"] = tok.bos_token, tok.bos_token_id
    meta["eos_token"], meta["eos_token_id"] = tok.eos_token, tok.eos_token_id
    ids_plain = [tok(t, add_special_tokens=False)["input_ids"] for t in TOK_TEXTS]
    ids_spec = [tok(t, add_special_tokens=True)["input_ids"] for t in TOK_TEXTS]
    for t, a in zip(TOK_TEXTS, ids_plain):
        log("tok", repr(t), a)
    with open(os.path.join(d, "tokenizer_ids.json"), "w") as f:
        json.dump(dict(texts=TOK_TEXTS, ids=ids_plain, ids_add_special_tokens=ids_spec,
                       decoded=[tok.decode(a) for a in ids_plain]),
                  f, indent=1, ensure_ascii=False)
    enc = tok(SMOL_PROMPT)["input_ids"]
    meta["prompt_ids"] = enc
    meta["prompt_ids_add_special_tokens_false"] = tok(SMOL_PROMPT, add_special_tokens=False)["input_ids"]
    log("prompt ids", len(enc), enc)

    log("loading model from gguf (dequantizing)")
    m = load_causal_lm(gdir, gguf_file=gfile)
    log("model loaded", type(m).__name__)
    meta["hf_config"] = json.loads(m.config.to_json_string())
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(m.config.to_json_string())
    x = torch.tensor([enc], dtype=torch.long)
    logits = m(input_ids=x, use_cache=False).logits[0].float().numpy().astype(np.float32)
    log("logits", logits.shape, "argmax last", int(logits[-1].argmax()))
    np.save(os.path.join(d, "prompt.npy"), np.asarray(enc, dtype=np.int32))
    np.save(os.path.join(d, "logits.npy"), logits)
    greedy = greedy_generate(m, enc, n_greedy)
    n_match = full_forward_argmax_check(m, enc, greedy)
    np.save(os.path.join(d, "greedy.npy"), np.asarray(greedy, dtype=np.int32))
    meta["greedy_ids"] = greedy
    meta["greedy_text"] = tok.decode(greedy)
    meta["greedy_full_forward_argmax_matches"] = n_match
    meta["greedy_note"] = ("model.generate(do_sample=False, max_new_tokens=%d) with EOS disabled "
                           "(eos_token_id=None), i.e. pure argmax for all steps" % n_greedy)
    log("greedy", greedy, repr(meta["greedy_text"]), "matches %d/%d" % (n_match, n_greedy))
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    write_readme(os.path.join(d, "README.md"), "SmolLM2-135M-Instruct (Q4_1 GGUF) HF reference", v, [
        "Made by `scripts/make_hf_fixtures.py --smollm %s`: "
        "`AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32)` (transformers "
        "dequantizes the Q4_1 weights to float32), eager attention, CPU; tokenizer via "
        "`AutoTokenizer.from_pretrained(dir, gguf_file=...)`." % gfile,
        "GGUF sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53.",
        "`prompt.npy` int32 = tokenizer(prompt_text) ids; `logits.npy` float32 [n, vocab] (all "
        "rows, one no-cache forward); `greedy.npy` int32 [%d] greedy continuation, EOS disabled." % n_greedy,
        "`meta.json`: prompt text/ids, greedy ids/text, versions, HF config as loaded.",
        "`tokenizer_ids.json`: {texts, ids (add_special_tokens=False), ids_add_special_tokens, decoded}.",
        "`config.json`: the LlamaConfig transformers built from the GGUF metadata.",
    ])
    log("smollm done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="root playing tests/fixtures")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--smollm", default=None, help="path to SmolLM2 GGUF")
    a = ap.parse_args()
    import torch
    log("versions", json.dumps(versions()))
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    rc = 0
    if a.tiny:
        if run_tiny(a.out, only=a.only):
            rc = 1
    if a.smollm:
        try:
            run_smollm(a.out, a.smollm)
        except Exception:
            traceback.print_exc()
            rc = 1
    log("exit", rc)
    sys.exit(rc)


if __name__ == "__main__":
    main()
