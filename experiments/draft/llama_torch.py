"""A minimal Llama forward in PyTorch for training a draft of SmolLM2.

Loads the target from our GGUF (the `gguf` package dequantizes; llama.cpp's
q/k row permutation is undone as src/io/gguf_weights.cpp does), or from an HF
safetensors folder (the test fixtures). The math is transformers' LlamaForCausalLM:
RMSNorm in f32, rotate-half RoPE from inv_freq = theta^(-2i/d), GQA attention,
SiLU MLP. check_target.py compares it with `triforce logits`.
"""
import glob
import json
import os
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F


def import_gguf():
    """The gguf package, from site-packages or a wheel carried in .deps/."""
    try:
        import yaml  # noqa: F401
    except ImportError:  # gguf.metadata imports it at load time for model cards, which we never read
        sys.modules["yaml"] = types.ModuleType("yaml")
    try:
        import gguf  # noqa: F401
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for whl in sorted(glob.glob(os.path.join(root, ".deps", "gguf-*.whl"))):
            sys.path.insert(0, whl)  # a pure-Python wheel imports from the zip
        import gguf  # noqa: F401
    import gguf
    return gguf


# ---- safetensors (the format is 8 bytes of header length, a JSON header, raw
# little-endian data): written and read here so the GPU machine needs only
# torch, numpy and the gguf wheel ----

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32}


def save_safetensors(path, arrays, metadata=None):
    """arrays: {name: numpy array of a dtype in ST_DTYPES}, stored in name order."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        code = next(k for k, v in ST_DTYPES.items() if a.dtype == v)
        b = a.tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """{name: numpy array}: F32, F16 and BF16 tensors as f32, I32 as int32."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":
            u = np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            a = np.frombuffer(data[b:e], dtype=ST_DTYPES[t["dtype"]])
        out[name] = a.reshape(t["shape"]) if t["dtype"] == "I32" else a.reshape(t["shape"]).astype(np.float32)
    return out


# ---- config ----

class Config:
    def __init__(self, vocab, hidden, inter, layers, heads, kv_heads, head_dim, eps, theta, max_pos, tie=True,
                 bos=-1, eos=()):
        self.vocab, self.hidden, self.inter, self.layers = vocab, hidden, inter, layers
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.eps, self.theta, self.max_pos, self.tie = eps, theta, max_pos, tie
        self.bos, self.eos = bos, list(eos)

    def hf_fields(self):
        """The config.json fields the C++ loader reads (src/io/hf_config.cpp)."""
        return {"vocab_size": self.vocab, "hidden_size": self.hidden, "intermediate_size": self.inter,
                "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
                "max_position_embeddings": self.max_pos, "rms_norm_eps": self.eps, "rope_theta": self.theta}


def config_from_hf(path):
    with open(os.path.join(path, "config.json")) as f:
        j = json.load(f)
    rp = j.get("rope_parameters") or {}
    rs = j.get("rope_scaling") or {}
    if rp.get("rope_type", rs.get("rope_type", rs.get("type", "default"))) not in ("default", None):
        raise SystemExit(f"{path}: rope scaling is not implemented in llama_torch.py")
    heads = j["num_attention_heads"]
    eos = j.get("eos_token_id")
    return Config(j["vocab_size"], j["hidden_size"], j["intermediate_size"], j["num_hidden_layers"], heads,
                  j.get("num_key_value_heads", heads), j.get("head_dim") or j["hidden_size"] // heads,
                  j.get("rms_norm_eps", 1e-6), rp.get("rope_theta", j.get("rope_theta", 10000.0)),
                  j.get("max_position_embeddings", 2048), j.get("tie_word_embeddings", False),
                  j.get("bos_token_id") if j.get("bos_token_id") is not None else -1,
                  [] if eos is None else (eos if isinstance(eos, list) else [eos]))


# ---- loading ----

GGUF_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
              "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj"}


def unpermute_qk(w, heads):
    """llama.cpp stores HF row h*hd + s*(hd/2) + j at h*hd + 2*j + s; put it back."""
    rows, cols = w.shape
    hd = rows // heads
    return w.reshape(heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def load_gguf(path):
    """(Config, {HF name: f32 numpy array}) of a llama GGUF."""
    gguf = import_gguf()
    r = gguf.GGUFReader(path)

    def field(name, default=None):
        f = r.fields.get(name)
        if f is None:
            return default
        v = f.contents()
        return v

    arch = field("general.architecture")
    if arch != "llama":
        raise SystemExit(f"{path}: general.architecture is {arch!r}, expected llama")
    heads = int(field("llama.attention.head_count"))
    hidden = int(field("llama.embedding_length"))
    tensors = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        n = t.name
        if n == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif n == "output_norm.weight":
            hf = "model.norm.weight"
        elif n == "output.weight":
            hf = "lm_head.weight"
        elif n.startswith("blk."):
            _, l, leaf, _w = n.split(".")
            hf = f"model.layers.{l}.{GGUF_NAMES[leaf]}.weight"
        else:
            continue
        tensors[hf] = a
    kv = int(field("llama.attention.head_count_kv", heads))
    for name in list(tensors):
        if name.endswith("q_proj.weight"):
            tensors[name] = unpermute_qk(tensors[name], heads)
        elif name.endswith("k_proj.weight"):
            tensors[name] = unpermute_qk(tensors[name], kv)
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    eos = field("tokenizer.ggml.eos_token_id")
    cfg = Config(vocab, hidden, int(field("llama.feed_forward_length")), int(field("llama.block_count")), heads, kv,
                 int(field("llama.attention.key_length", hidden // heads)),
                 float(field("llama.attention.layer_norm_rms_epsilon")), float(field("llama.rope.freq_base", 10000.0)),
                 int(field("llama.context_length", 2048)), "lm_head.weight" not in tensors,
                 int(field("tokenizer.ggml.bos_token_id", -1)), [] if eos is None else [int(eos)])
    return cfg, tensors


def load_hf(path):
    cfg = config_from_hf(path)
    tensors = {}
    for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        tensors.update(load_safetensors(f))
    return cfg, tensors


def load_target(path):
    return load_gguf(path) if path.endswith(".gguf") else load_hf(path)


# ---- the model ----

class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):  # transformers: normalize in f32, scale in the input dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        a = self.self_attn = torch.nn.Module()  # HF names: model.layers.N.self_attn.q_proj.weight, ...
        a.q_proj, a.k_proj = lin(c.hidden, c.heads * c.head_dim), lin(c.hidden, c.kv_heads * c.head_dim)
        a.v_proj, a.o_proj = lin(c.hidden, c.kv_heads * c.head_dim), lin(c.heads * c.head_dim, c.hidden)
        m = self.mlp = torch.nn.Module()
        m.gate_proj, m.up_proj, m.down_proj = lin(c.hidden, c.inter), lin(c.hidden, c.inter), lin(c.inter, c.hidden)
        self.c = c

    def forward(self, x, cos, sin, cache=None, start=0):
        c = self.c
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        at, mlp = self.self_attn, self.mlp
        q = at.q_proj(h).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = at.k_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = at.v_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:  # (K, V) [B, KH, capacity, D]; this call's rows at [start, start + T)
            cache[0][:, :, start:start + T] = k
            cache[1][:, :, start:start + T] = v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        gqa = {}
        if c.heads != c.kv_heads:
            if SDPA_GQA:  # each KV head serves its group of query heads, without copying the cache per step
                gqa = {"enable_gqa": True}
            else:
                k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
                v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
        if T > 1 and start > 0:  # a multi-token call after a prefix: causal by position
            mask = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(start)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **gqa)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, **gqa)
        x = x + at.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))


def _sdpa_has_gqa():
    """enable_gqa exists from torch 2.5 on; older torch repeats the KV heads."""
    try:
        q = torch.zeros(1, 2, 1, 4)
        F.scaled_dot_product_attention(q, q[:, :1], q[:, :1], enable_gqa=True)
        return True
    except TypeError:
        return False


SDPA_GQA = _sdpa_has_gqa()


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Llama(torch.nn.Module):
    """Layers + final norm; the embedding (and tied head) is a buffer given
    from outside, so a draft can share the target's without training it."""

    def __init__(self, c, embed, lm_head=None):
        super().__init__()
        self.c = c
        self.layers = torch.nn.ModuleList([Layer(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.hidden, c.eps)
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", embed if lm_head is None else lm_head, persistent=False)
        d = c.head_dim
        self.inv_freq = 1.0 / (c.theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))

    def rope_tables(self, start, T, device):
        pos = torch.arange(start, start + T, dtype=torch.float32)
        f = torch.outer(pos, self.inv_freq)
        e = torch.cat((f, f), dim=-1)
        return e.cos().to(device), e.sin().to(device)

    def forward(self, ids, caches=None, start=0, last_only=False):
        x = F.embedding(ids, self.embed)
        cos, sin = self.rope_tables(start, ids.shape[1], ids.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i], start)
        x = self.norm(x)
        if last_only:
            x = x[:, -1:]
        return F.linear(x, self.lm_head)

    def new_caches(self, B, capacity, dtype, device):
        c = self.c
        return [(torch.zeros(B, c.kv_heads, capacity, c.head_dim, dtype=dtype, device=device),
                 torch.zeros(B, c.kv_heads, capacity, c.head_dim, dtype=dtype, device=device))
                for _ in range(c.layers)]


def build_target(path, device, dtype):
    """The target as a frozen Llama; returns (model, config, f32 embedding on the CPU)."""
    cfg, t = load_target(path)
    embed = torch.from_numpy(t["model.embed_tokens.weight"])
    head = None if cfg.tie else torch.from_numpy(t["lm_head.weight"]).to(device, dtype)
    m = Llama(cfg, embed.to(device, dtype), head)
    m.load_state_dict({k[len("model."):] if k.startswith("model.") else k: torch.from_numpy(v)
                       for k, v in t.items() if k.startswith("model.layers.") or k == "model.norm.weight"})
    m.to(device=device, dtype=dtype)
    m.requires_grad_(False)
    return m, cfg, embed


# ---- the shared-embedding marker (model/shared_embedding.h) ----

def fingerprint(embed, vocab, n=8):
    """Rows spread over the vocabulary and their L2 norms in f32."""
    rows = [int((k * 6151 + 17) % vocab) for k in range(n)]
    e = embed.float()
    return rows, [float(e[r].norm()) for r in rows]


def draft_config_json(target_cfg, draft_layers, embed):
    c = target_cfg
    rows, norms = fingerprint(embed, c.vocab)
    j = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
         "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True, "torch_dtype": "float16"}
    j.update(c.hf_fields())
    j["num_hidden_layers"] = draft_layers
    if c.bos >= 0:
        j["bos_token_id"] = c.bos
    if c.eos:
        j["eos_token_id"] = c.eos[0] if len(c.eos) == 1 else c.eos
    j["triforce_shared_embedding"] = {"tensor": "model.embed_tokens.weight", "target": c.hf_fields(),
                                      "fingerprint_rows": rows, "fingerprint_norms": norms}
    return j


DRAFT_VOCAB = "triforce_draft_vocab"  # the draft's reduced vocabulary (src/model/draft_vocab.h)


def export_draft(draft, target_cfg, embed, out_dir, meta=None, vocab_ids=None):
    """safetensors (f16, no embedding) + config.json in HF llama layout; with
    vocab_ids (sorted, unique) also the reduced vocabulary as I32 [K]."""
    os.makedirs(out_dir, exist_ok=True)
    sd = {("model." + k): v.detach().to("cpu", torch.float16).numpy() for k, v in draft.state_dict().items()}
    if vocab_ids is not None:
        ids = np.asarray(vocab_ids, dtype=np.int32)
        if ids.ndim != 1 or len(ids) == 0 or np.any(np.diff(ids) <= 0) or ids[0] < 0 or ids[-1] >= target_cfg.vocab:
            raise SystemExit(f"export_draft: the reduced vocabulary must be sorted unique ids in [0, {target_cfg.vocab})")
        sd[DRAFT_VOCAB] = ids
    st = os.path.join(out_dir, "model.safetensors")
    save_safetensors(st, sd, meta)
    os.chmod(st, 0o644)  # committed to the repository as a readable file
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(draft_config_json(target_cfg, len(draft.layers), embed), f, indent=2)
        f.write("\n")


def load_draft(out_dir, embed, device, dtype):
    """The exported draft back as a Llama on `embed` (what the C++ loader sees)."""
    with open(os.path.join(out_dir, "config.json")) as f:
        j = json.load(f)
    c = Config(j["vocab_size"], j["hidden_size"], j["intermediate_size"], j["num_hidden_layers"],
               j["num_attention_heads"], j["num_key_value_heads"], j["head_dim"], j["rms_norm_eps"], j["rope_theta"],
               j["max_position_embeddings"])
    st = load_safetensors(os.path.join(out_dir, "model.safetensors"))
    ids = st.pop(DRAFT_VOCAB, None)
    e = embed.to(device, dtype)
    head = None if ids is None else e[torch.from_numpy(ids.astype(np.int64)).to(device)]
    m = Llama(c, e, head)
    m.load_state_dict({k[len("model."):]: torch.from_numpy(v) for k, v in st.items()})
    return m.to(device=device, dtype=dtype)


def sample(logits, temperature, gen):
    """Greedy at T = 0, else a draw from softmax(logits / T)."""
    if temperature == 0:
        return logits.argmax(-1)
    p = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(p, 1, generator=gen).squeeze(-1)


@torch.no_grad()
def generate(model, prompts, n_new, temperature, gen):
    """prompts [B, P] -> [B, P + n_new], with a KV cache."""
    B, P = prompts.shape
    caches = model.new_caches(B, P + n_new, next(model.parameters()).dtype, prompts.device)
    logits = model(prompts, caches, 0, last_only=True)[:, -1]
    out = [prompts]
    for i in range(n_new):
        tok = sample(logits, temperature, gen)[:, None]
        out.append(tok)
        if i + 1 < n_new:
            logits = model(tok, caches, P + i)[:, -1]
    return torch.cat(out, dim=1)


@torch.no_grad()
def generate_ragged(model, prompts, n_new, temperatures, gen, pad=0):
    """Continuations of prompts of different lengths in one batch: every row
    starts at position 0 and is fed its own prompt token by token (a forced
    step) until its prompt ends, then its own samples, so no padding enters the
    attention. prompts: list of B token lists; temperatures [B] (0 = greedy).
    Returns (tokens [B, max_len + n_new] right-padded with `pad`, lengths [B] =
    len(prompt) + n_new)."""
    dev = temperatures.device
    B = len(prompts)
    lens = torch.tensor([len(p) for p in prompts], device=dev)
    total = int(lens.max()) + n_new
    seq = torch.full((B, total), pad, dtype=torch.long, device=dev)
    for i, p in enumerate(prompts):
        seq[i, :len(p)] = torch.tensor(p, dtype=torch.long)
    caches = model.new_caches(B, total, next(model.parameters()).dtype, dev)
    greedy = temperatures <= 0
    t_safe = torch.where(greedy, torch.ones_like(temperatures), temperatures)[:, None]
    for t in range(total - 1):
        logits = model(seq[:, t:t + 1], caches, t)[:, -1].float()
        probs = torch.softmax(logits / t_safe, dim=-1)
        drawn = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        nxt = torch.where(greedy, logits.argmax(-1), drawn)
        free = (t + 1 >= lens) & (t + 1 < lens + n_new)  # past its prompt, inside its budget
        seq[:, t + 1] = torch.where(free, nxt, seq[:, t + 1])
    return seq, lens + n_new


def max_rel_err(a, b):
    """max |a - b| over the largest |b| (the harness's logits tolerance)."""
    return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(b)))))

