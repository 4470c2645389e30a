#!/usr/bin/env bash
# Acceptance of the trained draft on held-out text (heldout.py: the last 15% of
# each default prompt book, never trained on), through the harness:
#   draft -> target          (--method spec, level 1)
#   draft -> retrieval level (--method triforce, level 1; level 2 = retrieval -> target)
# at T = 0 (with --compare ar: greedy must be token-identical, and the decode
# speedup over ar) and T = 0.6, over every book and context; the same at T = 0
# (with --compare ar) for a baseline draft (layerskip:7, the old default). Then short prompts as users type
# them (short_prompts.py: the first N held-out ones, never trained on, raw and in the chat template) and the
# README's main command (its raw 8-token prompt, --ignore-eos, spec and triforce), at T = 0 (--compare ar) and
# T = 0.6, --short-new tokens each. Prints a table and writes OUT/eval.json (every run's --json line, the
# pooled table) and OUT/runs/*.json.
#
#   experiments/draft/eval_draft.sh BIN OUT [--draft DIR] [--model GGUF] [--prompts DIR]
#       [--device cuda|cpu] [--contexts 1024,4096,7680] [--new 128] [--books N] [--baseline layerskip:7|none]
#       [--short N (16; 0: none)] [--short-new 64] [--sampled 1 (0: the T = 0 runs alone)]
#
# Pooled alpha = sum(accepted) / sum(accepted + rejected decisions) over the
# runs of a cell (the harness's per-level counts), so long runs weigh more.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 BIN OUT [--draft DIR] [--model GGUF] [--prompts DIR] [--device cuda|cpu] [--contexts LIST] [--new N] [--books N] [--baseline SPEC|none]" >&2; exit 2; }
bin=$(realpath "$1"); out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
cache=${TRIFORCE_CACHE:-${XDG_CACHE_HOME:+$XDG_CACHE_HOME/triforce}}; cache=${cache:-$HOME/.cache/triforce}
draft=$here/smollm2-135m-draft model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf prompts=$cache/prompts
device=cuda contexts=1024,4096,7680 new=128 books=0 baseline=layerskip:7 short=16 short_new=64 sampled=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --draft) draft=$2 ;; --model) model=$2 ;; --prompts) prompts=$2 ;; --device) device=$2 ;;
    --contexts) contexts=$2 ;; --new) new=$2 ;; --books) books=$2 ;; --baseline) baseline=$2 ;;
    --short) short=$2 ;; --short-new) short_new=$2 ;; --sampled) sampled=$2 ;;
    *) echo "eval_draft.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $bin ]] || { echo "eval_draft.sh: $bin is not an executable" >&2; exit 2; }
[[ -f $draft/config.json ]] || { echo "eval_draft.sh: --draft $draft: no config.json" >&2; exit 2; }
[[ -f $model ]] || { echo "eval_draft.sh: --model $model: no such file" >&2; exit 2; }
mkdir -p "$out/prompts" "$out/runs"
mapfile -t all_books < <(ls "$prompts"/*.txt 2>/dev/null | sort)
[[ ${#all_books[@]} -gt 0 ]] || { echo "eval_draft.sh: --prompts $prompts: no *.txt books (experiments/prompts/make_default_prompts.sh)" >&2; exit 2; }
[[ $books -gt 0 ]] && all_books=("${all_books[@]:0:$books}")
[[ $books -lt 0 ]] && all_books=()  # --books -1: only the short prompts

# Held-out prompts: the first N tokens of each book's held-out part.
IFS=, read -ra ctxs <<<"$contexts"
prompt_files=()
for b in "${all_books[@]}"; do
  name=$(basename "$b" .txt)
  python3 "$here/heldout.py" "$b" "$out/prompts/$name.heldout.txt"
  "$bin" tokenize --model "$model" --text-file "$out/prompts/$name.heldout.txt" --out "$out/prompts/$name.ids" >/dev/null
  for n in "${ctxs[@]}"; do
    have=$(wc -l <"$out/prompts/$name.ids")
    if [[ $have -lt $n ]]; then echo "  $name: held-out part has $have tokens < $n: skipped" >&2; continue; fi
    head -n "$n" "$out/prompts/$name.ids" >"$out/prompts/$name-$n.ids"
    prompt_files+=("$out/prompts/$name-$n.ids")
  done
done

run() {  # run <label> <prompt file> args... (a .ids file of token ids, or a .txt prompt encoded as --prompt is)
  local label=$1 f=$2; shift 2
  local o="$out/runs/$label.json" src=(--prompt-tokens "$f") n=$new
  [[ $f == *.txt ]] && src=(--prompt-file "$f") n=$short_new
  if ! "$bin" generate --device "$device" "${src[@]}" --max-new-tokens "$n" --ignore-eos --json --seed 0 \
      "$@" >"$o.tmp" 2>"$out/runs/$label.err"; then
    echo "eval_draft.sh: $label failed: $(tail -n 1 "$out/runs/$label.err")" >&2; exit 1
  fi
  tail -n 1 "$o.tmp" >"$o"; rm -f "$o.tmp"
}
for f in "${prompt_files[@]}"; do
  p=$(basename "$f" .ids)
  for m in spec triforce; do
    run "trained.$m.t0.$p" "$f" --method $m --draft "$draft" --temperature 0 --compare ar
    [[ $sampled == 0 ]] || run "trained.$m.t0p6.$p" "$f" --method $m --draft "$draft" --temperature 0.6
    [[ $baseline == none ]] || run "baseline.$m.t0.$p" "$f" --method $m --draft "$baseline" --temperature 0 --compare ar
  done
  echo "  $p done" >&2
done

# Short held-out prompts (raw and chat) and the README command's prompt.
if [[ $short -gt 0 ]]; then
  ${PYTHON:-python3} "$here/short_prompts.py" --write "$out/short" --system-from "$model"  # needs torch, numpy and gguf (llama_torch)
  for f in $(ls "$out/short"/[0-9]*.txt | sort | head -n $((2 * short))) "$out/short/README.raw.txt"; do
    stem=$(basename "$f" .txt)  # 003.raw, README.raw
    num=${stem%%.*} kind=${stem#*.}
    p="s$kind-$num"; [[ $num == README ]] && p=readme
    methods=(spec); [[ $p == readme ]] && methods=(spec triforce)
    for m in "${methods[@]}"; do
      run "trained.$m.t0.$p" "$f" --method $m --draft "$draft" --temperature 0 --compare ar
      [[ $sampled == 0 ]] || run "trained.$m.t0p6.$p" "$f" --method $m --draft "$draft" --temperature 0.6
    done
  done
  echo "  $short short prompts (raw and chat) and the README prompt done" >&2
fi

python3 - "$out" "$draft" "$baseline" "$device" <<'PY'
import glob, json, os, sys
out, draft, baseline, device = sys.argv[1:]
runs = []
for f in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    who, method, _t, prompt = os.path.basename(f)[:-len(".json")].split(".", 3)
    j = json.load(open(f))
    runs.append({"who": who, "method": method, "temperature": j["temperature"], "prompt": prompt,
                 "context": j["n_prompt"], "levels": j["levels"], "chain": j["chain"],
                 "decode_ms_per_token": j["decode_ms_per_token"] if "decode_ms_per_token" in j else None,
                 "ar_decode_ms_per_token": j.get("compare", {}).get("decode_ms_per_token"),
                 "identical_to_ar": j.get("identical_to_compare"), "json": j})
def prompt_set(p):  # books are pooled per context, short prompts per kind
    return p.split("-", 1)[0] if p.startswith(("sraw-", "schat-")) else ("readme" if p == "readme" else "books")
cells = {}
for r in runs:
    r["set"] = prompt_set(r["prompt"])
    ctx = r["context"] if r["set"] == "books" else "-"
    cells.setdefault((r["who"], r["method"], round(r["temperature"], 3), r["set"], ctx), []).append(r)
def pooled(rs, lv):
    acc = sum(r["levels"][lv]["accepted"] for r in rs)
    dec = sum(r["levels"][lv]["accepted"] + r["levels"][lv]["rejected"] for r in rs)
    return acc / dec if dec else float("nan")
table = []
for (who, method, temp, pset, ctx), rs in sorted(cells.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
    row = {"draft": draft if who == "trained" else baseline, "who": who, "method": method, "temperature": temp,
           "prompts": {"books": "held-out books", "sraw": "short, raw", "schat": "short, chat template",
                       "readme": "README command"}[pset], "context": ctx, "runs": len(rs), "alpha_level1": pooled(rs, 0),
           "alpha_level2": pooled(rs, 1) if method == "triforce" else None}
    if temp == 0:
        checked = [r["identical_to_ar"] for r in rs if r["identical_to_ar"] is not None]
        row["identical_to_ar"] = all(checked) if checked else None
        sp = [r["ar_decode_ms_per_token"] / r["json"]["decode_ms_per_token"] for r in rs if r["ar_decode_ms_per_token"]]
        row["speedup_over_ar"] = sum(sp) / len(sp) if sp else None
    table.append(row)
print(f"held-out acceptance ({device}; alpha pooled per cell over its runs)")
print(f"{'draft':9} {'method':9} {'T':>4} {'prompts':22} {'context':>7} {'runs':>4} {'alpha draft->next':>18} {'alpha retr->target':>19} {'greedy == ar':>12} {'speedup':>8}")
for r in table:
    a2 = f"{r['alpha_level2']:.3f}" if r["alpha_level2"] is not None else "-"
    same = {True: "yes", False: "NO"}.get(r.get("identical_to_ar"), "-")
    spd = f"{r['speedup_over_ar']:.2f}x" if r.get("speedup_over_ar") else "-"
    print(f"{r['who']:9} {r['method']:9} {r['temperature']:>4} {r['prompts']:22} {r['context']:>7} {r['runs']:>4} {r['alpha_level1']:>18.3f} {a2:>19} {same:>12} {spd:>8}")
json.dump({"draft": draft, "baseline": baseline, "device": device, "table": table,
           "runs": [{k: v for k, v in r.items() if k != "json"} for r in runs]},
          open(os.path.join(out, "eval.json"), "w"), indent=1)
print(f"wrote {os.path.join(out, 'eval.json')}")
bad = [r for r in table if r.get("identical_to_ar") is False]
if bad:
    print("FAIL: greedy tokens differ from ar in", [(r["who"], r["method"], r["prompts"], r["context"]) for r in bad], file=sys.stderr)
    sys.exit(1)
PY
