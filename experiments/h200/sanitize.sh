#!/usr/bin/env bash
# compute-sanitizer over every GPU test binary and a few GPU CLI runs (issue 19, item 4): memcheck (with leak
# check), synccheck, racecheck and initcheck, jobs in parallel, each under its own time limit, the whole run under
# a budget (default 450 s, for the 8 minutes an H200 call has). One log per tool x job, and a summary.
#   experiments/h200/sanitize.sh BUILD_DIR OUT_DIR
#   env: TOOLS="memcheck synccheck racecheck initcheck" (order = priority), JOBS=8 (parallel jobs on the GPU),
#        BUDGET_S=450, ONLY=REGEX (jobs whose "tool/job" name matches), TIMEOUT_S (cap per job; default by tool)
# Out: OUT_DIR/<tool>/<job>.log (the tool's report and the test's output), OUT_DIR/summary.tsv (tool, job, status,
# errors, warnings, leaks, seconds, exit code) and OUT_DIR/summary.txt (the same, readable, with totals).
# status: clean | ERRORS (the tool reported some: --error-exitcode 99) | FAILED (the test failed under the tool,
# no report: read the log) | TIMEOUT (its limit; shrink its filter) | not-run (the budget ran out first).
# Exit 1 when a job reported errors or failed under a tool; timeouts and not-run jobs are listed, not failures.
#
# Why these flags (compute-sanitizer docs, "Command Line Options"):
#   --error-exitcode 99     the tool's own exit code when it reported an error (else the app's code)
#   --print-limit 100       at most 100 reports printed per process (the summary still counts them all)
#   --target-processes all  follow child processes (mpirun ranks, the CLI runs)
#   --leak-check full       memcheck: device allocations never freed, reported at exit
#   --racecheck-report analysis  racecheck: one analysed report per hazard site, not one per access pair
# NCCL: test_nccl_comm and test_cuda_graphs_tp bootstrap a 1-rank communicator; NCCL's own kernels read user
# buffers in 16-byte units (NVIDIA/nccl#265), so a memcheck report inside an nccl* kernel at a buffer's end is
# NCCL's, not ours: read the kernel name before filing. NCCL_NVLS_ENABLE=0 as in every GPU job. The TP job
# runs 2 ranks on the one GPU (collectives staged through the host, no NCCL), a sanitizer per rank.
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 2
build=$(cd "$1" && pwd) || { echo "sanitize.sh: no build folder $1" >&2; exit 2; }
mkdir -p "$2" && out=$(cd "$2" && pwd)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[[ -x $cs ]] || { echo "sanitize.sh: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "sanitize.sh: no GPU" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
tools=${TOOLS:-memcheck synccheck racecheck initcheck}
budget=${BUDGET_S:-450}
start=$(date +%s)

# Options that only newer compute-sanitizers know are added when --help lists them.
help=$("$cs" --help 2>&1)
knows() { grep -q -- "$1" <<<"$help"; }
common=(--error-exitcode 99 --print-limit 100 --target-processes all)
declare -A extra
extra[memcheck]="--leak-check full"
extra[racecheck]="--racecheck-report analysis"
extra[synccheck]=""
extra[initcheck]=""
if knows --check-warpgroup-mma; then  # the sm90a prefill kernel's wgmma
  extra[memcheck]+=" --check-warpgroup-mma yes"; extra[synccheck]+=" --check-warpgroup-mma yes"
fi
declare -A limit=([memcheck]=300 [synccheck]=200 [racecheck]=240 [initcheck]=200)

# Jobs: "tool job filter". A gtest job is a binary under BUILD_DIR/tests with its --gtest_filter ("-" = all);
# cli_* jobs are the commands in run_cli below. Within a tool, the slowest first. Filters leave out the shapes
# that take minutes under the tools (65537-token contexts, the 8B synthetic model) and, for racecheck and
# synccheck, binaries whose kernels barely use shared memory or barriers.
gtests_all=(
  "test_kernels_attention_prefill -*LongContext*"
  "test_kernels_attention -*LongContext*"
  "test_kernels_batch_invariance -"
  "test_kernels_gemm_skinny -"
  "test_synthetic_shard -"
  "test_cuda_graphs -"
  "test_engine_gpu -"
  "test_model_step_fusions -*8B*"
  "test_model_batch_invariance -"
  "test_kernels_elementwise -"
  "test_kernels_softmax_top_p -"
  "test_kernels_step_fusions -"
  "test_retrieval_select_gpu -"
  "test_kv_offload -"
  "test_model_gpu -"
  "test_streaming_absorb_gpu -"
  "test_cuda_graphs_tp -"
  "test_nccl_comm -"
  "test_kernels_sampling -"
  "test_gpu_device -"
)
shared_memory_users=" test_kernels_attention_prefill test_kernels_attention test_kernels_batch_invariance"
shared_memory_users+=" test_kernels_gemm_skinny test_kernels_softmax_top_p test_kernels_sampling test_kernels_step_fusions"
shared_memory_users+=" test_kernels_elementwise test_retrieval_select_gpu test_streaming_absorb_gpu test_model_gpu "
jobs_file=$out/jobs.txt; : >"$jobs_file"
for tool in $tools; do
  for entry in "${gtests_all[@]}"; do
    bin=${entry%% *}; filter=${entry#* }
    [[ -x $build/tests/$bin ]] || { echo "note: $build/tests/$bin not built: skipped" >&2; continue; }
    case $tool in
      racecheck|synccheck) [[ $shared_memory_users == *" $bin "* ]] || continue
                           [[ $bin == test_model_gpu ]] && filter="*HfFixtures*" ;;
      initcheck) [[ $bin == test_synthetic_shard ]] && continue ;;  # initialization kernels only, ~8B weights
    esac
    echo "$tool $bin $filter" >>"$jobs_file"
  done
  echo "$tool cli_sweep -" >>"$jobs_file"
  if [[ $tool == memcheck ]]; then
    [[ -f ${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf ]] &&
      echo "$tool cli_generate_smollm2 -" >>"$jobs_file"
    command -v mpirun >/dev/null && echo "$tool cli_tp2_shared_gpu -" >>"$jobs_file"
  fi
done
if [[ -n ${ONLY:-} ]]; then
  awk -v re="$ONLY" '{ if (($1 "/" $2) ~ re) print }' "$jobs_file" >"$jobs_file.only" && mv "$jobs_file.only" "$jobs_file"
fi

# One job: the sanitizer around a gtest binary or a CLI command, output to OUT/<tool>/<job>.log.
run_job() {
  local tool=$1 job=$2 filter=$3
  local log=$out/$tool/$job.log
  mkdir -p "$out/$tool"
  local now left t
  now=$(date +%s); left=$(( budget - (now - start) ))
  t=${TIMEOUT_S:-${limit[$tool]}}; (( t > left )) && t=$left
  if (( left < 20 )); then
    printf '%s\t%s\tnot-run\t-\t-\t-\t0\t-\n' "$tool" "$job" >"$out/$tool/$job.row"
    return 0
  fi
  local san=("$cs" --tool "$tool" "${common[@]}" ${extra[$tool]})
  local t0=$SECONDS rc=0
  # timeout signals its whole process group: the tool, the test and any rank.
  case $job in
    cli_*) run_cli "$job" "$t" "${san[@]}" >"$log" 2>&1 || rc=$? ;;
    *) local f=(); [[ $filter != - ]] && f=(--gtest_filter="$filter")
       timeout -k 15 "$t" "${san[@]}" "$build/tests/$job" "${f[@]}" >"$log" 2>&1 || rc=$? ;;
  esac
  local secs=$(( SECONDS - t0 ))
  # Counts: every process prints "ERROR SUMMARY: N error(s)"; racecheck adds warnings to its own summary.
  local errors warnings leaks status
  errors=$(grep -ho "ERROR SUMMARY: [0-9]* error" "$log" | awk '{ s += $3 } END { print s + 0 }')
  warnings=$(grep -ho "RACECHECK SUMMARY: .*([0-9]* errors*, [0-9]* warning" "$log" |
             sed 's/.*, \([0-9]*\) warning/\1/' | awk '{ s += $1 } END { print s + 0 }')
  local race_errors
  race_errors=$(grep -ho "RACECHECK SUMMARY: .*([0-9]* errors*," "$log" | sed 's/.*(\([0-9]*\) error.*/\1/' |
                awk '{ s += $1 } END { print s + 0 }')
  (( race_errors > errors )) && errors=$race_errors  # whichever summary counts racecheck's hazards
  leaks=$(grep -c "Leaked [0-9]* bytes" "$log")
  if (( rc == 124 || rc == 137 )); then status=TIMEOUT
  elif (( rc == 99 || errors > 0 )); then status=ERRORS
  elif (( rc != 0 )); then status=FAILED
  else status=clean; fi
  grep -q "ERROR SUMMARY" "$log" || [[ $status != clean ]] || status=FAILED  # the tool never reported
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$job" "$status" "$errors" "$warnings" "$leaks" "$secs" "$rc" \
    >"$out/$tool/$job.row"
  echo "$tool/$job: $status ($errors errors, $warnings warnings, $leaks leaks, $secs s)"
}

# The CLI jobs: run_cli JOB SECONDS SANITIZER...
run_cli() {
  local job=$1 t=$2; shift 2
  local work=$out/work/$job; mkdir -p "$work"
  case $job in
    cli_sweep)  # every method of the CI smoke sweep on the GPU (bf16), greedy and sampled
      rm -f "$work/smoke.h5"
      timeout -k 15 "$t" "$@" "$build/triforce" sweep --config configs/sweeps/ci-smoke.ini --device cuda \
        --out "$work/smoke.h5" --quiet ;;
    cli_generate_smollm2)  # the default model (its tokenizer, GGUF dequantization), triforce and ar
      awk 'BEGIN { for (i = 0; i < 600; i++) print (i * 7919 + 13) % 49152 }' >"$work/ids.txt"
      timeout -k 15 "$t" "$@" "$build/triforce" generate --device cuda --prompt-tokens "$work/ids.txt" \
        --max-new-tokens 32 --ignore-eos --method triforce --compare ar --json ;;
    cli_tp2_shared_gpu)  # two ranks on the one GPU, a sanitizer per rank
      awk 'BEGIN { for (i = 0; i < 200; i++) print (i * 37 + 11) % 256 }' >"$work/ids.txt"
      local mpi=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE -np 2)
      [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
      timeout -k 15 "$t" "${mpi[@]}" "$@" "$build/triforce" generate --target tests/fixtures/hf/gqa_f32 \
        --device cuda --prompt-tokens "$work/ids.txt" --max-new-tokens 24 --ignore-eos --method triforce \
        --draft layerskip:1 --budget 64 --chunk-size 8 --json ;;
  esac
}

export -f run_job run_cli
export out build cs budget start
export common_s="${common[*]}"
# Bash cannot export arrays: rebuild them in each job from their exported text.
for k in "${!extra[@]}"; do export "extra_$k=${extra[$k]}"; export "limit_$k=${limit[$k]}"; done
job_shell='declare -A extra limit; common=($common_s)
  for k in memcheck racecheck synccheck initcheck; do v=extra_$k; w=limit_$k; extra[$k]=${!v-}; limit[$k]=${!w-200}; done
  run_job "$@"'

{
  echo "compute-sanitizer: $("$cs" --version 2>&1 | tail -1)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "git: ${TRIFORCE_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}; build: $build"
  echo "tools: $tools; $(wc -l <"$jobs_file") jobs, ${JOBS:-8} at a time, budget ${budget} s"
} | tee "$out/summary.txt"
xargs -a "$jobs_file" -L 1 -P "${JOBS:-8}" bash -c "$job_shell" _

# Summary: every job's row (not-run where xargs never started it before the budget ended).
{
  printf 'tool\tjob\tstatus\terrors\twarnings\tleaks\tseconds\texit\n'
  while read -r tool job _; do
    if [[ -f $out/$tool/$job.row ]]; then cat "$out/$tool/$job.row"
    else printf '%s\t%s\tnot-run\t-\t-\t-\t0\t-\n' "$tool" "$job"; fi
  done <"$jobs_file"
} >"$out/summary.tsv"
{
  echo "wall: $(( $(date +%s) - start )) s"
  column -t -s $'\t' "$out/summary.tsv"
  awk -F'\t' 'NR > 1 { n[$1]++; s[$1 " " $3]++; if ($4 ~ /^[0-9]+$/) e[$1] += $4 }
    END { for (t in n) printf "%s: %d jobs: %d clean, %d ERRORS (%d errors), %d FAILED, %d TIMEOUT, %d not-run\n",
          t, n[t], s[t " clean"], s[t " ERRORS"], e[t], s[t " FAILED"], s[t " TIMEOUT"], s[t " not-run"] }' "$out/summary.tsv"
} | tee -a "$out/summary.txt"
! awk -F'\t' 'NR > 1 && ($3 == "ERRORS" || $3 == "FAILED") { bad = 1 } END { exit !bad }' "$out/summary.tsv"
