#!/usr/bin/env bash
# Crash safety of `triforce sweep`: the CI smoke sweep is killed with SIGKILL
# at random moments, again and again, into one file. After every kill the file
# must be a valid sweep file whose runs are a subset of an uninterrupted run's
# (same keys, same tokens), never fewer than before; a final rerun resumes and
# ends with exactly the uninterrupted run's set. Then the same with SIGINT and
# SIGTERM, which also print one line naming the file and the runs it holds and
# leave no .tmp behind. A second sweep on a file that is being written is
# refused by the lock.
set -eu
bin=$1; fixtures=$2
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); pid=""
trap '[[ -n $pid ]] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
# Longer generations than the config's, so a run takes long enough to be hit mid-way.
loud=(--config configs/sweeps/ci-smoke.ini --max-new-tokens 64)
args=("${loud[@]}" --quiet)
slow=(--config configs/sweeps/ci-smoke.ini --max-new-tokens 256 --quiet)
list() { "$bin" merge --check --list --quiet "$1" | sort; }

"$bin" sweep "${args[@]}" --out "$tmp/ref.h5"
list "$tmp/ref.h5" >"$tmp/ref.txt"
total=$(wc -l <"$tmp/ref.txt")
[[ $total -eq 24 ]] || { echo "FAIL: the uninterrupted sweep wrote $total runs, expected 24"; exit 1; }
start=$(date +%s%N)
"$bin" sweep "${args[@]}" --out "$tmp/timing.h5"
full_ms=$(( ($(date +%s%N) - start) / 1000000 ))
start=$(date +%s%N)
"$bin" sweep "${args[@]}" --out "$tmp/ref.h5"  # complete: starts, checks, runs nothing
startup_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "uninterrupted: $total runs in $full_ms ms, of it $startup_ms ms to start"

out="$tmp/crash.h5"
prev=0; kills=0; cycles=0
RANDOM=7
# At least 10 rounds, and more (up to 60) until 6 sweeps were killed mid-way.
# The time estimate comes from one run measured while other tests share the
# cores, and the load changes, so the aim adapts: a round that finishes before
# its kill shrinks the window (scale, in percent) for the next.
round=0; scale=100
while (( round < 60 )) && (( round < 10 || kills < 6 )); do
  round=$((round + 1))
  # Aim inside what is left of the sweep, so most kills land mid-run or mid-write.
  left_ms=$(( (startup_ms + (full_ms - startup_ms) * (total - prev) / total + 20) * scale / 100 + 1 ))
  delay_ms=$(( RANDOM % left_ms ))
  "$bin" sweep "${args[@]}" --out "$out" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 $pid 2>/dev/null || true
  rc=0; wait $pid 2>/dev/null || rc=$?
  pid=""
  [[ $rc -eq 137 ]] && kills=$((kills + 1))
  [[ $rc -eq 0 ]] && scale=$(( scale * 2 / 3 > 5 ? scale * 2 / 3 : 5 ))
  [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "FAIL: round $round: the sweep exited with $rc"; exit 1; }
  if [[ ! -f $out ]]; then
    [[ $prev -eq 0 ]] || { echo "FAIL: round $round: the file vanished"; exit 1; }
    echo "round $round: killed after ${delay_ms} ms, before the file existed"
    continue
  fi
  list "$out" >"$tmp/now.txt" || { echo "FAIL: round $round: the file is not a valid sweep file"; exit 1; }
  n=$(wc -l <"$tmp/now.txt")
  extra=$(comm -13 "$tmp/ref.txt" "$tmp/now.txt" | wc -l)
  [[ $extra -eq 0 ]] || { echo "FAIL: round $round: runs that differ from the uninterrupted sweep:"; comm -13 "$tmp/ref.txt" "$tmp/now.txt"; exit 1; }
  [[ $n -ge $prev ]] || { echo "FAIL: round $round: $n runs after the kill, $prev before"; exit 1; }
  echo "round $round: $( ((rc == 137)) && echo "killed after ${delay_ms} ms" || echo "finished") : $n/$total runs, all valid"
  prev=$n
  if [[ $n -eq $total ]]; then  # complete: start another cycle on a new file
    cmp -s "$tmp/ref.txt" "$tmp/now.txt" || { echo "FAIL: a completed crash cycle differs from the uninterrupted sweep"; exit 1; }
    rm -f "$out"; prev=0; cycles=$((cycles + 1))
  fi
done
[[ $kills -ge 6 ]] || { echo "FAIL: only $kills sweeps were killed mid-way in $round rounds"; exit 1; }
echo "$kills kills, $cycles cycles completed through kills and resumes"

# The same command resumes: it skips what is done and completes the set.
"$bin" sweep "${loud[@]}" --out "$out" 2>"$tmp/resume.log"
if [[ $prev -gt 0 ]]; then
  grep -q "already done" "$tmp/resume.log" || { echo "FAIL: the rerun did not resume"; cat "$tmp/resume.log"; exit 1; }
fi
list "$out" >"$tmp/final.txt"
cmp -s "$tmp/ref.txt" "$tmp/final.txt" || { echo "FAIL: the resumed sweep differs from the uninterrupted one"; diff "$tmp/ref.txt" "$tmp/final.txt" | head; exit 1; }
echo "resumed: $(wc -l <"$tmp/final.txt") runs, identical to the uninterrupted sweep"

# SIGINT and SIGTERM: the note names the file and the runs it holds, no .tmp is left, the file resumes.
# (Job control, so that a background sweep does not start with SIGINT ignored.)
set -m
out="$tmp/signal.h5"; prev=0; noted=0; round=0; scale=100; lead_ms=$startup_ms
while (( round < 40 )) && (( round < 4 || noted < 4 )); do
  round=$((round + 1))
  sig=$( ((round % 2)) && echo INT || echo TERM )
  # After the start (the note is installed once the file is open), inside what
  # is left; both adapt as above: a signal that came before the note was
  # installed moves the start later, a round that finished shrinks the window.
  left_ms=$(( ((full_ms - startup_ms) * (total - prev) / total + 20) * scale / 100 + 1 ))
  delay_ms=$(( lead_ms + RANDOM % left_ms ))
  "$bin" sweep "${args[@]}" --out "$out" 2>"$tmp/sig.err" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -$sig $pid 2>/dev/null || true
  rc=0; wait $pid 2>/dev/null || rc=$?
  pid=""
  [[ $rc -eq 0 || $rc -eq 130 || $rc -eq 143 ]] || { echo "FAIL: SIG$sig round $round: exit $rc: $(cat "$tmp/sig.err")"; exit 1; }
  [[ ! -e $out.tmp ]] || { echo "FAIL: SIG$sig round $round left $out.tmp"; exit 1; }
  [[ $rc -eq 0 ]] && scale=$(( scale * 2 / 3 > 5 ? scale * 2 / 3 : 5 ))
  [[ $rc -ne 0 && ! -s $tmp/sig.err ]] && lead_ms=$(( lead_ms * 3 / 2 + 10 ))
  [[ -f $out ]] || continue
  list "$out" >"$tmp/now.txt" || { echo "FAIL: SIG$sig round $round: the file is not a valid sweep file"; exit 1; }
  n=$(wc -l <"$tmp/now.txt")
  [[ -z $(comm -13 "$tmp/ref.txt" "$tmp/now.txt") && $n -ge $prev ]] || { echo "FAIL: SIG$sig round $round: runs lost or changed"; exit 1; }
  if [[ -s $tmp/sig.err ]]; then
    want="triforce: sweep interrupted (SIG$sig): $out holds $n run"
    [[ $(wc -l <"$tmp/sig.err") -eq 1 && $(cat "$tmp/sig.err") == "$want"* ]] ||
      { echo "FAIL: SIG$sig round $round: expected one line '$want...', got: $(cat "$tmp/sig.err")"; exit 1; }
    noted=$((noted + 1))
    echo "round $round: SIG$sig after ${delay_ms} ms: $(cat "$tmp/sig.err")"
  fi
  prev=$n
  [[ $n -lt $total ]] || { rm -f "$out"; prev=0; }
done
set +m
[[ $noted -ge 4 ]] || { echo "FAIL: only $noted sweeps were stopped by SIGINT/SIGTERM mid-way in $round rounds"; exit 1; }
"$bin" sweep "${args[@]}" --out "$out"
list "$out" >"$tmp/final.txt"
cmp -s "$tmp/ref.txt" "$tmp/final.txt" || { echo "FAIL: the sweep resumed after signals differs from the uninterrupted one"; exit 1; }
echo "signals: $noted sweeps stopped by SIGINT/SIGTERM with a note; resumed to the uninterrupted set"

# The lock: a second sweep on a file being written fails at once, naming the holder.
rm -f "$tmp/locked.h5"
"$bin" sweep "${slow[@]}" --out "$tmp/locked.h5" &
pid=$!
for _ in $(seq 1 100); do [[ -f $tmp/locked.h5 ]] && break; sleep 0.02; done
if "$bin" sweep "${slow[@]}" --out "$tmp/locked.h5" 2>"$tmp/err"; then
  echo "FAIL: a second sweep wrote a file that another sweep holds"; exit 1
fi
grep -q "another sweep is writing" "$tmp/err" || { echo "FAIL: unexpected error: $(cat "$tmp/err")"; exit 1; }
[[ $(wc -l <"$tmp/err") -eq 1 ]] || { echo "FAIL: the error is not one line"; cat "$tmp/err"; exit 1; }
echo "lock: $(cat "$tmp/err")"
kill -9 $pid; wait $pid 2>/dev/null || true; pid=""
