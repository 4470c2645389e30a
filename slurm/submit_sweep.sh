#!/usr/bin/env bash
# Submits a sweep as a job array plus its merge:
#   array task i (0..N-1): triforce sweep --config CONFIG --device D --shard i/N --out OUTDIR/shard_i.h5
#   then, after every task succeeded: triforce merge OUTDIR/merged.h5 OUTDIR/shard_*.h5
#   slurm/submit_sweep.sh --config configs/sweeps/demo.ini --shards 8 --out results/run1 --gpus 1
# Prints two lines: "array <id>" and "merge <id>". Logs: LOGS/%x_%A_%a.out (array),
# LOGS/%x_%j.out (merge). If a task fails, the merge is cancelled; fix the cause
# and resubmit the same command (each shard resumes where its file left off).
set -euo pipefail
# shellcheck source=slurm/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

shards=""
outdir=""
merge_time="00:10:00"
throttle=""
only=""

help() {
  cat <<EOF
usage: $(basename "$0") --config FILE --shards N --out DIR [options] [-- more triforce sweep arguments]
  --shards N            number of array tasks, one shard of the grid each (required)
  --out DIR             output folder: shard_<i>.h5 and merged.h5 (required)
  --throttle K          at most K array tasks at once (--array=0-N-1%K) [no limit]
  --only I,J,...        run only these shards (e.g. to rerun failed ones); the merge still
                        takes all N shard files [all]
  --merge-time T        wall-time limit of the merge job [00:10:00]
  --config is required; --model, if given, is passed to the sweep as --target;
  --device is cuda when --gpus > 0, else cpu;
  --job-name defaults to triforce-sweep (the merge job: <name>-merge).
  Each array task gets --gpus GPUs and --ntasks ranks (a tensor-parallel shard when > 1:
  every rank runs the shard's points on its slice of the model, rank 0 writes the file).
EOF
  tf_common_help
}

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) help; exit 0 ;;
    --) shift; tf_passthrough=("$@"); break ;;
    --shards) shards=${2-}; shift 2; continue ;;
    --shards=*) shards=${1#*=}; shift; continue ;;
    --out) outdir=${2-}; shift 2; continue ;;
    --out=*) outdir=${1#*=}; shift; continue ;;
    --throttle) throttle=${2-}; shift 2; continue ;;
    --throttle=*) throttle=${1#*=}; shift; continue ;;
    --merge-time) merge_time=${2-}; shift 2; continue ;;
    --only) only=${2-}; shift 2; continue ;;
    --only=*) only=${1#*=}; shift; continue ;;
    --merge-time=*) merge_time=${1#*=}; shift; continue ;;
  esac
  tf_parse_common "$@"
  ((tf_shift > 0)) || tf_die "unknown option '$1' (see --help)"
  shift "$tf_shift"
done
[[ -n $tf_config ]] || tf_die "--config FILE is required (a sweep config, e.g. configs/sweeps/ci-smoke.ini)"
[[ $shards =~ ^[1-9][0-9]*$ ]] || tf_die "--shards: expected a positive whole number, got '$shards'"
[[ -n $outdir ]] || tf_die "--out DIR is required"
[[ -z $throttle || $throttle =~ ^[1-9][0-9]*$ ]] || tf_die "--throttle: expected a positive whole number, got '$throttle'"
if [[ -n $only ]]; then
  [[ $only =~ ^[0-9]+(,[0-9]+)*$ ]] || tf_die "--only: expected shard numbers like 3,5, got '$only'"
  for i in ${only//,/ }; do ((i < shards)) || tf_die "--only: shard $i is not below --shards $shards"; done
fi
tf_finish_common
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
name=${tf_job_name:-triforce-sweep}

sweep_args=(--config "$tf_config" --device "$(tf_device)")
[[ -z $tf_model ]] || sweep_args+=(--target "$tf_model")
sweep_args+=("${tf_passthrough[@]}")

tf_sbatch_common
tf_sbatch_resources
array=0
((shards == 1)) || array="0-$((shards - 1))"
[[ -z $only ]] || array=$only
[[ -z $throttle ]] || array+="%$throttle"
array_job=$(sbatch "${tf_sbatch[@]}" --job-name="$name" --array="$array" \
  --output="$tf_logs/%x_%A_%a.out" "$TF_SLURM_DIR/sweep.sbatch" "$shards" "$outdir" "${sweep_args[@]}")
array_job=${array_job%%;*}
echo "array $array_job"

shard_files=()
for ((i = 0; i < shards; i++)); do shard_files+=("$outdir/shard_$i.h5"); done
tf_time=$merge_time
tf_sbatch_common
merge_cmd=("${tf_sbatch[@]}" --job-name="$name-merge" --nodes=1 --ntasks=1
  --dependency="afterok:$array_job" --kill-on-invalid-dep=yes --output="$tf_logs/%x_%j.out")
merge_job=$(sbatch "${merge_cmd[@]}" "$TF_SLURM_DIR/merge.sbatch" "$outdir/merged.h5" "${shard_files[@]}")
merge_job=${merge_job%%;*}
echo "merge $merge_job"
if ((tf_wait == 1)); then
  tf_wait_jobs "$array_job" "$merge_job"
  tf_require_completed "$array_job"
  tf_require_completed "$merge_job"
fi
