#!/usr/bin/env bash
# `triforce sweep` (and merge) under faults, on the CI smoke config: a full disk
# in the middle of a sweep (a file-size limit, ulimit -f: EFBIG, as ENOSPC would
# fail the same write), an output folder that is missing, not a folder or
# read-only, a damaged results file given for resume, and prompts shorter than
# the context asked for, and bad sweep options and prompt sources. Each: one line naming the file
# or option, exit 1, and the file
# on disk either absent or intact (checksum before and after); a sweep stopped
# by the disk resumes to exactly an uninterrupted sweep's runs.
# (SIGKILL, SIGINT and SIGTERM: test_sweep_crash.sh.)
set -eu
bin=$1; fixtures=$2
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cfg=(--config configs/sweeps/ci-smoke.ini --quiet)
list() { "$bin" merge --check --list --quiet "$1" | sort; }
sum() { sha256sum "$1" | cut -d' ' -f1; }
source tests/cli/expect_error.sh  # the working folder is the repository root (cd above)

"$bin" sweep "${cfg[@]}" --out "$tmp/ref.h5"
list "$tmp/ref.h5" >"$tmp/ref.txt"
total=$(wc -l <"$tmp/ref.txt")
[[ $total -eq 24 ]] || fail "the uninterrupted sweep wrote $total runs, expected 24"
bytes=$(stat -c %s "$tmp/ref.h5")

# --- A full disk in the middle of a sweep: the run that does not fit is named, the file keeps the
# runs before it, no .tmp is left, and the same command without the limit completes it.
out="$tmp/full.h5"
limit_kb=$(( bytes / 1024 / 2 ))
expect_error "$out: run " bash -c 'ulimit -f "$1"; shift; exec "$@"' _ "$limit_kb" "$bin" sweep "${cfg[@]}" --out "$out"
kept=$(sed -n 's/.*the file keeps the \([0-9]*\) runs completed before it, and the same command resumes.*/\1/p' "$tmp/err")
grep -qF "was not saved (write $out.tmp: File too large)" "$tmp/err" || fail "full disk: $(cat "$tmp/err")"
[[ -n $kept ]] || fail "full disk: the line does not say how many runs the file keeps: $(cat "$tmp/err")"
[[ ! -e $out.tmp ]] || fail "full disk: $out.tmp was left behind"
list "$out" >"$tmp/now.txt" || fail "full disk: the file is not a valid sweep file"
n=$(wc -l <"$tmp/now.txt")
[[ $n -eq $kept && $n -gt 0 && $n -lt $total ]] || fail "full disk: $n runs in the file, the line says $kept (of $total)"
[[ -z $(comm -13 "$tmp/ref.txt" "$tmp/now.txt") ]] || fail "full disk: runs that differ from the uninterrupted sweep"
echo "full disk: $(cat "$tmp/err")"
"$bin" sweep --config configs/sweeps/ci-smoke.ini --out "$out" 2>"$tmp/resume.log"
grep -q "resuming $out: $n of $total runs already done" "$tmp/resume.log" || fail "no resume: $(head -2 "$tmp/resume.log")"
list "$out" >"$tmp/final.txt"
cmp -s "$tmp/ref.txt" "$tmp/final.txt" || fail "the resumed sweep differs from the uninterrupted one: $(diff "$tmp/ref.txt" "$tmp/final.txt" | head -4)"
echo "full disk: resumed to the uninterrupted sweep's $total runs"

# A disk full before the first run: nothing is written (the lock file aside).
out="$tmp/full0.h5"
expect_error "$out: cannot create the results file (write $out.tmp: File too large); nothing was written" \
  bash -c 'ulimit -f "$1"; shift; exec "$@"' _ 1 "$bin" sweep "${cfg[@]}" --out "$out"
[[ ! -e $out && ! -e $out.tmp ]] || fail "a sweep that could not create its file left one"
# merge into a full disk: no output.
out="$tmp/merged.h5"
expect_error "merge: cannot write $out (write $out.tmp: File too large); nothing was written" \
  bash -c 'ulimit -f "$1"; shift; exec "$@"' _ "$limit_kb" "$bin" merge --quiet "$out" "$tmp/ref.h5"
[[ ! -e $out && ! -e $out.tmp ]] || fail "a merge that could not write left a file"
echo "full disk: before the first run and in merge ok"

# --- Output folders: missing, a regular file, the output a folder, read-only. Nothing is created.
expect_error "$tmp/none/x.h5: the folder $tmp/none does not exist" "$bin" sweep "${cfg[@]}" --out "$tmp/none/x.h5"
[[ ! -e $tmp/none ]] || fail "a missing output folder was created"
: >"$tmp/plain"
expect_error "$tmp/plain/x.h5: $tmp/plain is not a folder" "$bin" sweep "${cfg[@]}" --out "$tmp/plain/x.h5"
mkdir "$tmp/dir.h5"
expect_error "$tmp/dir.h5: is a folder; expected the path of the results file" "$bin" sweep "${cfg[@]}" --out "$tmp/dir.h5"
[[ -z $(ls -A "$tmp/dir.h5") && ! -e $tmp/dir.h5.lock ]] || fail "a refused --out folder got files"
expect_error "$tmp/none/m.h5: the folder $tmp/none does not exist" "$bin" merge "$tmp/none/m.h5" "$tmp/ref.h5"
# Read-only: root ignores permission bits, so as root the sweep runs as nobody (setpriv) when it can.
mkdir "$tmp/ro"; chmod 555 "$tmp/ro"
as=()
if [[ $(id -u) -eq 0 ]]; then
  chmod 755 "$tmp"
  if command -v setpriv >/dev/null &&
     setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$bin" -a -r configs/sweeps/ci-smoke.ini 2>/dev/null; then
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    as=(skip)
  fi
fi
if [[ ${as[0]-} == skip ]]; then
  echo "read-only folder: SKIPPED (running as root, and setpriv cannot run the binary as nobody)"
else
  expect_error "$tmp/ro/x.h5: cannot write in the folder $tmp/ro: Permission denied" \
    "${as[@]}" "$bin" sweep "${cfg[@]}" --out "$tmp/ro/x.h5"
  [[ -z $(ls -A "$tmp/ro") ]] || fail "a sweep wrote into a read-only folder"
  echo "read-only folder: $(cat "$tmp/err")"
fi
echo "output folders ok"

# --- A damaged file given for resume: refused with one line, never written (checksums before and after).
refuse_resume() {  # <file> <expected text> [sweep options]
  local f=$1 want=$2; shift 2
  local before; before=$(sum "$f")
  expect_error "$want" "$bin" sweep "${cfg[@]}" "$@" --out "$f"
  [[ $(sum "$f") == "$before" ]] || fail "the refused file $f was changed"
  [[ ! -e $f.tmp ]] || fail "a refused resume left $f.tmp"
  echo "refused: $(cat "$tmp/err")"
}
head -c $(( bytes / 2 )) "$tmp/ref.h5" >"$tmp/trunc.h5"
refuse_resume "$tmp/trunc.h5" "$tmp/trunc.h5: truncated: $(( bytes / 2 )) bytes, $bytes were written; left as it is"
for off in $(( bytes / 3 )) $(( bytes - 100 )); do  # garbage in the data, and near the end
  cp "$tmp/ref.h5" "$tmp/garbage.h5"
  printf 'sixteen garbage!' | dd of="$tmp/garbage.h5" bs=1 seek=$off conv=notrunc 2>/dev/null
  refuse_resume "$tmp/garbage.h5" "$tmp/garbage.h5: damaged: its bytes do not match the checksum written with them"
done
cp "$tmp/ref.h5" "$tmp/head.h5"
printf 'x' | dd of="$tmp/head.h5" bs=1 seek=300 conv=notrunc 2>/dev/null
refuse_resume "$tmp/head.h5" "$tmp/head.h5: damaged: its first 512 bytes (the checksum block) were changed"
head -c 20000 /dev/urandom >"$tmp/random.h5"
refuse_resume "$tmp/random.h5" "$tmp/random.h5: not an HDF5 file (no HDF5 signature)"
# A valid sweep file of another grid (one context instead of two), and of other sampling.
"$bin" sweep "${cfg[@]}" --context 96 --out "$tmp/other.h5"
refuse_resume "$tmp/other.h5" "$tmp/other.h5: written by a different sweep config ('context = 96' in the file, 'context = 96,192' now)"
refuse_resume "$tmp/ref.h5" "$tmp/ref.h5: written by a different sweep config" --seed 1
# A valid HDF5 file that is no sweep file (a prompt array), when h5py can write one.
if python3 -c "import h5py, numpy" 2>/dev/null; then
  python3 -c "import h5py, numpy as np, sys; h5py.File(sys.argv[1], 'w')['tokens'] = np.arange(300, dtype=np.int32)" "$tmp/array.h5"
  refuse_resume "$tmp/array.h5" "$tmp/array.h5: not a triforce sweep file"
fi
# merge refuses a damaged input and writes nothing.
expect_error "$tmp/garbage.h5: damaged" "$bin" merge "$tmp/m.h5" "$tmp/ref.h5" "$tmp/garbage.h5"
[[ ! -e $tmp/m.h5 ]] || fail "a merge with a damaged input wrote its output"
expect_error "$tmp/trunc.h5: truncated" "$bin" merge --check "$tmp/trunc.h5"
echo "damaged files ok"

# --- Prompts shorter than a context: refused before any point runs and before anything is written.
npy=tests/fixtures/hf/gqa_f32/prompt.npy
expect_error "sweep: prompt prompt ($npy) has 300 tokens, fewer than --context 400" \
  "$bin" sweep "${cfg[@]}" --context 96,400 --out "$tmp/short.h5"
[[ ! -e $tmp/short.h5 && ! -e $tmp/short.h5.lock ]] || fail "a sweep with a short prompt wrote a file"
# --dry-run refuses it too.
"$bin" sweep "${cfg[@]}" --context 96,400 --out "$tmp/short.h5" --dry-run >/dev/null 2>"$tmp/err" && fail "--dry-run accepted a short prompt"
grep -qF "has 300 tokens, fewer than --context 400" "$tmp/err" || fail "--dry-run: $(cat "$tmp/err")"
model=${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $model ]]; then
  printf 'A short text prompt of a few tokens.\n' >"$tmp/short.txt"
  expect_error "sweep: prompt short ($tmp/short.txt) has " \
    "$bin" sweep --prompt-file "$tmp/short.txt" --context 8,4096 --method spec --draft ngram:3 --out "$tmp/short.h5"
  grep -qF "tokens, fewer than --context 4096" "$tmp/err" || fail "text prompt: $(cat "$tmp/err")"
  [[ ! -e $tmp/short.h5 && ! -e $tmp/short.h5.lock ]] || fail "a sweep with a short text prompt wrote a file"
fi
echo "short prompts ok: $(cat "$tmp/err")"

# --- Bad options, grids and prompt sources: one line naming the option or file, and nothing written.
printf 'budgte = 3\n' >"$tmp/typo.ini"
: >"$tmp/empty.txt"
cp "$npy" "$tmp/prompt.npy"
refuse_start() {  # <expected text> <sweep options...>: refused before the output file or its lock exists
  local want=$1; shift
  expect_error "$want" "$bin" sweep "$@" --out "$tmp/bad.h5"
  [[ ! -e $tmp/bad.h5 && ! -e $tmp/bad.h5.lock ]] || fail "refused ($want), but a file was written"
}
refuse_start "--config $tmp/none.ini: cannot open file" --config "$tmp/none.ini"
refuse_start "triforce sweep: unrecognised option 'budgte'" --config "$tmp/typo.ini" --context 64
refuse_start "sweep: --context is required (the context lengths)" --prompt-tokens "$npy"
refuse_start "--budget: 'x' is not an integer" "${cfg[@]}" --budget 32,x
refuse_start "--shard 2/2: expected 0 <= I < N" "${cfg[@]}" --shard 2/2
refuse_start "--method fast: expected ar, spec, retrieval, streaming-hier, triforce or ngram-triforce" "${cfg[@]}" --method fast
refuse_start "--reretrieve sometimes: expected never, every:N or below:A" "${cfg[@]}" --reretrieve sometimes
refuse_start "--temperature: expected >= 0, got -1" "${cfg[@]}" --temperature -1
refuse_start "at most 1000000 are allowed: narrow the lists" "${cfg[@]}" --context 1:99999:1 --seed 0:99999:1
refuse_start "--prompt-file $tmp/none.txt: cannot open file" "${cfg[@]}" --prompt-file "$tmp/none.txt"
refuse_start "--prompt-file $tmp/empty.txt: the file is empty" "${cfg[@]}" --prompt-file "$tmp/empty.txt"
refuse_start "--prompt: an empty prompt" "${cfg[@]}" --prompt ""
refuse_start "--prompt-set kjv: no matching documents (*.txt) in $tmp" "${cfg[@]}" --prompt-set kjv --prompt-dir "$tmp"
refuse_start "--prompt-tokens $tmp/ids.txt: expected FILE.npy or FILE.h5:/dataset" "${cfg[@]}" --prompt-tokens "$tmp/ids.txt"
refuse_start "sweep: two prompts are named 'prompt' ($tmp/prompt.npy); prompt names must be unique" \
  "${cfg[@]}" --prompt-tokens "$npy,$tmp/prompt.npy"
echo "bad options and prompt sources ok"
