#!/usr/bin/env bash
# compute-sanitizer over every GPU test binary and a few GPU CLI runs (issue 19, item 4): memcheck (with leak
# check), synccheck, racecheck and initcheck, jobs in parallel, each under its own time limit, the whole run under
# a budget. The tests run with TRIFORCE_SANITIZER_SHAPES=1 (tests/gpu/sanitizer_shapes.h: each test's shape grid
# cut to a few small awkward shapes, every code path kept).
#   experiments/h200/sanitize.sh BUILD_DIR OUT_DIR
#   env: TOOLS="memcheck synccheck racecheck initcheck" (the tools to run), JOBS=12 (jobs at a time on the GPU),
#        BUDGET_S=380 (the whole run; jobs not started by then are not-run, running ones are cut at the budget),
#        ONLY=REGEX (jobs whose "tool/job" name matches), TIMEOUT_S=300 (cap per job), SHAPES=1 (0: full grids)
# Out, three files (so that they come back from a device call): OUT_DIR/logs.tar.gz (<tool>/<job>.log: the tool's
# report and the test's output), OUT_DIR/summary.tsv (tool, job, status, errors, nccl_probe, warnings, leaks,
# seconds, exit code) and OUT_DIR/summary.txt (the same, readable, with totals per tool).
# status: clean | ERRORS (reports of ours) | FAILED (the test failed under the tool with no report: read its log)
# | TIMEOUT (its limit or the budget; shrink its filter) | not-run (the budget ran out first).
# Exit 1 when a job reported errors or failed; timeouts and not-run jobs are listed, not failures.
#
# Why these flags (compute-sanitizer docs, "Command Line Options"):
#   --error-exitcode 99     the tool's own exit code when it reported an error (else the app's code)
#   --print-limit 100       at most 100 reports printed per process (the summary still counts them all)
#   --target-processes all  follow child processes (mpirun ranks, the CLI runs)
#   --leak-check full       memcheck: device allocations never freed, reported at exit. The binaries free their
#                           process-lifetime state first (tf::release_device_state), so a leak is a finding.
#   --racecheck-report analysis  racecheck: one analysed report per hazard site, not one per access pair
#
# NCCL's kernel probe (classified, not suppressed): test_nccl_comm and test_cuda_graphs_tp bootstrap a 1-rank
# communicator, and inside ncclCommInitRank NCCL calls cudaFuncGetAttributes on kernels of its own for which its
# fatbinary has no sm_90 image; the call fails, NCCL takes the kernel as absent and goes on (ncclCommInitRank
# returns ncclSuccess, the test passes). memcheck reports each such call as
#   Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on
#   the device" on CUDA API call to cudaFuncGetAttributes.
# with a backtrace whose first frame past libcuda.so is in libnccl.so (run 2: 4 per process). Such a report is
# counted in the nccl_probe column, not in errors; any other API error, or this one from our code, stays an
# error. (--report-api-errors no would hide ours too, and every other option filters kernels, not API calls.)
# NCCL_NVLS_ENABLE=0 as in every GPU job. The TP CLI job runs 2 ranks on the one GPU (collectives staged through
# the host, no NCCL), a sanitizer per rank.
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 2
build=$(cd "$1" && pwd) || { echo "sanitize.sh: no build folder $1" >&2; exit 2; }
mkdir -p "$2" && out=$(cd "$2" && pwd)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[[ -x $cs ]] || { echo "sanitize.sh: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "sanitize.sh: no GPU" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
export TRIFORCE_SANITIZER_SHAPES=${SHAPES:-1}
tools=${TOOLS:-memcheck synccheck racecheck initcheck}
budget=${BUDGET_S:-380}
jobs_at_once=${JOBS:-12}
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/sanitize.XXXXXX")  # logs and rows; only the three files go to OUT_DIR

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

# Jobs: "job filter memcheck-seconds". A gtest job is a binary under BUILD_DIR/tests with its --gtest_filter
# ("-" = all); cli_* jobs are the commands in run_cli below. The seconds are an estimate under memcheck with
# sanitizer shapes (run 1's per-job seconds at full shapes, 8 jobs at a time, scaled by how much each grid
# shrank); they order the jobs (memcheck, synccheck and racecheck longest first, so the parallel slots pack,
# then initcheck) and give the wall estimate.
# Filters leave out what is heavy by nature: the 65537-token contexts and the 8B synthetic model.
gtests=(
  "test_cuda_graphs - 80"
  "test_engine_gpu - 70"
  "test_model_batch_invariance - 60"
  "test_kv_offload - 60"
  "test_model_step_fusions -*8B* 50"
  "test_persistent_step - 50"
  "test_cuda_graphs_tp - 60"
  "test_streaming_absorb_gpu - 30"
  "test_synthetic_shard - 10"
  "test_model_gpu - 27"
  "test_kernels_attention_prefill -*LongContext* 20"
  "test_shared_embedding_gpu - 20"
  "test_kernels_gemm_algo - 12"
  "test_nccl_comm - 19"
  "test_kernels_gemm_skinny - 15"
  "test_kernels_attention -*LongContext* 8"
  "test_kernels_batch_invariance - 8"
  "test_retrieval_select_gpu - 7"
  "test_kernels_softmax_top_p - 7"
  "test_kernels_elementwise - 6"
  "test_kernels_step_fusions - 6"
  "test_kernels_sampling - 1"
  "test_gpu_device - 1"
)
clis=("cli_sweep - 110" "cli_generate_smollm2 - 30" "cli_tp2_shared_gpu - 25")
# Each tool's cost relative to memcheck (run 1: synccheck about the same; racecheck and initcheck instrument
# every shared or global access: assumed 3x and 2x).
declare -A factor=([memcheck]=1 [synccheck]=1 [racecheck]=3 [initcheck]=2)
rows=$work/jobs.unsorted; : >"$rows"
for tool in $tools; do
  [[ -n ${factor[$tool]:-} ]] || { echo "sanitize.sh: unknown tool $tool" >&2; exit 2; }
  for entry in "${gtests[@]}" "${clis[@]}"; do
    read -r job filter secs <<<"$entry"
    case $job in
      cli_generate_smollm2)
        [[ $tool == memcheck && -f ${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf ]] || continue ;;
      cli_tp2_shared_gpu) [[ $tool == memcheck ]] && command -v mpirun >/dev/null || continue ;;
      cli_sweep) [[ $tool == memcheck || $tool == synccheck ]] || continue ;;
      *) [[ -x $build/tests/$job ]] || { [[ $tool == memcheck ]] && echo "note: $build/tests/$job not built: skipped" >&2
                                          continue; } ;;
    esac
    group=0; [[ $tool == initcheck ]] && group=1  # not asked for by issue 19: it gets what time is left
    echo "$group $(( secs * ${factor[$tool]} )) $tool $job $filter" >>"$rows"
  done
done
jobs_file=$work/jobs.txt
sort -k1,1n -k2,2nr "$rows" | awk '{ print $3, $4, $5, $2 }' >"$jobs_file"
if [[ -n ${ONLY:-} ]]; then
  awk -v re="$ONLY" '{ if (($1 "/" $2) ~ re) print }' "$jobs_file" >"$jobs_file.only" && mv "$jobs_file.only" "$jobs_file"
fi
njobs=$(wc -l <"$jobs_file")
estimate=$(awk -v j="$jobs_at_once" '{ s += $4; if ($4 > m) m = $4 } END { w = s / j; if (m > w) w = m; printf "%d", w }' "$jobs_file")

# Counts of one log: errors of ours, NCCL probe reports, racecheck warnings, leaks. A report block starts at a
# "========= <report>" line and runs to the "=========" line that closes it; a block is the NCCL probe when it
# is error 209 on cudaFuncGetAttributes and its first host frame past libcuda.so is in libnccl.so.
count_log() {
  awk '
    function close_block() {
      if (kind == "") return
      if (kind == "probe" && first ~ /libnccl\.so/) probe++
      kind = ""; first = ""
    }
    /^========= Leaked [0-9,]+ bytes/ { leaks++ }
    /^========= Program hit cudaErrorNoKernelImageForDevice .* cudaFuncGetAttributes/ { close_block(); kind = "probe"; next }
    /^========= (Program hit|Invalid|Leaked|Uninitialized|Barrier|Race|Error|Malformed|Misaligned|Out-of-range|Warning)/ { close_block(); kind = "other"; next }
    kind != "" && /Host Frame:/ && first == "" && $0 !~ /libcuda\.so/ { first = $0; next }
    /^=========[ ]*$/ { close_block(); next }
    /ERROR SUMMARY: [0-9]+ error/ { match($0, /ERROR SUMMARY: [0-9]+/); e += substr($0, RSTART + 15, RLENGTH - 15) + 0 }
    /RACECHECK SUMMARY: .*\([0-9]+ errors?, [0-9]+ warning/ {
      match($0, /\([0-9]+ error/); re += substr($0, RSTART + 1, RLENGTH - 7) + 0
      match($0, /, [0-9]+ warning/); w += substr($0, RSTART + 2, RLENGTH - 10) + 0 }
    END { close_block(); if (re > e) e = re; ours = e - probe; if (ours < 0) ours = 0
          printf "%d %d %d %d\n", ours, probe, w, leaks }' "$1"
}

# One job: the sanitizer around a gtest binary or a CLI command, output to WORK/<tool>/<job>.log.
run_job() {
  local tool=$1 job=$2 filter=$3
  local log=$work/$tool/$job.log row=$work/$tool/$job.row
  mkdir -p "$work/$tool"
  local now left t
  now=$(date +%s); left=$(( budget - (now - start) ))
  t=${TIMEOUT_S:-300}; (( t > left )) && t=$left
  if (( left < 15 )); then
    printf '%s\t%s\tnot-run\t-\t-\t-\t-\t0\t-\n' "$tool" "$job" >"$row"
    return 0
  fi
  local san=("$cs" --tool "$tool" "${common[@]}" ${extra[$tool]})
  local t0=$SECONDS rc=0
  # timeout signals its whole process group: the tool, the test and any rank.
  case $job in
    cli_*) run_cli "$job" "$t" "${san[@]}" >"$log" 2>&1 || rc=$? ;;
    *) local f=(); [[ $filter != - ]] && f=(--gtest_filter="$filter")
       timeout -k 10 "$t" "${san[@]}" "$build/tests/$job" "${f[@]}" >"$log" 2>&1 || rc=$? ;;
  esac
  local secs=$(( SECONDS - t0 ))
  local errors probe warnings leaks status
  read -r errors probe warnings leaks < <(count_log "$log")
  if (( rc == 124 || rc == 137 )); then status=TIMEOUT
  elif (( errors > 0 )); then status=ERRORS
  elif (( rc != 0 && rc != 99 )); then status=FAILED
  elif (( rc == 99 && probe == 0 )); then status=FAILED  # the tool said error but none was counted: read the log
  else status=clean; fi
  grep -q "ERROR SUMMARY" "$log" || [[ $status != clean ]] || status=FAILED  # the tool never reported
  # --error-exitcode hides the test's own exit code when the tool reported anything (an NCCL probe): a failed
  # gtest is read from its output.
  [[ $status == clean ]] && grep -q '^\[  FAILED  \]' "$log" && status=FAILED
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$job" "$status" "$errors" "$probe" "$warnings" "$leaks" \
    "$secs" "$rc" >"$row"
  local done_n
  done_n=$(find "$work" -name '*.row' | wc -l)
  printf '[%4ds %3d/%d] %s/%s: %s (%s errors, %s nccl-probe, %s warnings, %s leaks, %s s)\n' \
    $(( $(date +%s) - start )) "$done_n" "$njobs" "$tool" "$job" "$status" "$errors" "$probe" "$warnings" "$leaks" "$secs"
}

# The CLI jobs: run_cli JOB SECONDS SANITIZER...
run_cli() {
  local job=$1 t=$2; shift 2
  local dir=$work/cli/$tool_of_cli/$job; mkdir -p "$dir"
  case $job in
    cli_sweep)  # every method of the CI smoke sweep on the GPU (bf16), greedy and sampled
      timeout -k 10 "$t" "$@" "$build/triforce" sweep --config configs/sweeps/ci-smoke.ini --device cuda \
        --out "$dir/smoke.h5" --quiet ;;
    cli_generate_smollm2)  # the default model (its tokenizer, GGUF dequantization), triforce and ar
      awk 'BEGIN { for (i = 0; i < 600; i++) print (i * 7919 + 13) % 49152 }' >"$dir/ids.txt"
      timeout -k 10 "$t" "$@" "$build/triforce" generate --device cuda --prompt-tokens "$dir/ids.txt" \
        --max-new-tokens 32 --ignore-eos --method triforce --compare ar --json ;;
    cli_tp2_shared_gpu)  # two ranks on the one GPU, a sanitizer per rank
      awk 'BEGIN { for (i = 0; i < 200; i++) print (i * 37 + 11) % 256 }' >"$dir/ids.txt"
      local mpi=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE -x TRIFORCE_SANITIZER_SHAPES -np 2)
      [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
      timeout -k 10 "$t" "${mpi[@]}" "$@" "$build/triforce" generate --target tests/fixtures/hf/gqa_f32 \
        --device cuda --prompt-tokens "$dir/ids.txt" --max-new-tokens 24 --ignore-eos --method triforce \
        --draft layerskip:1 --budget 64 --chunk-size 8 --json ;;
  esac
}

# The three files, also when the run is interrupted.
pack() {
  {
    printf 'tool\tjob\tstatus\terrors\tnccl_probe\twarnings\tleaks\tseconds\texit\n'
    while read -r tool job _; do
      if [[ -f $work/$tool/$job.row ]]; then cat "$work/$tool/$job.row"
      else printf '%s\t%s\tnot-run\t-\t-\t-\t-\t0\t-\n' "$tool" "$job"; fi
    done <"$jobs_file"
  } >"$out/summary.tsv"
  {
    echo "wall: $(( $(date +%s) - start )) s (estimated ${estimate} s)"
    # (column is not on every image: awk pads the same table.)
    awk -F'\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } if (NF > nf) nf = NF }
      END { for (r = 1; r <= NR; r++) { line = ""; for (i = 1; i <= nf; i++) line = line (i < nf ? sprintf("%-" w[i] "s  ", c[r, i]) : c[r, i]); print line } }' "$out/summary.tsv"
    awk -F'\t' 'NR > 1 { n[$1]++; s[$1 " " $3]++; if ($4 ~ /^[0-9]+$/) e[$1] += $4; if ($5 ~ /^[0-9]+$/) p[$1] += $5 }
      END { for (t in n) printf "%s: %d jobs: %d clean, %d ERRORS (%d errors), %d FAILED, %d TIMEOUT, %d not-run; %d NCCL probe reports\n",
            t, n[t], s[t " clean"], s[t " ERRORS"], e[t], s[t " FAILED"], s[t " TIMEOUT"], s[t " not-run"], p[t] }' "$out/summary.tsv"
  } >>"$out/summary.txt"
  tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.row' --exclude='*.h5' --exclude=cli . 2>/dev/null
  rm -rf "$work"
}
trap 'echo "sanitize.sh: interrupted; packing what ran" >&2; pack; exit 130' INT TERM

export -f run_job run_cli count_log
export work build cs budget start njobs
export common_s="${common[*]}"
# Bash cannot export arrays: rebuild them in each job from their exported text.
for k in "${!extra[@]}"; do export "extra_$k=${extra[$k]}"; done
job_shell='declare -A extra; common=($common_s)
  for k in memcheck racecheck synccheck initcheck; do v=extra_$k; extra[$k]=${!v-}; done
  tool_of_cli=$1; run_job "$@"'

{
  echo "compute-sanitizer: $("$cs" --version 2>&1 | tail -1)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "git: ${TRIFORCE_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}; build: $build"
  echo "tools: $tools; $njobs jobs, $jobs_at_once at a time, budget $budget s, TRIFORCE_SANITIZER_SHAPES=$TRIFORCE_SANITIZER_SHAPES"
  echo "estimated wall: ${estimate} s (sum of the estimates / jobs at a time, or the longest job)"
} | tee "$out/summary.txt"
xargs -a "$jobs_file" -L 1 -P "$jobs_at_once" bash -c "$job_shell" _
trap - INT TERM
pack
tail -n "$(echo "$tools" | wc -w)" "$out/summary.txt"
echo "out: $out/summary.txt, summary.tsv, logs.tar.gz"
! awk -F'\t' 'NR > 1 && ($3 == "ERRORS" || $3 == "FAILED") { bad = 1 } END { exit !bad }' "$out/summary.tsv"
