#!/usr/bin/env bash
# Prepares, on a fresh development machine, what the lent GPU machine's calls carry besides the working tree
# (git-ignored, so a clean clone lacks them; each call carries at most 64 MiB with the tree):
#   .deps/boost-po-1.74.tar.xz       Boost.Program_options 1.74 (build.sh unpacks it into /opt/tfdeps): the headers
#                                     <boost/program_options.hpp> includes (g++ -M) and the library, from the three
#                                     Debian packages the image lacks, 0.5 MB instead of 9.8
#   .deps/cudnn-frontend/include     the header-only cudnn-frontend (cuDNN fused prefill attention), from PyPI
#   .models/p1 .. .models/pN         the default GGUF in N parts, each small enough to ride with the tree
#                                     (stage_model.sh joins them on the machine), and .models/books/prompts.tar.xz
#                                     (the default prompt books, which stage_model.sh unpacks) beside part 2
# Then: call 1 carries [".deps", ".models/p1"] (and builds), calls 2..N one part each (the books beside part 2), back to back (the machine is released 30 s after a call), each running
# `bash experiments/h200/stage_model.sh` first. It prints the carry list of each call.
#   bash experiments/h200/prepare_carry.sh [GGUF]   (default ~/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf)
set -euo pipefail
cd "$(dirname "$0")/../.."
gguf=${1:-${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf}
limit=$((64 * 1024 * 1024))
margin=$((1024 * 1024))  # headroom: untracked files git does not ignore also travel, and the tree grows
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# ---- Boost.Program_options ----
if [[ ! -f .deps/boost-po-1.74.tar.xz ]]; then
  mkdir -p .deps "$tmp/debs" "$tmp/prefix"
  (cd "$tmp/debs" && apt-get download libboost1.74-dev libboost-program-options1.74-dev \
    libboost-program-options1.74.0 >/dev/null)
  for f in "$tmp"/debs/*.deb; do dpkg -x "$f" "$tmp/prefix"; done
  echo '#include <boost/program_options.hpp>' >"$tmp/po.cpp"
  g++ -std=c++17 -M -nostdinc++ -I"$tmp/prefix/usr/include" "$tmp/po.cpp" -o "$tmp/po.d" 2>/dev/null ||
    g++ -std=c++17 -M -I"$tmp/prefix/usr/include" "$tmp/po.cpp" -o "$tmp/po.d"
  # The dependency list's headers under the prefix, relative to it, plus version.hpp and the library.
  tr ' \\' '\n\n' <"$tmp/po.d" | grep "^$tmp/prefix/usr/include/boost/" | sed "s|^$tmp/prefix/||" | sort -u >"$tmp/files"
  echo usr/include/boost/version.hpp >>"$tmp/files"
  (cd "$tmp/prefix" && ls usr/lib/x86_64-linux-gnu/libboost_program_options* >>"$tmp/files")
  tar -cJf .deps/boost-po-1.74.tar.xz -C "$tmp/prefix" -T "$tmp/files"
fi
echo "prepare_carry: .deps/boost-po-1.74.tar.xz $(du -h .deps/boost-po-1.74.tar.xz | cut -f1)"

# ---- cudnn-frontend headers ----
if [[ ! -f .deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  mkdir -p "$tmp/whl" .deps/cudnn-frontend
  python3 -m pip download -q nvidia-cudnn-frontend==1.16.0 --no-deps -d "$tmp/whl"
  whl=$(ls "$tmp"/whl/*.whl | head -n 1)
  python3 - "$whl" "$tmp/unz" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
  inc=$(find "$tmp/unz" -name cudnn_frontend.h -printf '%h\n' | head -n 1)
  [[ -n $inc ]] || { echo "prepare_carry: no cudnn_frontend.h in $whl" >&2; exit 1; }
  rm -rf .deps/cudnn-frontend/include && cp -r "$inc" .deps/cudnn-frontend/include
fi
echo "prepare_carry: .deps/cudnn-frontend/include $(du -sh .deps/cudnn-frontend/include | cut -f1)"

# ---- the model in parts, and the books ----
[[ -f $gguf ]] || { echo "prepare_carry: no $gguf (bash scripts/fetch_default_model.sh)" >&2; exit 1; }
books=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/prompts
[[ -d $books ]] || bash experiments/prompts/make_default_prompts.sh >/dev/null
tree=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
deps=$(du -cb .deps | tail -n 1 | cut -f1)
# Parts sized so that call 1 holds .deps and a part; the books go with the first later part they fit beside.
room=$((limit - tree - deps - margin))
(( room > 4 * 1024 * 1024 )) || { echo "prepare_carry: the tree ($tree bytes) leaves no room for model parts" >&2; exit 1; }
size=$(stat -c %s "$gguf")
n=$(( (size + room - 1) / room ))
rm -rf .models && mkdir -p .models/books
tar -cJf .models/books/prompts.tar.xz -C "$books" $(cd "$books" && ls *.txt)  # 4.5 MB of text in ~1.3
(cd "$tmp" && split -n "$n" -d -a 2 "$gguf" gg.)
for i in $(seq 1 "$n"); do
  mkdir -p ".models/p$i" && mv "$tmp/gg.$(printf %02d $((i - 1)))" ".models/p$i/"
done
part=$(du -cb .models/p1 | tail -n 1 | cut -f1)
bk=$(du -cb .models/books | tail -n 1 | cut -f1)
echo "prepare_carry: tree $tree B, .deps $deps B, GGUF in $n parts of $part B, books $bk B (limit $limit B)"
books_call=0
if (( n >= 2 && tree + part + bk + margin <= limit )); then books_call=2; fi
echo "call 1 carry: [\".deps\", \".models/p1\"]"
for i in $(seq 2 "$n"); do
  c="\".models/p$i\""
  [[ $i == "$books_call" ]] && c="$c, \".models/books\""
  echo "call $i carry: [$c]"
done
(( books_call > 0 )) || echo "call $((n + 1)) carry: [\".models/books\"]"
