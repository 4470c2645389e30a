#!/usr/bin/env bash
# The trained draft of the default model (experiments/draft/smollm2-135m-draft,
# borrowing SmolLM2's embedding) through the CLI: it is the default --draft for
# SmolLM2 and only for it (synthetic:smollm2-135m has the same shapes and gets
# layerskip; TRIFORCE_DEFAULT_DRAFT=none turns it off); greedy spec, triforce and
# a model:PATH chain level with it give ar's tokens, in one process and under
# mpirun -np 3 (driven and lockstep); the refusals are one line each; a sweep
# takes it as `draft = PATH`. With torch + gguf importable (TRIFORCE_TORCH_PYTHON,
# else .venv/bin/python, else python3): the PyTorch target of
# experiments/draft/llama_torch.py against `triforce logits`, the committed draft
# and a freshly exported tiny draft against `triforce logits --draft`.
set -eu
bin=$1; fixtures=$2
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
draft=experiments/draft/smollm2-135m-draft
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $model ]] || { echo "the default model $model is missing: skipped"; exit 77; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
p="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness"
field() { python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(eval(sys.argv[2]))" "$@"; }
expect_error() {  # expect_error <text> cmd...: non-zero exit, one line on stderr containing text
  local want=$1; shift
  if "$@" >/dev/null 2>"$tmp/err"; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$tmp/err" || fail "expected '$want' from: $*; got: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "not one line: $(cat "$tmp/err")"
}
gen() {  # gen <out.json> args...: 16 new tokens unless args say otherwise
  local out=$1; shift
  [[ " $* " == *" --max-new-tokens "* ]] || set -- --max-new-tokens 16 "$@"
  "$bin" generate --ignore-eos --json "$@" >"$out" 2>"$tmp/gen.err" ||
  { cat "$tmp/gen.err"; fail "generate $*"; }; }

# Default model, no --draft: the trained draft, greedy tokens equal to ar's.
for m in spec triforce; do
  gen "$tmp/$m.json" --prompt "$p" --method $m --compare ar
  [[ $(field "$tmp/$m.json" 'j["draft_choice"]') == trained ]] || fail "$m: draft_choice $(field "$tmp/$m.json" 'j["draft_choice"]')"
  field "$tmp/$m.json" 'j["chain"]' | grep -q "smollm2-135m-draft" || fail "$m: chain $(field "$tmp/$m.json" 'j["chain"]')"
  [[ $(field "$tmp/$m.json" 'j["identical_to_compare"]') == True ]] || fail "$m with the trained draft differs from ar"
  grep -q "draft: model:.*smollm2-135m-draft.* (the trained default draft for this target)" "$tmp/gen.err" ||
    fail "$m: the summary does not name the draft: $(cat "$tmp/gen.err")"
  echo "$m, default draft: $(field "$tmp/$m.json" 'j["chain"]'), alpha $(field "$tmp/$m.json" '[round(l["alpha"], 3) for l in j["levels"]]'), tokens identical to ar"
done
# The same draft named explicitly, as --draft and as a chain level.
gen "$tmp/given.json" --prompt "$p" --method spec --draft "$draft" --compare ar
[[ $(field "$tmp/given.json" 'j["draft_choice"]') == given && $(field "$tmp/given.json" 'j["identical_to_compare"]') == True ]] ||
  fail "--draft $draft"
gen "$tmp/chain.json" --prompt "$p" --chain "model:$draft@streaming:4/24>target@retrieval:16/4>target" --gammas 2,4 --compare ar
[[ $(field "$tmp/chain.json" 'j["identical_to_compare"]') == True ]] || fail "model:$draft chain level differs from ar"
cmp <(field "$tmp/spec.json" 'j["tokens"]') <(field "$tmp/given.json" 'j["tokens"]') >/dev/null || fail "default and --draft differ"
echo "--draft PATH and model:PATH chain level: tokens identical to ar"

# Not the model it was trained for, or turned off: layerskip as before.
TRIFORCE_DEFAULT_DRAFT=none gen "$tmp/none.json" --prompt "$p" --method spec
[[ $(field "$tmp/none.json" 'j["chain"]') == "layerskip:7 > target" && $(field "$tmp/none.json" 'j["draft_choice"]') == layerskip ]] ||
  fail "TRIFORCE_DEFAULT_DRAFT=none: $(field "$tmp/none.json" 'j["chain"]')"
printf '1\n2\n3\n4\n5\n6\n7\n8\n' >"$tmp/ids.txt"
gen "$tmp/syn.json" --target synthetic:smollm2-135m --prompt-tokens "$tmp/ids.txt" --method spec --max-new-tokens 2
[[ $(field "$tmp/syn.json" 'j["draft_choice"]') == layerskip ]] || fail "synthetic:smollm2-135m got the trained draft"
gen "$tmp/fx.json" --target "$fixtures/hf/gqa_f32" --prompt-tokens "$tmp/ids.txt" --method spec
[[ $(field "$tmp/fx.json" 'j["chain"]') == "layerskip:1 > target" ]] || fail "gqa_f32: $(field "$tmp/fx.json" 'j["chain"]')"
echo "default draft: layerskip for synthetic:smollm2-135m (same shapes, other weights), gqa_f32 and TRIFORCE_DEFAULT_DRAFT=none"

# Refusals, one line each.
bad() {  # bad <name> <python edit of c>: a copy of the draft with its config.json edited
  mkdir -p "$tmp/$1"; ln -sf "$PWD/$draft/model.safetensors" "$tmp/$1/model.safetensors"
  python3 - "$draft/config.json" "$tmp/$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))
PY
  echo "$tmp/$1"
}
M='c["triforce_shared_embedding"]'
common=(generate --prompt "$p" --method spec --max-new-tokens 2)
expect_error "vocabulary of 49153 tokens" "$bin" "${common[@]}" --draft "$(bad vocab 'c["vocab_size"] = 49153')"
expect_error "trained for a target with num_hidden_layers = 24" "$bin" "${common[@]}" \
  --draft "$(bad layers "$M[\"target\"][\"num_hidden_layers\"] = 24")"
expect_error "trained on another model's embedding" "$bin" "${common[@]}" \
  --draft "$(bad fp "$M[\"fingerprint_norms\"][0] *= 1.5")"
expect_error "missing tensor model.embed_tokens.weight" "$bin" "${common[@]}" \
  --draft "$(bad unmarked "del $M")"
expect_error "unknown key 'embed'" "$bin" "${common[@]}" --draft "$(bad key "$M[\"embed\"] = 1")"
expect_error "it is a draft; give it as --draft PATH" "$bin" generate --target "$draft" --prompt "$p"
expect_error "TRIFORCE_DEFAULT_DRAFT=$tmp/nowhere" env TRIFORCE_DEFAULT_DRAFT="$tmp/nowhere" "$bin" "${common[@]}"
expect_error "vocabulary of 49152 tokens, the target has 256" "$bin" generate --target "$fixtures/hf/gqa_f32" \
  --prompt-tokens "$tmp/ids.txt" --method spec --draft "$draft"
echo "refusals: one line each"

# A sweep takes it as a draft (and as the default).
"$bin" tokenize --text-file <(printf '%s ' $p $p $p) --out "$tmp/p.npy" >/dev/null
"$bin" sweep --prompt-tokens "$tmp/p.npy" --context 48 --max-new-tokens 6 --method spec --draft "$draft" \
  --out "$tmp/sw.h5" --quiet
"$bin" merge --list --quiet "$tmp/sw.h5" | grep -q "smollm2-135m-draft" || fail "sweep run with draft = $draft missing"
echo "sweep with draft = $draft ok"

# Tensor parallelism: the draft on rank 0 (driven) or on every rank (lockstep), borrowing that rank's embedding.
if command -v mpirun >/dev/null; then
  mpi=(mpirun --oversubscribe -np 3); [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  gen "$tmp/one.json" --prompt "$p" --method triforce --max-new-tokens 8
  for mode in driven lockstep; do
    timeout 300 "${mpi[@]}" "$bin" generate --tp 3 --tp-mode $mode --ignore-eos --json --max-new-tokens 8 \
      --prompt "$p" --method triforce >"$tmp/tp$mode.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "TP 3 $mode"; }
    cmp <(field "$tmp/one.json" '(j["tokens"], j["chain"], [l["accepted"] for l in j["levels"]])') \
        <(field "$tmp/tp$mode.json" '(j["tokens"], j["chain"], [l["accepted"] for l in j["levels"]])') >/dev/null ||
      fail "TP 3 $mode differs from one process"
    echo "TP 3 $mode with the trained draft: tokens, chain and acceptance identical to one process"
  done
fi

# PyTorch parity: the target, the committed draft, and a freshly exported tiny draft.
py=${TRIFORCE_TORCH_PYTHON:-}
[[ -z $py && -x .venv/bin/python ]] && py=.venv/bin/python
py=${py:-python3}
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "torch + numpy not importable by $py: the PyTorch checks did not run"
  exit 0
fi
# The training script's KV-cache generation (its own-generation data) against a cache-free recompute.
"$py" - "$fixtures/hf/gqa_f32" <<'PY' || fail "llama_torch.generate differs from a recompute"
import sys, torch
sys.path.insert(0, "experiments/draft")
import llama_torch as lt
m, cfg, _ = lt.build_target(sys.argv[1], "cpu", torch.float32)
x = p = torch.randint(0, cfg.vocab, (3, 20), generator=torch.Generator().manual_seed(1))
for _ in range(10):
    x = torch.cat([x, m(x)[:, -1].argmax(-1, keepdim=True)], 1)
assert torch.equal(lt.generate(m, p, 10, 0.0, None), x)
print("llama_torch.generate with its KV cache == recompute (greedy, 3 x 10 tokens)")
PY
"$py" experiments/draft/make_tiny_draft.py --target "$fixtures/hf/gqa_f32" --out "$tmp/tiny" >/dev/null
"$py" experiments/draft/check_target.py --triforce "$bin" --model "$fixtures/hf/gqa_f32" --draft "$tmp/tiny" --tol 1e-5
"$py" experiments/draft/check_target.py --triforce "$bin" --model "$fixtures/hf/gqa_f32" \
  --draft "$fixtures/draft/gqa_f32_draft" --tol 1e-5
if "$py" -c "import gguf" 2>/dev/null || ls .deps/gguf-*.whl >/dev/null 2>&1; then
  "$py" experiments/draft/check_target.py --triforce "$bin" --model "$model" --tol 1e-5
  "$py" experiments/draft/check_target.py --triforce "$bin" --model "$model" --draft "$draft" --tol 1e-5
else
  echo "gguf not importable by $py: the SmolLM2 parity checks did not run"
fi
