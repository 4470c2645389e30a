#!/usr/bin/env python3
"""HF transformers peer: greedy decoding on a StaticCache, the decode step under
torch.compile(mode="reduce-overhead"), measured the way triforce measures `ar`.

    python3 experiments/peers/hf_static_compile.py --model synthetic:llama2-7b-128k \\
        --prompt-len 122880 --new-tokens 256 --out peers.jsonl

The model is LlamaForCausalLM (AutoModelForCausalLM for --model PATH) built from
the config with random weights made on the device (the peer measures speed only,
as triforce's synthetic models do). The prompt is ids (i * 7919) % min(32000, vocab),
the same as the triforce study. Like triforce's `ar`, the first P - 1 prompt
tokens are prefilled (in --prefill-chunk pieces, eagerly, as HF's generate()
does) and the last prompt token is the first of N one-token decode steps, so the
timed steps end at KV lengths P .. P + N - 1.

Warm-up: --warmup decode steps from the end of the prompt (for the compiled step:
compilation and CUDA graph recording), then the cache length is reset to P - 1
and the N timed steps run from there; warm-up is reported on its own
(compile_s, warmup_s). Each step is timed with CUDA events (host clock on the
CPU). One JSON line per decode mode goes to --out (appended) and to stdout;
experiments/plot.py --peers overlays them on a sweep's plots.

The bandwidth floor of a step is (weight bytes + bytes of the KV it must read) /
--peak-tbps (4.22 TB/s: the measured H200 HBM read peak triforce's benches use);
the KV read is the step's true length, so the static cache's masked tail counts
against the peer, as it costs it time.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time

PROG = "hf_static_compile.py"

# The published config.json of each model, trimmed as in src/model/weights_device.cpp
# (kSynthetic); `tiny` is a test shape of this script only (YaRN rope, GQA).
SYNTHETIC = {
    "llama2-7b-128k": {  # NousResearch/Yarn-Llama-2-7b-128k
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "llama3.1-8b": {  # meta-llama/Llama-3.1-8B
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "smollm2-135m": {  # HuggingFaceTB/SmolLM2-135M
        "architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
        "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
    "llama-68m": {  # JackFram/llama-68m
        "architectures": ["LlamaForCausalLM"], "hidden_size": 768, "intermediate_size": 3072,
        "num_hidden_layers": 2, "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "bos_token_id": 0, "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "float32"},
    "tiny": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "float32",
        # Large weights, so that the context moves the greedy tokens and --check-tokens can see a cache bug
        # (at 0.02 a 2-layer model's next token is a function of the current token alone).
        "initializer_range": 0.5},
}
DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
PROMPT_MULTIPLIER, PROMPT_MODULUS = 7919, 32000


class UsageError(Exception):
    """Bad input: one line naming the option, file or tensor, then exit 2."""


START = time.perf_counter()


def note(msg):
    """Progress on stderr, so a run cut short by a time limit still says where its time went."""
    print(f"{PROG}: [{time.perf_counter() - START:6.1f} s] {msg}", file=sys.stderr, flush=True)


def fail(msg, code=2):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


def positive(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a positive integer")
    return v


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line (no usage block) and exit 2."""

    def error(self, message):
        fail(message)


def parse_args(argv):
    ap = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True,
                    help="synthetic:NAME (" + ", ".join(SYNTHETIC) + ") or an HF folder with config.json")
    ap.add_argument("--prompt-len", type=positive, required=True, help="prompt tokens P")
    ap.add_argument("--new-tokens", type=positive, default=256, help="timed decode steps N")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:K or cpu")
    ap.add_argument("--prefill-chunk", type=positive, default=4096,
                    help="prompt tokens per prefill forward (a 122,880-token mask in one piece is ~15 GB)")
    ap.add_argument("--warmup", type=positive, default=3,
                    help="untimed decode steps before the timed ones (compile + graph record + one replay)")
    ap.add_argument("--no-compile", action="store_true", help="decode eagerly (method hf-static-eager)")
    ap.add_argument("--eager-too", action="store_true",
                    help="after the compiled decode, reset to the prompt and decode eagerly too (two rows, one prefill)")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (default sdpa)")
    ap.add_argument("--real-weights", action="store_true", help="--model PATH: load its safetensors instead of random")
    ap.add_argument("--peak-tbps", type=float, default=4.22, help="HBM read peak for the floor (default 4.22)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="append the JSON lines to this file")
    ap.add_argument("--label", default="", help="free text kept in each row (plot legends use it)")
    ap.add_argument("--check-tokens", action="store_true",
                    help="recompute the greedy tokens without a cache (a full forward per token; small models only)")
    a = ap.parse_args(argv)
    if a.no_compile and a.eager_too:
        ap.error("--eager-too: already eager with --no-compile")
    if a.peak_tbps <= 0:
        ap.error(f"--peak-tbps {a.peak_tbps}: expected a positive bandwidth in TB/s")
    if a.real_weights and a.model.startswith("synthetic:"):
        ap.error(f"--real-weights: {a.model} has no weights to load; give an HF folder")
    # What needs no torch is checked before the (slow) import.
    if a.model.startswith("synthetic:"):
        name = a.model[len("synthetic:"):]
        if name not in SYNTHETIC:
            ap.error(f"--model {a.model}: unknown synthetic model; expected one of "
                     + ", ".join("synthetic:" + n for n in SYNTHETIC))
        max_pos = SYNTHETIC[name]["max_position_embeddings"]
        if a.prompt_len + a.new_tokens > max_pos:
            ap.error(f"--prompt-len {a.prompt_len} + --new-tokens {a.new_tokens} exceeds {a.model}'s "
                     f"max_position_embeddings {max_pos}")
    elif not os.path.isfile(os.path.join(a.model, "config.json")):
        ap.error(f"--model {a.model}: expected synthetic:NAME or a folder holding config.json")
    if a.device != "cpu" and not (a.device == "cuda" or (a.device.startswith("cuda:") and a.device[5:].isdigit())):
        ap.error(f"--device {a.device}: expected cuda, cuda:K or cpu")
    return a


def load_config(model, attn):
    """The HF config of --model: a synthetic JSON or PATH/config.json."""
    from transformers import AutoConfig, LlamaConfig
    if model.startswith("synthetic:"):
        cfg = LlamaConfig(**SYNTHETIC[model[len("synthetic:"):]])
    else:
        path = os.path.join(model, "config.json")
        try:
            cfg = AutoConfig.from_pretrained(model, local_files_only=True)
        except Exception as e:  # noqa: BLE001 -- transformers raises many kinds here
            raise UsageError(f"{path}: not a config transformers can read ({str(e).splitlines()[0]})")
    cfg._attn_implementation = attn
    return cfg


def build_model(args, cfg, torch, dtype, device):
    """Random weights made on the device (HF's own init under torch.device), or --real-weights."""
    from transformers import AutoModelForCausalLM
    if args.real_weights:
        # Loaded on the host, then moved: a device_map would need accelerate, which the GPU image may lack.
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=args.attn,
                                                     local_files_only=True)
        return model.to(device).eval()
    torch.manual_seed(args.seed)
    # Allocating and initialising under the device context keeps a 7B init on the
    # GPU (seconds); on the CPU it would take minutes. Non-persistent buffers
    # (RoPE inv_freq) are computed as from_pretrained computes them.
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=args.attn)
    return model.eval()


def prompt_ids(n, vocab):
    m = min(PROMPT_MODULUS, vocab)
    return [(i * PROMPT_MULTIPLIER) % m for i in range(n)]


class Clock:
    """Per-interval times: CUDA events on a GPU (no sync inside the loop), the host clock on the CPU."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_cache_length(cache, n):
    """Roll the static cache back to n tokens: later slots are masked by position and overwritten."""
    for layer in cache.layers:
        layer.cumulative_length.fill_(n)


def model_bytes(model):
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:  # a tied lm_head is read once
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def kv_bytes_per_token(cfg, elem):
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elem


def decode(torch, device, step, first, cache, start, warmup, n):
    """warmup untimed steps from `start`, back to `start`, then n timed steps. -> (tokens, ms, warmup times)."""
    warm_s = []
    tok = first
    for _ in range(warmup):
        t0 = time.perf_counter()
        tok = step(tok)
        sync(torch, device)
        warm_s.append(time.perf_counter() - t0)
    set_cache_length(cache, start)
    clock, out = Clock(torch, device), []
    tok = first
    t0 = time.perf_counter()
    clock.mark()
    for _ in range(n):
        tok = step(tok)
        clock.mark()
        out.append(tok)
    ms = clock.intervals_ms()
    wall_ms = (time.perf_counter() - t0) * 1e3
    return [int(t) for t in torch.cat(out).flatten().tolist()], ms, warm_s, wall_ms


def make_step(torch, model, cache, compiled):
    def one_token(token):
        logits = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1,
                       return_dict=False)[0]
        return torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
    if not compiled:
        return one_token
    fn = torch.compile(one_token, mode="reduce-overhead", fullgraph=True)

    def step(token):
        # A new CUDA-graph step each call; the output buffer is reused by the next
        # replay, so the token is copied out before it is fed back.
        torch.compiler.cudagraph_mark_step_begin()
        return fn(token).clone()
    return step


def dynamo_graphs(torch):
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def cudagraph_skips(torch):
    from torch._dynamo.utils import counters
    return int(counters["inductor"]["cudagraph_skips"])


def check_tokens(torch, model, prompt, tokens):
    """Greedy tokens recomputed from scratch (no cache): index of the first mismatch, or -1."""
    seq = list(prompt)
    for i, t in enumerate(tokens):
        ids = torch.tensor([seq], device=model.device)
        want = int(model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].argmax())
        if want != t:
            return i
        seq.append(t)
    return -1


def provenance(torch, device):
    import transformers
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none"
    git = "unknown"
    try:
        git = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda_runtime": torch.version.cuda or "none", "python": platform.python_version(),
            "host": socket.gethostname(), "git_sha": git,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": shlex.join([sys.executable] + sys.argv)}


def peak_memory(torch, device):
    if device.type == "cuda":
        return {"peak_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30}
    import resource
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run(args):
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        fail(f"needs torch and transformers ({e.name} is not importable)", 1)
    torch.set_grad_enabled(False)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:  # torch.cuda's memory queries want an index
        device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: torch sees no CUDA device (use --device cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {args.device}: torch sees {torch.cuda.device_count()} CUDA devices")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    compiled = not args.no_compile
    dtype = getattr(torch, DTYPES[args.dtype])
    cfg = load_config(args.model, args.attn)
    if cfg.model_type != "llama" and not args.model.startswith("synthetic:"):
        print(f"{PROG}: note: {args.model} is model_type {cfg.model_type}, not llama", file=sys.stderr)
    P, N = args.prompt_len, args.new_tokens
    max_pos = getattr(cfg, "max_position_embeddings", None)
    if max_pos and P + N > max_pos:
        raise UsageError(f"--prompt-len {P} + --new-tokens {N} exceeds {args.model}'s "
                         f"max_position_embeddings {max_pos}")
    cache_len = -(-(P + N) // 16) * 16  # SDPA's masked kernels want a 16-aligned key length
    elem = torch.tensor([], dtype=dtype).element_size()
    if device.type == "cuda":
        from transformers import AutoModelForCausalLM
        with torch.device("meta"):
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
        need = n_params * elem + kv_bytes_per_token(cfg, elem) * cache_len
        free, _ = torch.cuda.mem_get_info(device)
        if need > free * 0.97:
            raise UsageError(f"--prompt-len {P}: weights + a {cache_len}-token static cache need "
                             f"{need / 2**30:.1f} GiB but {free / 2**30:.1f} GiB are free on {device}")
        torch.cuda.reset_peak_memory_stats(device)

    t0 = time.perf_counter()
    model = build_model(args, cfg, torch, dtype, device)
    sync(torch, device)
    init_s = time.perf_counter() - t0
    note(f"{args.model} built on {device} in {init_s:.1f} s; prefilling {P - 1} tokens into a "
         f"{cache_len}-token static cache")

    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    # Allocate the cache outside any compiled region (the compiled step must only mutate it).
    cache.early_initialization(1, cfg.num_key_value_heads, head_dim, dtype, device)
    prompt = prompt_ids(P, cfg.vocab_size)
    ids = torch.tensor([prompt], dtype=torch.long, device=device)

    # Prefill P - 1 tokens eagerly in chunks; the last prompt token is decode step 1 (as triforce's ar).
    clock = Clock(torch, device)
    t0 = time.perf_counter()
    clock.mark()
    for s in range(0, P - 1, args.prefill_chunk):
        model(input_ids=ids[:, s:min(s + args.prefill_chunk, P - 1)], past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    clock.mark()
    prefill_ms = clock.intervals_ms()[0]
    prefill_wall_ms = (time.perf_counter() - t0) * 1e3
    note(f"prefill {prefill_ms / 1e3:.2f} s")

    w_bytes = model_bytes(model)
    kv_tok = kv_bytes_per_token(cfg, elem)
    peak = args.peak_tbps * 1e12
    base = {"schema": "triforce-peer", "schema_version": 1, "model": args.model, "label": args.label,
            "dtype": args.dtype, "device": str(device), "attn": args.attn, "context": P, "new_tokens": N,
            "prefill_chunk": args.prefill_chunk, "max_cache_len": cache_len, "warmup_steps": args.warmup,
            "seed": args.seed, "init_s": init_s, "prefill_ms": prefill_ms, "prefill_wall_ms": prefill_wall_ms,
            "prefill_tokens_per_s": (P - 1) / (prefill_ms / 1e3) if P > 1 and prefill_ms > 0 else None,
            "weight_bytes": w_bytes, "kv_bytes_per_token": kv_tok, "peak_tbps": args.peak_tbps}
    base.update(provenance(torch, device))

    first = ids[:, P - 1:P].clone()  # contiguous like the step's own output, or the compiled step recompiles
    modes = [compiled] + ([False] if args.eager_too else [])
    rows, tokens_of = [], {}
    for comp in modes:
        step = make_step(torch, model, cache, comp)
        set_cache_length(cache, P - 1)
        tokens, ms, warm_s, wall_ms = decode(torch, device, step, first, cache, P - 1, args.warmup, N)
        method = "hf-static-compile" if comp else "hf-static-eager"
        tokens_of[method] = tokens
        note(f"{method}: warm-up {sum(warm_s):.1f} s (first call {warm_s[0]:.1f} s), {N} timed steps")
        # Step i (0-based) ends at KV length P + i; its floor reads the weights and that KV.
        floors = [(w_bytes + kv_tok * (P + i)) / peak * 1e3 for i in range(N)]
        floor = statistics.fmean(floors)
        mean, median = statistics.fmean(ms), statistics.median(ms)
        decode_total = sum(ms)
        row = dict(base)
        row.update({
            "method": method, "compiled": comp,
            "compile_s": warm_s[0] if comp else 0.0, "warmup_s": sum(warm_s),
            # 1 when the step compiled once; more means recompiles (guards failing) inside the timing.
            "compiled_graphs": dynamo_graphs(torch) if comp else 0,
            # > 0: inductor ran the step without a CUDA graph (launch-bound; the log says why).
            "cudagraph_skips": cudagraph_skips(torch) if comp else 0,
            "decode_ms_per_token": mean, "ms_per_token_mean": mean, "ms_per_token_median": median,
            "ms_per_token_min": min(ms), "ms_per_token_max": max(ms), "decode_ms": decode_total,
            "decode_wall_ms": wall_ms, "tokens_per_s": 1e3 / mean,
            "e2e_ms": prefill_ms + decode_total, "e2e_ms_per_token": (prefill_ms + decode_total) / N,
            "floor_ms_per_token": floor, "floor_ms_at_context": (w_bytes + kv_tok * P) / peak * 1e3,
            "x_floor": mean / floor, "x_floor_median": median / floor,
            "step_ms": [round(v, 4) for v in ms], "tokens": tokens})
        rows.append(row)
    mem = peak_memory(torch, device)
    if len(rows) == 2:
        a, b = tokens_of["hf-static-compile"], tokens_of["hf-static-eager"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        for r in rows:
            r["tokens_agree_compiled_eager"] = same  # leading tokens equal (bf16 kernels may round apart)
    if args.check_tokens:
        bad = check_tokens(torch, model, prompt, rows[0]["tokens"])
        for r in rows:
            r["check_first_mismatch"] = bad
    for r in rows:
        r.update(mem)
    return rows


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rows = run(args)
    except UsageError as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001 -- one line, whatever torch raised
        kind = type(e).__name__
        if "OutOfMemory" in kind:
            fail(f"--model {args.model} --prompt-len {args.prompt_len}: out of device memory "
                 f"({str(e).splitlines()[0][:200]})", 1)
        fail(f"{kind}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else 'no message'}", 1)
    lines = [json.dumps(r, sort_keys=True) for r in rows]
    if args.out:
        with open(args.out, "a") as f:
            f.write("".join(line + "\n" for line in lines))
    for r, line in zip(rows, lines):
        print(f"{r['method']}: {r['model']} ctx {r['context']} +{r['new_tokens']}: "
              f"{r['ms_per_token_median']:.3f} ms/token median ({r['ms_per_token_mean']:.3f} mean, "
              f"{r['x_floor_median']:.2f}x floor {r['floor_ms_per_token']:.3f}), prefill {r['prefill_ms'] / 1e3:.2f} s, "
              f"e2e {r['e2e_ms'] / 1e3:.2f} s, compile {r['compile_s']:.1f} s", file=sys.stderr)
        print(line)
    if args.check_tokens and rows[0].get("check_first_mismatch", -1) != -1:
        fail(f"--check-tokens: the cached greedy tokens differ from a cache-free recompute at token "
             f"{rows[0]['check_first_mismatch']}", 1)


if __name__ == "__main__":
    main()
