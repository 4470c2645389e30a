# shellcheck shell=bash
# Shared by slurm/submit_*.sh (sourced, not run): the options every submission
# takes, their defaults, and the sbatch arguments they turn into.
# The batch scripts (*.sbatch) cannot source this: SLURM runs a copy of them
# from its spool directory, so they take everything as arguments/environment.

TF_SLURM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TF_REPO_DIR=$(cd "$TF_SLURM_DIR/.." && pwd)

tf_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# Defaults (documented in each submit script's --help).
tf_partition=""           # the cluster's default partition
tf_account=""             # the user's default account
tf_time="01:00:00"
tf_gpus=1                 # GPUs per node (= --gres=gpu:N); 0 = CPU only, no gres
tf_ntasks=""              # tasks (MPI ranks) per node; default = GPUs, or 1 on CPU
tf_cpus_per_task=""       # SLURM's default unless given
tf_mpi="pmix"             # srun --mpi plugin (OpenMPI 4.1 on Debian/Ubuntu: pmix)
tf_logs="logs"            # log directory, created before submission
tf_job_name=""
tf_wait=0                 # 1: block until the (last) job ends, exit with its status
tf_triforce="${TRIFORCE_BIN:-}"
tf_model=""
tf_config=""
tf_sbatch_extra=()        # --sbatch-arg, passed to sbatch verbatim
tf_srun_extra=""          # --srun-arg, space-separated, passed to srun in the job
tf_passthrough=()         # after --: more triforce arguments

tf_common_help() {
  cat <<'EOF'
Common options (defaults in brackets):
  --model PATH          checkpoint (HF folder or .gguf) passed as --target [the config's]
  --config FILE         triforce INI config [see the command's help]
  --partition P         SLURM partition [the cluster's default]
  --account A           SLURM account [the user's default]
  --time T              wall-time limit per job [01:00:00]
  --gpus N              GPUs per node, requested as --gres=gpu:N; 0 = CPU only, no gres [1]
  --ntasks N            MPI ranks per node (tensor-parallel size) [= --gpus, or 1 when --gpus 0]
  --cpus-per-task N     CPUs per rank [SLURM's default]
  --mpi PLUGIN          srun --mpi plugin [pmix]
  --logs DIR            where job logs go, created if missing [./logs]
  --job-name NAME       job name (%x in log names) [per command]
  --triforce PATH       the triforce binary, at a path the compute nodes see
                        [$TRIFORCE_BIN, else triforce on PATH, else <repo>/build/triforce]
  --sbatch-arg ARG      one more sbatch argument, e.g. --sbatch-arg=--qos=high (repeatable)
  --srun-arg ARG        one more srun argument inside the job (repeatable)
  --wait                block until the jobs end; exit non-zero unless all COMPLETED
  -- ARGS...            everything after -- is passed to triforce
EOF
}

# Parses one common option at "$@"; sets tf_shift to how many words it used
# (0 = not a common option).
tf_parse_common() {
  tf_shift=2
  local opt=$1 val=${2-}
  if [[ $opt == --*=* ]]; then val=${opt#*=}; opt=${opt%%=*}; tf_shift=1; fi
  case $opt in
    --model) tf_model=$val ;;
    --config) tf_config=$val ;;
    --partition) tf_partition=$val ;;
    --account) tf_account=$val ;;
    --time) tf_time=$val ;;
    --gpus) tf_gpus=$val ;;
    --ntasks) tf_ntasks=$val ;;
    --cpus-per-task) tf_cpus_per_task=$val ;;
    --mpi) tf_mpi=$val ;;
    --logs) tf_logs=$val ;;
    --job-name) tf_job_name=$val ;;
    --triforce) tf_triforce=$val ;;
    --sbatch-arg) tf_sbatch_extra+=("$val") ;;
    --srun-arg) tf_srun_extra+="${tf_srun_extra:+ }$val" ;;
    --wait) tf_wait=1; tf_shift=1; return 0 ;;
    *) tf_shift=0; return 0 ;;
  esac
  [[ $tf_shift -eq 1 || $# -ge 2 ]] || tf_die "option $opt needs a value"
}

# Checks the values and resolves paths; call after parsing.
tf_finish_common() {
  [[ $tf_gpus =~ ^[0-9]+$ ]] || tf_die "--gpus: expected a whole number, got '$tf_gpus'"
  if [[ -z $tf_ntasks ]]; then tf_ntasks=$((tf_gpus > 0 ? tf_gpus : 1)); fi
  [[ $tf_ntasks =~ ^[1-9][0-9]*$ ]] || tf_die "--ntasks: expected a positive whole number, got '$tf_ntasks'"
  if ((tf_gpus > 0 && tf_ntasks != tf_gpus)); then
    tf_die "--ntasks $tf_ntasks with --gpus $tf_gpus: tensor parallelism runs one rank per GPU"
  fi
  if [[ -z $tf_triforce ]]; then
    tf_triforce=$(command -v triforce || true)
    [[ -n $tf_triforce ]] || tf_triforce=$TF_REPO_DIR/build/triforce
  fi
  [[ -x $tf_triforce ]] || tf_die "--triforce: '$tf_triforce' is not an executable (build it, or pass --triforce PATH)"
  tf_triforce=$(cd "$(dirname "$tf_triforce")" && pwd)/$(basename "$tf_triforce")
  [[ $tf_triforce != *,* ]] || tf_die "--triforce: the path may not contain a comma (sbatch --export)"
  [[ $tf_srun_extra != *,* ]] || tf_die "--srun-arg: may not contain a comma (sbatch --export)"
  if [[ -n $tf_config ]]; then
    [[ -f $tf_config ]] || tf_die "--config: no such file '$tf_config'"
    tf_config=$(cd "$(dirname "$tf_config")" && pwd)/$(basename "$tf_config")
  fi
  if [[ -e $tf_model ]]; then
    tf_model=$(cd "$(dirname "$tf_model")" && pwd)/$(basename "$tf_model")
  elif [[ -n $tf_model && $tf_model != *:* ]]; then  # KIND:NAME specs (synthetic:...) pass as they are
    tf_die "--model: no such file or folder '$tf_model'"
  fi
  mkdir -p "$tf_logs"
  tf_logs=$(cd "$tf_logs" && pwd)
}

# The sbatch arguments every job of this submission shares (resources aside).
tf_sbatch_common() {
  tf_sbatch=(--parsable --time="$tf_time" --export="ALL,TRIFORCE_BIN=$tf_triforce,TRIFORCE_MPI=$tf_mpi,TRIFORCE_SRUN_ARGS=$tf_srun_extra")
  [[ -z $tf_partition ]] || tf_sbatch+=(--partition="$tf_partition")
  [[ -z $tf_account ]] || tf_sbatch+=(--account="$tf_account")
  tf_sbatch+=("${tf_sbatch_extra[@]}")
}

# The resources of one tensor-parallel job: one node, one rank per GPU.
tf_sbatch_resources() {
  tf_sbatch+=(--nodes=1 --ntasks-per-node="$tf_ntasks")
  ((tf_gpus == 0)) || tf_sbatch+=(--gres="gpu:$tf_gpus")
  [[ -z $tf_cpus_per_task ]] || tf_sbatch+=(--cpus-per-task="$tf_cpus_per_task")
}

# --device for triforce: cuda when GPUs were asked for.
tf_device() { ((tf_gpus > 0)) && echo cuda || echo cpu; }

# Prints the final state of every task of job $1 (one word per line), e.g. COMPLETED.
# sacct when accounting is on, else scontrol (which holds ended jobs for MinJobAge).
tf_job_states() {
  local out
  if out=$(sacct -n -X -P -j "$1" -o State 2>/dev/null) && [[ -n $out ]]; then
    echo "$out" | awk '{print $1}'
  else
    scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
  fi
}

# Blocks until jobs "$@" have left the queue. Polls squeue (every second at
# first, then up to every 10 s) instead of `sbatch --wait`, which keeps waiting
# on a controller that is gone; fails when squeue fails 10 times in a row.
tf_wait_jobs() {
  local ids failures=0 t=0 out
  ids=$(IFS=,; echo "$*")
  while true; do
    if out=$(squeue -h -j "$ids" -o %i 2>/dev/null); then
      failures=0
      [[ -n $out ]] || return 0
    else
      ((++failures < 10)) || { echo "$(basename "$0"): squeue keeps failing; is slurmctld up?" >&2; return 1; }
    fi
    sleep $((t < 30 ? 1 : (t < 300 ? 5 : 10)))
    t=$((t + 1))
  done
}

# After the wait (plain `sbatch --wait` even exits 0 for a job its dependency
# cancelled): fails unless every task of job $1 COMPLETED.
tf_require_completed() {
  local states bad
  states=$(tf_job_states "$1")
  [[ -n $states ]] || { echo "$(basename "$0"): job $1: state unknown" >&2; return 1; }
  bad=$(echo "$states" | grep -vc '^COMPLETED$' || true)
  if ((bad > 0)); then
    echo "$(basename "$0"): job $1 did not complete: $(echo "$states" | sort | uniq -c | xargs)" >&2
    return 1
  fi
}
