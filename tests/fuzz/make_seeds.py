#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/<target>/seed_*), small
valid inputs taken from tests/fixtures where possible and a few invalid ones.
Deterministic; rerun after changing it. Crash regressions (crash_*) are added
by hand and never touched here."""
import json, os, shutil, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
CONFIGS = os.path.join(HERE, "..", "..", "configs")


def out(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


def clean(target):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    if os.path.isdir(d):
        for f in os.listdir(d):
            if f.startswith("seed_"):
                os.remove(os.path.join(d, f))


# ---------------------------------------------------------------- safetensors
def safetensors(tensors, meta=None, pad_to=8):
    header, blob = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * ((pad_to - len(h) % pad_to) % pad_to)
    return struct.pack("<Q", len(h)) + h + blob


def f32(*v): return struct.pack("<%df" % len(v), *v)


def st_seeds():
    clean("safetensors")
    ok = safetensors([("model.norm.weight", "F32", [4], f32(1, 2, 3, 4)),
                      ("lm_head.weight", "F16", [2, 3], struct.pack("<6e", 1, -2, 0.5, 0, 65504, -0.0)),
                      ("model.embed_tokens.weight", "BF16", [3, 2], struct.pack("<6H", *[0x3f80, 0xbf80, 0, 0x7f80, 0xff80, 0x7fc0])),
                      ("scalar", "F32", [], f32(7)), ("empty", "F32", [0, 5], b""),
                      ("ids", "I64", [2], struct.pack("<2q", 1, 2))],
                     meta={"format": "pt"})
    out("safetensors", "valid_mixed.safetensors", ok)
    # The first tensors of the mha_f32 fixture's header, shrunk to 2 rows.
    with open(os.path.join(FIX, "hf", "mha_f32", "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    names = sorted(k for k in hdr if k != "__metadata__")[:4]
    ts = []
    for k in names:
        shape = [min(2, d) for d in hdr[k]["shape"]]
        cnt = 1
        for d in shape: cnt *= d
        ts.append((k, hdr[k]["dtype"], shape, f32(*[0.25 * i for i in range(cnt)])))
    out("safetensors", "fixture_mha_names.safetensors", safetensors(ts, meta=hdr.get("__metadata__")))
    out("safetensors", "bad_header_length.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    out("safetensors", "bad_json.safetensors", struct.pack("<Q", 5) + b"{\"a\":")
    out("safetensors", "offsets_out_of_range.safetensors",
        struct.pack("<Q", 64) + json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}).encode().ljust(64))
    out("safetensors", "size_mismatch.safetensors",
        safetensors([("w", "F32", [3], f32(1, 2))]))
    out("safetensors", "short.safetensors", b"\x04\x00\x00")


# ---------------------------------------------------------------- GGUF
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gkv(key, t, v):
    if t == 8: body = gstr(v)
    elif t == 4: body = struct.pack("<I", v)
    elif t == 5: body = struct.pack("<i", v)
    elif t == 6: body = struct.pack("<f", v)
    elif t == 7: body = struct.pack("<B", v)
    elif t == 10: body = struct.pack("<Q", v)
    elif t == 9:
        et, items = v
        body = struct.pack("<IQ", et, len(items))
        for x in items:
            body += gstr(x) if et == 8 else struct.pack({5: "<i", 6: "<f", 4: "<I"}[et], x)
    return gstr(key) + struct.pack("<I", t) + body


GTYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
          "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
          "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gguf(kvs, tensors, align=32):
    # tensors: (name, type, ne list); data is a deterministic byte pattern
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, datas, off = b"", b"", 0
    for name, tname, ne in tensors:
        tid, blk, nb = GTYPES[tname]
        cnt = 1
        for d in ne: cnt *= d
        size = cnt // blk * nb
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tid, off)
        raw = bytes((i * 37 + 11) % 251 for i in range(size))
        if tname in ("F16",): raw = struct.pack("<%de" % cnt, *[0.5 * (i % 7) for i in range(cnt)])
        datas += raw.ljust((size + align - 1) // align * align, b"\0")
        off += (size + align - 1) // align * align
    body = head + infos
    body += b"\0" * ((align - len(body) % align) % align)
    return body + datas


def llama_kvs(vocab, extra=()):
    return [gkv("general.architecture", 8, "llama"), gkv("llama.block_count", 4, 1),
            gkv("llama.embedding_length", 4, 32), gkv("llama.feed_forward_length", 4, 64),
            gkv("llama.attention.head_count", 4, 2), gkv("llama.attention.head_count_kv", 4, 1),
            gkv("llama.context_length", 4, 128), gkv("llama.rope.freq_base", 6, 10000.0),
            gkv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5), gkv("llama.vocab_size", 4, vocab)] + list(extra)


def gguf_seeds():
    clean("gguf")
    # gpt2 byte-level alphabet (as the tokenizer stores it)
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    cps, extra = {}, 256
    for b in range(256):
        if b in keep: cps[b] = b
        else: cps[b] = extra; extra += 1
    alpha = [chr(cps[b]) for b in range(256)]
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "l l", "\u0120 w"]
    vocab = ["<|endoftext|>", "<|im_start|>"] + alpha + ["\u0120t", "he", "\u0120the", "in", "ll", "\u0120w"]
    types = [3, 3] + [1] * (len(vocab) - 2)
    tok = [gkv("tokenizer.ggml.model", 8, "gpt2"), gkv("tokenizer.ggml.pre", 8, "smollm"),
           gkv("tokenizer.ggml.tokens", 9, (8, vocab)), gkv("tokenizer.ggml.merges", 9, (8, merges)),
           gkv("tokenizer.ggml.token_type", 9, (5, types)), gkv("tokenizer.ggml.bos_token_id", 4, 1),
           gkv("tokenizer.ggml.eos_token_id", 4, 0), gkv("tokenizer.ggml.add_bos_token", 7, 1)]
    out("gguf", "tokenizer_only.gguf", gguf(llama_kvs(len(vocab), tok), []))
    ts = [("output_norm.weight", "F32", [32]), ("blk.0.attn_q.weight", "Q8_0", [32, 4]),
          ("blk.0.attn_k.weight", "Q4_0", [32, 2]), ("blk.0.attn_v.weight", "Q4_1", [32, 2]),
          ("blk.0.ffn_up.weight", "Q5_0", [32, 2]), ("blk.0.ffn_down.weight", "Q5_1", [32, 2]),
          ("blk.0.attn_norm.weight", "BF16", [32]), ("blk.0.ffn_norm.weight", "F16", [32])]
    out("gguf", "quant_tensors.gguf", gguf(llama_kvs(64), ts))
    out("gguf", "kquant_tensors.gguf", gguf(llama_kvs(64, [gkv("general.alignment", 4, 64)]),
                                            [("blk.0.ffn_gate.weight", "Q4_K", [256, 1]),
                                             ("blk.0.attn_output.weight", "Q5_K", [256, 1]),
                                             ("output.weight", "Q6_K", [256, 1])], align=64))
    out("gguf", "rope_yarn.gguf", gguf(llama_kvs(8, [gkv("llama.rope.scaling.type", 8, "yarn"),
                                                      gkv("llama.rope.scaling.factor", 6, 4.0),
                                                      gkv("llama.rope.scaling.original_context_length", 4, 32)]), []))
    good = gguf(llama_kvs(64), ts[:2])
    out("gguf", "truncated.gguf", good[: len(good) - 40])
    out("gguf", "bad_magic.gguf", b"GGUX" + good[4:64])
    out("gguf", "huge_counts.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))
    out("gguf", "nested_array.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("a") +
        struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2))


# ---------------------------------------------------------------- config.json
def config_seeds():
    clean("hf_config")
    hf = os.path.join(FIX, "hf")
    for d in sorted(os.listdir(hf)):
        p = os.path.join(hf, d, "config.json")
        if os.path.isfile(p):
            shutil.copy(p, os.path.join(HERE, "hf_config", "seed_" + d + ".json"))
    shutil.copy(os.path.join(FIX, "smollm2", "config.json"), os.path.join(HERE, "hf_config", "seed_smollm2.json"))
    base = json.load(open(os.path.join(hf, "mha_f32", "config.json")))
    b = dict(base); b["rope_parameters"] = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0,
                                            "original_max_position_embeddings": 64}
    out("hf_config", "rope_parameters.json", json.dumps(b))
    b = dict(base); b["num_attention_heads"] = 0
    out("hf_config", "zero_heads.json", json.dumps(b))
    b = dict(base); b["eos_token_id"] = [1, "x"]
    out("hf_config", "bad_eos.json", json.dumps(b))
    out("hf_config", "not_object.json", "[1, 2]")


# ---------------------------------------------------------------- sweep INI
def ini_seeds():
    clean("sweep_ini")
    sw = os.path.join(CONFIGS, "sweeps")
    for f in sorted(os.listdir(sw)):
        shutil.copy(os.path.join(sw, f), os.path.join(HERE, "sweep_ini", "seed_" + f))
    shutil.copy(os.path.join(CONFIGS, "demo.ini"), os.path.join(HERE, "sweep_ini", "seed_generate_demo.ini"))
    out("sweep_ini", "simulate.ini", "context = 64\nmethod = triforce,spec\nsimulate-acceptance = 0.2|0.5/0.9, 0.7, none\n"
        "reretrieve = never, every:8, below:0.5\nseed = 0:4:2\nshard = 1/3\n")
    out("sweep_ini", "bad_range.ini", "context = 10:1:1\n")
    out("sweep_ini", "huge_grid.ini", "context = 1:99999:1\nseed = 0:99999:1\nmethod = triforce\n")
    out("sweep_ini", "unknown_key.ini", "context = 64\nbudgte = 4\n")


# ---------------------------------------------------------------- tokenizer.json, BPE merges
def tokenizer_seeds():
    clean("tokenizer_json")
    j = json.load(open(os.path.join(FIX, "tokenizer", "smollm2_tokenizer.json")))
    vocab = {k: v for k, v in j["model"]["vocab"].items() if v < 300}
    merges = [m for m in j["model"]["merges"] if (m[0] + m[1]) in vocab][:40]
    small = dict(j)
    small["model"] = dict(j["model"], vocab=vocab, merges=merges)
    small["added_tokens"] = j["added_tokens"][:3]
    out("tokenizer_json", "smollm2_small.json", json.dumps(small))
    variants = json.load(open(os.path.join(FIX, "tokenizer", "bpe_variants.json")))["variants"]
    for name, v in sorted(variants.items()):
        t = dict(small, pre_tokenizer=v["pre_tokenizer"], post_processor=v["post_processor"])
        out("tokenizer_json", "variant_" + name + ".json", json.dumps(t))
    t = dict(small); t["model"] = dict(small["model"], merges=[a + " " + b for a, b in merges], unk_token="<|endoftext|>")
    t["added_tokens"] = [dict(a, lstrip=True, rstrip=True) for a in small["added_tokens"]]
    t["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                                                     {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {}}
    out("tokenizer_json", "string_merges_template.json", json.dumps(t))
    t = dict(small); t["model"] = dict(small["model"], type="Unigram")
    out("tokenizer_json", "unigram.json", json.dumps(t))
    t = dict(small); t["normalizer"] = {"type": "Lowercase"}
    out("tokenizer_json", "normalizer.json", json.dumps(t))
    clean("bpe_merges")
    text = "Hello world, it's 2024! caf\u00e9 \u4e2d\u6587\n\tend  ".encode()
    ms = "\n".join(" ".join(m) for m in merges).encode()
    for sel in range(5):
        out("bpe_merges", "pre%d" % sel, bytes([sel]) + text + b"\0" + b"H e\nHe l\nl o\nHel lo\n w\n 2 0\n" + ms)
    out("bpe_merges", "invalid_utf8", bytes([1]) + b"\xff\xfe a\xc3 b\xe2\x82" + b"\0" + b"\xff \xfe\n\xc3 \xa9")


# ---------------------------------------------------------------- .npy, token files
def npy(descr, shape, raw, major=1):
    shp = "(" + "".join("%d," % s for s in shape) + ")" if len(shape) == 1 else "(" + ", ".join(str(s) for s in shape) + ")"
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shp)
    pre = 10 if major == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    n = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + n + h.encode() + raw


def npy_seeds():
    clean("npy")
    for f in ["smollm2/prompt.npy", "smollm2/greedy.npy", "hf/mha_f32/greedy.npy", "hf/mha_f32/prompt.npy"]:
        shutil.copy(os.path.join(FIX, f), os.path.join(HERE, "npy", "seed_" + f.replace("/", "_")))
    out("npy", "f32_2d.npy", npy("<f4", [2, 3], f32(*range(6))))
    out("npy", "i64_v2.npy", npy("<i8", [3], struct.pack("<3q", 1, -2, 1 << 40), major=2))
    out("npy", "fortran.npy", npy("<f4", [2], f32(1, 2)).replace(b"False", b"True "))
    out("npy", "truncated.npy", npy("<i4", [100], struct.pack("<2i", 1, 2)))
    out("npy", "bad_shape.npy", npy("<i4", [1], struct.pack("<i", 1)).replace(b"(1,)", b"(x, )"))
    out("npy", "u8.npy", npy("|u1", [4], b"abcd"))
    clean("token_file")
    out("token_file", "ids.txt", "1\n22\n333\n")
    out("token_file", "spaces_crlf.txt", "  7 \r\n\n\t8\t\r\n")
    out("token_file", "negative.txt", "1\n-5\n")
    out("token_file", "too_big.txt", "4294967296\n")
    out("token_file", "csv.txt", "1,2,,3")
    out("token_file", "empty.txt", "\n \n")
    shutil.copy(os.path.join(FIX, "smollm2", "prompt.npy"), os.path.join(HERE, "token_file", "seed_prompt.npy"))
    out("token_file", "f32.npy", npy("<f4", [2], f32(1, 2)))


if __name__ == "__main__":
    st_seeds(); gguf_seeds(); config_seeds(); ini_seeds(); tokenizer_seeds(); npy_seeds()
    for t in sorted(os.listdir(HERE)):
        d = os.path.join(HERE, t)
        if os.path.isdir(d):
            fs = os.listdir(d)
            print("%-16s %2d files, %6d bytes" % (t, len(fs), sum(os.path.getsize(os.path.join(d, f)) for f in fs)))
