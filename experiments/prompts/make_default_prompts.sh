#!/usr/bin/env bash
# Writes the default long prompts of `triforce sweep --prompt-set default`:
# public-domain books that Debian packages, no model hub or download site.
#   kjv-1-law.txt        King James Bible, Genesis..Deuteronomy      (bible-kjv-text + bible-kjv)
#   kjv-2-history.txt    Joshua..Esther
#   kjv-3-poetry.txt     Job..Malachi
#   kjv-4-new.txt        Matthew..Revelation
#   devils-dictionary.txt  Ambrose Bierce, The Devil's Dictionary (dict-devil)
# The KJV parts are 160K-250K words each (about 200K-330K tokens with a
# Llama tokenizer), enough for the paper's 122,880-token context; the
# Devil's Dictionary is about 61K words. Verse labels ("Ge1:1 ") are dropped
# so the text reads as prose.
#   bash experiments/prompts/make_default_prompts.sh [DIR]
# DIR defaults to $TRIFORCE_CACHE/prompts (~/.cache/triforce/prompts).
set -euo pipefail
dir=${1:-${TRIFORCE_CACHE:-${XDG_CACHE_HOME:+$XDG_CACHE_HOME/triforce}}}
dir=${dir:-$HOME/.cache/triforce}
[[ $# -ge 1 ]] || dir=$dir/prompts
need=()
command -v bible >/dev/null || need+=(bible-kjv)
[[ -f /usr/lib/bible.data ]] || need+=(bible-kjv-text)
[[ -f /usr/share/dictd/devil.dict.dz ]] || need+=(dict-devil)
if ((${#need[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$dir"
kjv() {  # kjv NAME RANGE
  bible -f "$2" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$dir/$1.tmp"
  mv "$dir/$1.tmp" "$dir/$1.txt"
}
kjv kjv-1-law "Gen1:1-Deu34:12"
kjv kjv-2-history "Jos1:1-Est10:3"
kjv kjv-3-poetry "Job1:1-Mal4:6"
kjv kjv-4-new "Mat1:1-Rev22:21"
# dictzip files are gzip-compatible; drop dictfmt's header entries.
zcat /usr/share/dictd/devil.dict.dz | sed -n '/THE DEVIL.S DICTIONARY/,$p' >"$dir/devils-dictionary.tmp"
mv "$dir/devils-dictionary.tmp" "$dir/devils-dictionary.txt"
for f in "$dir"/*.txt; do
  [[ -s $f ]] || { echo "make_default_prompts: $f is empty" >&2; exit 1; }
  printf '%s: %s words\n' "$f" "$(wc -w <"$f")"
done
