#!/usr/bin/env bash
# The slurm/ scripts against a real SLURM: a throwaway munged + slurmctld +
# slurmd on this machine (tests/slurm/slurm_cluster.sh), CPU only.
#  1. slurm/submit_run.sh with 2 ranks (srun --mpi=pmix, tensor parallel, --tp 2
#     checked against the MPI world): rank 0 alone prints, and its greedy tokens
#     equal a single-process run's.
#  2. slurm/submit_sweep.sh: configs/sweeps/ci-smoke.ini as a 3-task job array
#     (4 baseline units: uneven shards), then the dependent merge; the merged file
#     holds every grid point exactly once, with the tokens of the same sweep run
#     here as one process, and each shard's SLURM array ids.
#  3. slurm/submit_run.sh --gpus 2 on a node with 2 placeholder GPUs (gres): a
#     probe in place of triforce checks ranks, local ids and CUDA_VISIBLE_DEVICES.
# Skips (77) when slurm-wlm/munge are not installed or we are not root (slurmd
# must be root to start jobs).
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fixtures=$(cd "$2" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

for c in munged mungekey slurmctld slurmd sbatch srun scontrol python3; do
  command -v "$c" >/dev/null || { echo "$c not installed (apt-get install slurm-wlm munge): skipped"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "not root (slurmd must run as root): skipped"; exit 77; }

tmp=$(mktemp -d /tmp/triforce-slurm.XXXXXX)
cluster=$tmp/cluster
cleanup() {
  local rc=$?
  if ((rc != 0)); then
    echo "--- job logs" >&2
    tail -n 40 "$tmp"/logs/* >&2 2>/dev/null || true
    echo "--- daemon logs" >&2
    tail -n 20 "$cluster"/log/*.log >&2 2>/dev/null || true
  fi
  bash "$repo/tests/slurm/slurm_cluster.sh" stop "$cluster" || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A SIGKILL (ctest's timeout) skips the trap: a watchdog stops the cluster
# once this shell is gone.
(
  while kill -0 $$ 2>/dev/null; do sleep 2; done
  bash "$repo/tests/slurm/slurm_cluster.sh" stop "$cluster"
  rm -rf "$tmp"
) </dev/null >/dev/null 2>&1 &

bash "$repo/tests/slurm/slurm_cluster.sh" start "$cluster"
export SLURM_CONF=$cluster/slurm.conf
# From the repository root: ci-smoke.ini's paths are relative to it, and jobs
# run in the directory they were submitted from.
cd "$repo"
submit=(--gpus 0 --triforce "$bin" --logs "$tmp/logs" --time 00:05:00 --wait)
# Bound every submission (--wait polls squeue), so nothing lingers long after
# a SIGKILL of this test.
run_submit() { timeout 300 "$repo/slurm/$1" "${submit[@]}" "${@:2}"; }

# 1. One run, 2 tensor-parallel ranks, on a fixture whose 4 KV heads divide by 2.
model=$fixtures/hf/mha_f32
gen=(--target "$model" --prompt-tokens "$model/prompt.npy" --max-new-tokens 12 --temperature 0 --ignore-eos --json)
"$bin" generate "${gen[@]}" --device cpu | tail -n1 >"$tmp/single.json"
job=$(run_submit submit_run.sh --ntasks 2 --job-name tp2 --srun-arg=--label -- "${gen[@]}")
log=$tmp/logs/tp2_$job.out
[[ -f $log ]] || { echo "FAIL: no log $log"; exit 1; }
python3 - "$tmp/single.json" "$log" <<'PY'
import json, sys
single = json.load(open(sys.argv[1]))
by_rank, pending = {}, {}
# srun --label cuts output lines at 1024 bytes and labels each piece: join a rank's pieces until the JSON parses.
for line in open(sys.argv[2]):
    rank, _, rest = line.partition(": ")
    if not rank.strip().isdigit():
        continue
    r, rest = int(rank), rest.rstrip("\n")
    if r in pending:
        pending[r] += rest
    elif rest.startswith("{"):
        pending[r] = rest
    else:
        continue
    try:
        by_rank.setdefault(r, []).append(json.loads(pending[r]))
        del pending[r]
    except json.JSONDecodeError:
        pass
assert not pending, f"ranks with an unfinished JSON line: {sorted(pending)}"
assert sorted(by_rank) == [0], f"ranks that printed a result: {sorted(by_rank)} (expected rank 0 alone)"
assert len(by_rank[0]) == 1, f"rank 0 printed {len(by_rank[0])} results"
got = by_rank[0][0]
assert got["tokens"] == single["tokens"], f"2-rank tokens {got['tokens']} != single-process {single['tokens']}"
assert got["n_generated"] == 12, got
print(f"tp2 ok: 2 ranks, rank 0's {len(got['tokens'])} tokens equal the single process")
PY

# 2. The CI smoke sweep as a job array, then the merge.
config=$repo/configs/sweeps/ci-smoke.ini
"$bin" sweep --config "$config" --out "$tmp/local.h5" --quiet
shards=3
ids=$(run_submit submit_sweep.sh --config "$config" --shards $shards --out "$tmp/sweep" --job-name sw)
echo "$ids"
array_job=$(awk '$1 == "array" {print $2}' <<<"$ids")
for ((i = 0; i < shards; i++)); do
  [[ -f $tmp/logs/sw_${array_job}_$i.out ]] || { echo "FAIL: no array log sw_${array_job}_$i.out (%x_%A_%a)"; exit 1; }
done
python3 - "$tmp/local.h5" "$tmp/sweep" "$shards" "$array_job" <<'PY'
import sys, h5py
local_path, outdir, shards, array_job = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)

def runs(f):
    out = {}
    for g in f["runs"].values():
        key = text(g.attrs["key"])
        assert key not in out, f"run key {key} twice"
        out[key] = (int(g.attrs["index"]), [int(t) for t in g["tokens"][()]])
    return out

with h5py.File(local_path, "r") as f:
    expect = runs(f)
    n = int(f.attrs["grid_points"])
assert len(expect) == n, (len(expect), n)
with h5py.File(f"{outdir}/merged.h5", "r") as f:
    got = runs(f)
    indices = sorted(i for i, _ in got.values())
    assert indices == list(range(n)), f"grid indices {indices}, expected each of 0..{n - 1} once"
    assert set(got) == set(expect), f"keys differ: {set(got) ^ set(expect)}"
    for k, (i, toks) in got.items():
        assert (i, toks) == expect[k], f"run {k}: {(i, toks)} vs single process {expect[k]}"
    summary = f["summary"][()]
    assert sorted(int(x) for x in summary["index"]) == list(range(n)), summary["index"]
    # The shards' root attributes, kept per shard, carry the SLURM ids.
    tasks = sorted(text(g.attrs["slurm_array_task_id"]) for g in f["shards"].values())
    jobs = {text(g.attrs["slurm_array_job_id"]) for g in f["shards"].values()}
    assert tasks == [str(i) for i in range(shards)], tasks
    assert jobs == {array_job}, jobs
print(f"sweep ok: {n} grid points, each once in the merged file of {shards} array tasks; "
      "tokens equal the single-process sweep")
PY

# 3. The GPU path of the scripts, on a node with placeholder GPUs as gres: the
# probe stands in for triforce and prints what each rank was given.
bash "$repo/tests/slurm/slurm_cluster.sh" stop "$cluster"
if ! SLURM_TEST_GPUS=2 bash "$repo/tests/slurm/slurm_cluster.sh" start "$cluster" >"$tmp/gres.txt" 2>&1; then
  # Placeholder GPUs need mknod; without it the gres path is not checked.
  grep -q mknod "$tmp/gres.txt" || { cat "$tmp/gres.txt"; exit 1; }
  echo "mknod not permitted here: the gres part did not run"
  exit 0
fi
cat >"$tmp/probe" <<'SH'
#!/usr/bin/env bash
echo "probe rank=$SLURM_PROCID local=$SLURM_LOCALID gpus=${CUDA_VISIBLE_DEVICES:-none} nvls=${NCCL_NVLS_ENABLE:-unset} args=$*"
SH
chmod +x "$tmp/probe"
job=$(timeout 300 "$repo/slurm/submit_run.sh" --gpus 2 --triforce "$tmp/probe" --logs "$tmp/logs" \
  --time 00:02:00 --job-name gres --wait --config "$repo/configs/demo.ini")
python3 - "$tmp/logs/gres_$job.out" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in line.split()[1:5]) | {"args": line.split("args=", 1)[1].split()}
        for line in open(sys.argv[1]) if line.startswith("probe ")]
assert sorted(r["rank"] for r in rows) == ["0", "1"], rows
assert sorted(r["local"] for r in rows) == ["0", "1"], rows
assert all(r["gpus"] == "0,1" for r in rows), f"every rank should see both GPUs: {rows}"
assert all(r["nvls"] == "0" for r in rows), rows
for r in rows:
    a = r["args"]
    assert a[0] == "generate" and a[a.index("--device") + 1] == "cuda", a
    assert a[a.index("--config") + 1].endswith("configs/demo.ini"), a
print("gres ok: --gres=gpu:2, 2 ranks with local ids 0,1, each sees CUDA_VISIBLE_DEVICES=0,1, --device cuda")
PY
