#!/usr/bin/env bash
# Submits one tensor-parallel `triforce generate` on one node (slurm/run.sbatch):
# --ntasks-per-node = GPUs, --gres=gpu:N, srun --mpi=pmix, GPU by local rank.
#   slurm/submit_run.sh --gpus 4 --model /models/llama-2-7b-128k --config configs/demo.ini
#   slurm/submit_run.sh --gpus 0 --ntasks 2 -- --prompt "Hello" --max-new-tokens 32   # CPU, 2 ranks
# Prints the job id. Logs: LOGS/%x_%j.out.
set -euo pipefail
# shellcheck source=slurm/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

help() {
  cat <<EOF
usage: $(basename "$0") [options] [-- more triforce generate arguments]
Runs: triforce generate --device cuda|cpu --tp NTASKS [--config CONFIG] [--target MODEL] ARGS
  --config: none by default (e.g. configs/demo.ini); --device is cuda when --gpus > 0, else cpu;
  --job-name defaults to triforce-run.
EOF
  tf_common_help
}

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) help; exit 0 ;;
    --) shift; tf_passthrough=("$@"); break ;;
  esac
  tf_parse_common "$@"
  ((tf_shift > 0)) || tf_die "unknown option '$1' (see --help)"
  shift "$tf_shift"
done
tf_finish_common

tf_sbatch_common
tf_sbatch_resources
tf_sbatch+=(--job-name="${tf_job_name:-triforce-run}" --output="$tf_logs/%x_%j.out")

# --tp: triforce checks that the MPI world has exactly these ranks (a launch
# that fails to wire them up errors instead of running N separate copies).
args=(generate --device "$(tf_device)" --tp "$tf_ntasks")
[[ -z $tf_config ]] || args+=(--config "$tf_config")
[[ -z $tf_model ]] || args+=(--target "$tf_model")
args+=("${tf_passthrough[@]}")

job=$(sbatch "${tf_sbatch[@]}" "$TF_SLURM_DIR/run.sbatch" "${args[@]}")
job=${job%%;*}
echo "$job"
if ((tf_wait == 1)); then
  tf_wait_jobs "$job"
  tf_require_completed "$job"
fi
