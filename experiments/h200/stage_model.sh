#!/usr/bin/env bash
# Stages the default model and prompt books on the lent GPU machine, whose calls carry at most 64 MiB with
# the working tree (`git ls-files -z | xargs -0 du -cb | tail -1`: about 50 MB in December 2026): the 98 MB GGUF
# travels as N parts, as many as the tree leaves room for, made here with
#   split -n N -d -a 2 ~/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf gg.   (gg.00 .. gg.0<N-1>)
# one per call in .models/p1 .. .models/pN (carried, git-ignored), the books (make_default_prompts.sh output)
# in .models/books/prompts (or packed as .models/books/prompts.tar.xz: experiments/h200/prepare_carry.sh makes
# the parts and the pack). Each call copies what it carries into /opt; once the parts there add up to the
# model's size they are joined into /opt/SmolLM2-135M-Instruct.Q4_1.gguf and checked against the sha256.
# The machine keeps /opt while it stays warm (30 s after a call), so the calls go back to back.
#   bash experiments/h200/stage_model.sh      (then TRIFORCE_CACHE=/opt finds the model and /opt/prompts)
set -euo pipefail
cd "$(dirname "$0")/../.."
gguf=/opt/SmolLM2-135M-Instruct.Q4_1.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
size=98362432
mkdir -p /opt/parts /opt/prompts
compgen -G ".models/p*/gg.*" >/dev/null && cp .models/p*/gg.* /opt/parts/
compgen -G ".models/books/prompts/*.txt" >/dev/null && cp .models/books/prompts/*.txt /opt/prompts/
[[ -f .models/books/prompts.tar.xz ]] && tar -xJf .models/books/prompts.tar.xz -C /opt/prompts
if [[ ! -f $gguf ]]; then
  have=$(cat /opt/parts/gg.* 2>/dev/null | wc -c)
  if [[ $have -eq $size ]]; then
    cat /opt/parts/gg.* >$gguf.tmp  # gg.00, gg.01, ...: the glob sorts them
    got=$(sha256sum $gguf.tmp | cut -d' ' -f1)
    [[ $got == "$want" ]] || { echo "stage_model: joined GGUF has sha256 $got, expected $want" >&2; rm -f $gguf.tmp; exit 1; }
    mv $gguf.tmp $gguf
  fi
fi
echo "stage_model: parts $(ls /opt/parts | tr '\n' ' ')| model $([[ -f $gguf ]] && echo ready || echo not yet) | prompts $(ls /opt/prompts | wc -l)"
