#!/usr/bin/env bash
# tests/unit/test_dist.cpp under mpirun -np 2 and 4: the MPI communicator,
# sharded forwards and retrieval selection against the whole model, and the
# op stream (rank 0 driving TriForce) against one process.
set -eu
bin=$1
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
test_bin="$(dirname "$bin")/tests/test_dist"
[[ -x "$test_bin" ]] || { echo "no $test_bin (build the test_dist target): skipped"; exit 77; }
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
for np in 2 4; do
  # Every rank reports (TRIFORCE_TP_VERBOSE keeps the workers' output); any failing rank fails the run.
  TRIFORCE_TP_VERBOSE=1 timeout 300 "${mpi[@]}" -np "$np" "$test_bin" --gtest_brief=1
  echo "test_dist under mpirun -np $np: passed"
done
