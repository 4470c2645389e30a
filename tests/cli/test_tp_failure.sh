#!/usr/bin/env bash
# A failing rank takes the whole tensor-parallel job down within seconds, never
# a hang: (1) kill -9 of a worker mid-generation (driven and lockstep); (2) an
# error on every rank (a bad prompt file) exits non-zero with the message; (3)
# an error on a worker alone; (4) an error on rank 0 alone while the workers
# serve (driven: a chain rank 0 cannot drive).
set -eu
bin=$1; fixtures=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d)
fx="$fixtures/hf/mha_f32"

# (1) A long run (far more tokens than it can make in the time we wait), killed at a worker: driven
# (the default; the worker is inside its serve loop) with ar and with TriForce, and lockstep.
kill_worker() {  # kill_worker <label> generate-args...
  local label=$1; shift
  "${mpi[@]}" -np 2 "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 200000 \
    --ignore-eos "$@" >/dev/null 2>"$tmp/err" &
  job=$!
  local worker="" rc=0 t0 dt
  for _ in $(seq 100); do  # find rank 1 among mpirun's children by its environment
    for p in $(pgrep -P $job || true); do
      tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && worker=$p
    done
    [[ -n $worker ]] && break
    sleep 0.1
  done
  [[ -n $worker ]] || { echo "FAIL: no rank 1 process under mpirun $job"; exit 1; }
  sleep 1.5  # into the decode loop
  kill -0 $job 2>/dev/null || { echo "FAIL: the job ended before the kill"; cat "$tmp/err"; exit 1; }
  kill -9 "$worker"
  t0=$(date +%s.%N)
  for _ in $(seq 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then echo "FAIL ($label): the job still runs 20 s after its worker was killed"; exit 1; fi
  wait $job || rc=$?
  dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  [[ $rc != 0 ]] || { echo "FAIL ($label): exit code 0 after a worker was killed"; exit 1; }
  echo "$label: worker $worker killed, the job ended after ${dt} s with exit code $rc"
}
job=""
trap '[[ -z $job ]] || kill -9 $job 2>/dev/null || true; rm -rf "$tmp"' EXIT
kill_worker "driven ar"
kill_worker "driven triforce" --method triforce --draft layerskip:1 --budget 64 --reretrieve every:16
kill_worker "lockstep ar" --tp-mode lockstep

# (2) An error after the ranks loaded their shards: one line, non-zero exit, no hang.
rc=0
timeout 60 "${mpi[@]}" -np 2 "$bin" generate --target "$fx" --prompt-file "$tmp/missing.txt" >/dev/null \
  2>"$tmp/err2" || rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL: exit code $rc for a missing prompt file"; cat "$tmp/err2"; exit 1; }
grep -q "triforce: error (rank 0): --prompt-file .*missing.txt: cannot open file" "$tmp/err2" || {
  cat "$tmp/err2"; exit 1; }
echo "missing prompt file under TP 2: exit $rc, $(grep -m1 "triforce: error (rank 0)" "$tmp/err2")"

# (3) An error on a worker alone (MPMD launch: rank 1 gets a checkpoint that does not exist) while
# rank 0 waits in the first collective: the worker's line is printed and the job ends.
rc=0
t0=$(date +%s)
timeout 60 "${mpi[@]}" -np 1 "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 : \
  -np 1 "$bin" generate --target "$tmp/no_such_model" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 \
  >/dev/null 2>"$tmp/err3" || rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL: exit code $rc for a worker-only error"; cat "$tmp/err3"; exit 1; }
grep -q "triforce: error (rank 1): .*no_such_model" "$tmp/err3" || { cat "$tmp/err3"; exit 1; }
echo "worker-only error: exit $rc after $(( $(date +%s) - t0 )) s, $(grep -m1 'triforce: error (rank 1)' "$tmp/err3")"

# (4) Driven: rank 0 refuses a level it cannot drive after the workers entered their serve loop
# (they wait in a broadcast): one line, non-zero exit, every rank gone.
rc=0
t0=$(date +%s)
timeout 60 "${mpi[@]}" -np 2 "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 \
  --chain "target@streaming:4/16 > target" >/dev/null 2>"$tmp/err4" || rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL: exit code $rc for a chain rank 0 cannot drive"; cat "$tmp/err4"; exit 1; }
grep -q "triforce: error (rank 0): --chain level 1 .*--tp-mode lockstep" "$tmp/err4" || { cat "$tmp/err4"; exit 1; }
echo "rank-0-only error while the workers serve: exit $rc after $(( $(date +%s) - t0 )) s, $(grep -m1 'triforce: error' "$tmp/err4")"
# ... and the same chain in lockstep runs.
timeout 120 "${mpi[@]}" -np 2 "$bin" generate --target "$fx" --prompt-tokens "$fx/prompt.npy" --max-new-tokens 4 \
  --chain "target@streaming:4/16 > target" --tp-mode lockstep >/dev/null 2>"$tmp/err5" || { cat "$tmp/err5"; exit 1; }
echo "the same chain under --tp-mode lockstep: ran"
