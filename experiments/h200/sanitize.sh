#!/usr/bin/env bash
# compute-sanitizer over every GPU test binary and a few GPU CLI runs (issue 19, item 4): memcheck (with leak
# check), synccheck and racecheck (initcheck when TOOLS names it), jobs in parallel, each under its own time
# limit, the whole run under a budget. The tests run with TRIFORCE_SANITIZER_SHAPES=1 (tests/gpu/sanitizer_shapes.h:
# each test's shape grid cut to a few small awkward shapes, every code path kept).
#   experiments/h200/sanitize.sh BUILD_DIR OUT_DIR
#   experiments/h200/sanitize.sh --count TOOL LOG     (how a log is counted: errors vendor nccl_probe warnings leaks
#                                                      untracked)
#   DRY_RUN=1 experiments/h200/sanitize.sh BUILD_DIR OUT_DIR   (the job list, its order and the estimate; no GPU)
#   env: TOOLS="memcheck synccheck racecheck" (initcheck may be added), JOBS=8 (jobs at a time per GPU),
#        RACECHECK_JOBS=3 (of those, racecheck jobs at a time per GPU), GPUS="0 1 ..." (the GPUs to spread jobs
#        over; default every GPU nvidia-smi lists), BUDGET_S=380 (the whole run; jobs not started by then are
#        not-run, running ones are cut at the budget), ONLY=REGEX (jobs whose "tool/job" name matches),
#        TIMEOUT_S=300 (cap per job), SHAPES=1 (0: full grids), RACECHECK_PRINT_LIMIT=1000,
#        ORDER=longest (longest jobs first: the slots pack, the least wall when everything fits) or shortest
#        (shortest first: the most jobs finished when the budget cannot hold them all).
# Source lines in the reports: build with -lineinfo first (same code, line tables added):
#   TRIFORCE_CUDA_LINEINFO=1 experiments/h200/build.sh build-h200
# Out, three files (so that they come back from a device call): OUT_DIR/logs.tar.gz (<tool>/<job>.log: the tool's
# report and the test's output), OUT_DIR/summary.tsv (tool, job, status, errors, vendor, nccl_probe, warnings,
# leaks, seconds, exit, signal, peak_rss_mib, gpu) and OUT_DIR/summary.txt (the same, readable, with totals per
# tool, the host's lowest MemAvailable during the run and any OOM-killer lines the kernel log shows).
# status: clean | ERRORS (reports in our code; also when the job was then cut) | VENDOR (racecheck reports only
# inside vendor kernels, below) | FAILED (the test failed under the tool with no report: read its log) | KILLED
# (ended by a signal before its limit: `signal` names it; the OOM killer's SIGKILL is the usual one) | TIMEOUT (its
# limit or the budget; shrink its filter) | not-run (the budget ran out first) | skipped (every test of the binary
# skipped, none failed: exit 77) | INCOMPLETE (no report of ours, but the tool ran out of its own memory for some
# launches, "Internal Sanitizer Error ... Unable to allocate enough memory", and left them unchecked: run 5 with 8
# jobs on one H100; rerun the job with fewer at a time, JOBS=2). The untracked launches are not counted as errors.
# Exit 1 when a job reported errors or failed; timeouts, killed and not-run jobs are listed, not failures.
#
# Why these flags (compute-sanitizer docs, "Command Line Options"):
#   --error-exitcode 99     the tool's own exit code when it reported an error (else the app's code)
#   --print-limit 100       at most 100 reports printed per process (the summary still counts them all);
#                           racecheck gets RACECHECK_PRINT_LIMIT (1000): its analysis reports come once per hazard
#                           site and launch, so 100 are used up by the first few launches of one kernel and the
#                           other kernels' reports, ours or a vendor's, are never printed (run 3: exactly 100, all
#                           from persistent_step_kernel's first launches). A report not printed cannot be
#                           classified and counts as ours.
#   --target-processes all  follow child processes (mpirun ranks, the CLI runs)
#   --leak-check full       memcheck: device allocations never freed, reported at exit. The binaries free their
#                           process-lifetime state first (tf::release_device_state), so a leak is a finding.
#   --racecheck-report analysis  racecheck: one analysed report per hazard site, not one per access pair
#
# Jobs at a time. One GPU runs the kernels of all its processes by time slicing, so jobs beyond the first few
# mostly overlap host work (the sanitizer's analysis, JIT patching, test setup), not kernels; JOBS=8 per GPU (run
# 1's count; run 3's 12 ended with most jobs cut). racecheck keeps far more host memory per process than the other
# tools: in run 3, 7 racecheck jobs among 12 on a 128 GiB host, and 5 of them ended inside their first test with
# "process didn't terminate successfully" and exit code 9, SIGKILL's number, no hazard reported, the OOM killer's
# mark (not proven: the kernel log was not read). So racecheck gets its own, smaller limit (RACECHECK_JOBS=3), the
# peak RSS of each job is kept (GNU time's %M, the largest process of the job, where /usr/bin/time exists) and the
# host's MemAvailable is sampled. With several GPUs (GPUS) each job is pinned to the least loaded one
# (CUDA_VISIBLE_DEVICES), the limits counting per GPU: the kernels then really run in parallel.
#
# Vendor kernels (the `vendor` column). racecheck instruments the shared-memory loads and stores that threads
# issue and looks for a barrier ordering each conflicting pair. The sm_90 kernels of cuBLAS (nvjet_sm90_*,
# sm90_xmma_*, cutlass*) and cuDNN (cudnn_generated_*_wgmma_*) fill shared memory with TMA (cp.async.bulk) and read
# it with wgmma, both through the async proxy, and order them with mbarrier transaction counts, which racecheck
# does not model as happens-before: flash-attention's note on a racecheck false positive with cp.async.bulk and
# mbarrier::complete_tx (AI/RACECHECK_TMA_HAZARD.md, flash-attention 2.8.3) shows the same mechanism; no NVIDIA
# page we could find states it. We cannot read, fix or verify those kernels, so a racecheck report whose kernel
# name is a vendor kernel's (not in namespace tf::, name matching vendor_re below) is counted in `vendor`, not in
# errors; reports in our kernels stay errors, and memcheck, synccheck and initcheck reports stay errors wherever
# they are (an invalid access inside cuBLAS can be our argument's fault).
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

vendor_re='cudnn|cublas|nvjet|cutlass|xmma|gemv|gemmk1|splitKreduce|nccl'

# Counts of one log: errors of ours, vendor-kernel racecheck reports, NCCL probe reports, racecheck warnings
# (ours), leaks. A report block starts at a "========= <report>" line and runs to the "=========" line that closes
# it; a block is the NCCL probe when it is error 209 on cudaFuncGetAttributes and its first host frame past
# libcuda.so is in libnccl.so; a racecheck block is a vendor's when the kernel its first line names is.
count_log() {
  awk -v tool="$1" -v vre="$vendor_re" '
    function close_block() {
      if (kind == "probe" && first ~ /libnccl\.so/) probe++
      kind = ""; first = ""
    }
    /^========= Leaked [0-9,]+ bytes/ { leaks++ }
    # The leak summary counts leaks whose reports the print limit cut.
    /^========= LEAK SUMMARY: [0-9,]+ bytes leaked in [0-9,]+ allocations/ {
      n = $0; sub(/.* leaked in /, "", n); sub(/ allocations.*/, "", n); gsub(/,/, "", n); if (n + 0 > sumleaks) sumleaks = n + 0 }
    # The tool itself ran out of memory for a launch (too many jobs on the GPU): that launch went unchecked.
    # It is not a finding in our code, and the run is not a clean one either.
    /^========= Internal Sanitizer Error/ { close_block(); untracked++; next }
    /^========= Program hit cudaErrorNoKernelImageForDevice .* cudaFuncGetAttributes/ { close_block(); kind = "probe"; printed++; next }
    /^========= (Error|Warning): Race reported/ {
      close_block(); kind = "race"
      iserr = $0 ~ /^========= Error/; printed += iserr
      name = $0; sub(/.* access at /, "", name); sub(/\+0x[0-9a-fA-F]+.*/, "", name)
      if (tool == "racecheck" && name !~ /tf::/ && tolower(name) ~ vre) { if (iserr) verr++; else vwarn++ }
      next
    }
    /^========= Error: process didn.t terminate successfully/ { close_block(); next }
    /^========= Warning/ { close_block(); kind = "other"; next }
    /^========= (Program hit|Invalid|Leaked|Uninitialized|Barrier|Race|Error|Malformed|Misaligned|Out-of-range)/ {
      close_block(); kind = "other"; printed++; next }
    kind != "" && /Host Frame:/ && first == "" && $0 !~ /libcuda\.so/ { first = $0; next }
    /^=========[ ]*$/ { close_block(); next }
    /ERROR SUMMARY: [0-9]+ errors? were not printed/ { next }  # a part of the total above, not more
    /ERROR SUMMARY: [0-9]+ error/ { match($0, /ERROR SUMMARY: [0-9]+/); e += substr($0, RSTART + 15, RLENGTH - 15) + 0 }
    /RACECHECK SUMMARY: .*\([0-9]+ errors?, [0-9]+ warning/ {
      match($0, /\([0-9]+ error/); re += substr($0, RSTART + 1, RLENGTH - 7) + 0
      match($0, /, [0-9]+ warning/); w += substr($0, RSTART + 2, RLENGTH - 10) + 0 }
    END { close_block()
          # A log cut before its summary (a timeout, a kill) still counts the reports it printed.
          if (re > e) e = re; if (printed > e) e = printed
          ours = e - probe - verr - untracked; if (ours < 0) ours = 0
          ow = w - vwarn; if (ow < 0) ow = 0
          if (sumleaks > leaks) leaks = sumleaks
          printf "%d %d %d %d %d %d\n", ours, verr + vwarn, probe, ow, leaks, untracked }' "$2"
}

if [[ ${1-} == --count ]]; then
  [[ $# -eq 3 && -f $3 ]] || { echo "usage: $0 --count TOOL LOG" >&2; exit 2; }
  count_log "$2" "$3"
  exit 0
fi

[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR OUT_DIR (or --count TOOL LOG)" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 2
src=$PWD
dry=${DRY_RUN:-0}
if [[ $dry == 1 ]]; then
  build=$(cd "$1" 2>/dev/null && pwd) || build=$1
  out=$(mktemp -d "${TMPDIR:-/tmp}/sanitize-dry.XXXXXX")
else
  build=$(cd "$1" && pwd) || { echo "sanitize.sh: no build folder $1" >&2; exit 2; }
  mkdir -p "$2" && out=$(cd "$2" && pwd)
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [[ -x $cs ]] || { echo "sanitize.sh: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" >&2; exit 2; }
  nvidia-smi -L >/dev/null 2>&1 || { echo "sanitize.sh: no GPU" >&2; exit 2; }
fi
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA_VISIBLE_DEVICES=n then means nvidia-smi's GPU n
export TRIFORCE_SANITIZER_SHAPES=${SHAPES:-1}
tools=${TOOLS:-memcheck synccheck racecheck}
budget=${BUDGET_S:-380}
jobs_at_once=${JOBS:-8}
race_at_once=${RACECHECK_JOBS:-3}
job_limit=${TIMEOUT_S:-300}
race_print=${RACECHECK_PRINT_LIMIT:-1000}
for v in budget jobs_at_once race_at_once job_limit race_print; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "sanitize.sh: $v=${!v}: expected a whole number" >&2; exit 2; }
done
(( jobs_at_once >= 1 && race_at_once >= 1 )) || { echo "sanitize.sh: JOBS and RACECHECK_JOBS must be >= 1" >&2; exit 2; }
if [[ -n ${GPUS:-} ]]; then read -r -a gpus <<<"$GPUS"
elif [[ $dry == 1 ]]; then gpus=(0)
else mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' '); fi
(( ${#gpus[@]} >= 1 )) || { echo "sanitize.sh: no GPU index to use" >&2; exit 2; }
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/sanitize.XXXXXX")  # logs and rows; only the three files go to OUT_DIR

# Peak RSS per job where GNU time is there (the GPU image may not have it).
timer=()
if [[ -x /usr/bin/time ]] && /usr/bin/time -f %M -o /dev/null true 2>/dev/null; then timer=(/usr/bin/time -f %M -o); fi

# Options that only newer compute-sanitizers know are added when --help lists them.
help=""
[[ $dry == 1 ]] || help=$("$cs" --help 2>&1)
knows() { grep -q -- "$1" <<<"$help"; }
common=(--error-exitcode 99 --target-processes all)
declare -A extra
extra[memcheck]="--print-limit 100 --leak-check full"
extra[racecheck]="--print-limit $race_print --racecheck-report analysis"
extra[synccheck]="--print-limit 100"
extra[initcheck]="--print-limit 100"
if knows --check-warpgroup-mma; then  # the sm90a prefill kernel's wgmma
  extra[memcheck]+=" --check-warpgroup-mma yes"; extra[synccheck]+=" --check-warpgroup-mma yes"
fi

# Jobs: "job filter memcheck-seconds [racecheck-filter:seconds]". A gtest job is a binary under BUILD_DIR/tests with its --gtest_filter
# ("-" = all); cli_* jobs are the commands in run_cli below. The seconds are an estimate under memcheck with
# sanitizer shapes (run 1's per-job seconds at full shapes, 8 jobs at a time, scaled by how much each grid
# shrank; the four binaries added since, from their ctest seconds); they order the jobs (memcheck, synccheck and
# racecheck longest first, so the parallel slots pack, then initcheck) and give the wall estimate. Run 3 showed
# them low under contention (memcheck test_cuda_graphs past 300 s with 11 other jobs). Run 5's seconds (8 jobs at
# a time on one H100, results/h100/session-2026-12-07d/sanitize-run5) replaced the estimates it measured, the
# larger of memcheck's and synccheck's; for the jobs it cut at 300 s (test_model_step_fusions and
# test_persistent_step, whose sanitizer grids have shrunk about 3x and 6x since) and those the budget cut, a
# guess above the time they had run. The batch of results/h100/session-2026-12-08 (6 jobs at a time) set
# test_kv_offload (183 s) and test_model_step_fusions (synccheck 195 s); test_kernels_step_inputs is a guess.
# Filters leave out what is heavy by nature: the 65537-token contexts and the 8B synthetic model. A GPU test
# binary built but missing here still runs (estimate 30 s, with a note), so the list cannot fall behind.
# An optional fourth field is racecheck's filter (and estimate) where racecheck cannot finish the whole binary
# in one call but a subset still reaches every code path of our kernels: racecheck's question is which barrier
# orders which shared-memory access, which depends on the kernel's branches and tile counts, not on the model's
# depth or the number of steps.
#   test_persistent_step: the 30-layer SmolLM2 test (alone past 300 s under racecheck in run 3) and the greedy
#   speculation chain are left out; the rest still runs D = 64 and 128, GQA 1, 3 and 4 (one and two M tiles),
#   fused and unfused attention, 1-3 layers, partial tiles, multi-tile GEMVs (gate-up of 175 and 385 tiles,
#   llama-68m's lm_head), the lm_head in and out of the kernel, both dtypes and lengths past a split.
gtests=(
  "test_cuda_graphs - 80"
  "test_engine_gpu - 70"
  "test_model_batch_invariance - 130"
  "test_kv_offload - 185"
  "test_model_step_fusions -*8B* 200"
  "test_persistent_step - 120 -PersistentStep.BitIdenticalSyntheticSmolLM2:PersistentStep.GreedySpeculationEqualsAr:20"
  "test_cuda_graphs_tp - 100"
  "test_streaming_absorb_gpu - 30"
  "test_greedy_ids_gpu - 220"
  "test_greedy_chain_gpu - 100"
  "test_model_prefill_gpu - 45"
  "test_synthetic_shard - 10"
  "test_model_gpu - 27"
  "test_kernels_attention_prefill -*LongContext* 28"
  "test_shared_embedding_gpu - 20"
  "test_kernels_gemm_algo - 12"
  "test_kernels_norm_gemm - 12"
  "test_device_sampling_gpu - 250"
  "test_nccl_comm - 28"
  "test_kernels_gemm_skinny - 15"
  "test_draft_vocab_gpu - 21"
  "test_kernels_attention -*LongContext* 8"
  "test_kernels_batch_invariance - 8"
  "test_retrieval_select_gpu - 7"
  "test_kernels_softmax_top_p - 7"
  "test_kernels_elementwise - 11"
  "test_kernels_step_fusions - 49"
  "test_kernels_rope_prefill - 3"
  "test_kernels_sampling - 1"
  "test_kernels_step_inputs - 2"
  "test_gpu_device - 1"
)
for f in "$src"/tests/gpu/test_*.cpp; do
  name=$(basename "$f" .cpp)
  printf '%s\n' "${gtests[@]}" | grep -q "^$name " && continue
  echo "note: $name is not in sanitize.sh's job list: it runs with an estimate of 30 s" >&2
  gtests+=("$name - 30")
done
clis=("cli_sweep - 110" "cli_generate_smollm2 - 30" "cli_tp2_shared_gpu - 25")
# Each tool's cost relative to memcheck, for the order and the estimate: synccheck about the same (run 1);
# racecheck 6x (run 3: its jobs of the model tests were still in their first test when memcheck's had passed
# several); initcheck, which instruments every global access, assumed 2x.
declare -A factor=([memcheck]=1 [synccheck]=1 [racecheck]=6 [initcheck]=2)
rows=$work/jobs.unsorted; : >"$rows"
for tool in $tools; do
  [[ -n ${factor[$tool]:-} ]] || { echo "sanitize.sh: unknown tool $tool" >&2; exit 2; }
  for entry in "${gtests[@]}" "${clis[@]}"; do
    read -r job filter secs race <<<"$entry"
    if [[ $tool == racecheck && -n ${race:-} ]]; then filter=${race%:*}; secs=${race##*:}; fi
    case $job in
      cli_generate_smollm2)
        [[ $tool == memcheck && -f ${TRIFORCE_CACHE:-$HOME/.cache/triforce}/SmolLM2-135M-Instruct.Q4_1.gguf ]] || continue ;;
      cli_tp2_shared_gpu) { [[ $tool == memcheck ]] && command -v mpirun >/dev/null; } || continue ;;
      cli_sweep) [[ $tool == memcheck || $tool == synccheck ]] || continue ;;
      *) [[ $dry == 1 || -x $build/tests/$job ]] || { [[ $tool == memcheck ]] && echo "note: $build/tests/$job not built: skipped" >&2
                                                      continue; } ;;
    esac
    group=0; [[ $tool == initcheck ]] && group=1  # not asked for by issue 19: it gets what time is left
    echo "$group $(( secs * ${factor[$tool]} )) $tool $job $filter" >>"$rows"
  done
done
jobs_file=$work/jobs.txt
case ${ORDER:-longest} in
  longest) by=-k2,2nr ;;
  shortest) by=-k2,2n ;;
  *) echo "sanitize.sh: ORDER=$ORDER: expected longest or shortest" >&2; exit 2 ;;
esac
sort -k1,1n "$by" "$rows" | awk '{ print $3, $4, $5, $2 }' >"$jobs_file"
if [[ -n ${ONLY:-} ]]; then
  awk -v re="$ONLY" '{ if (($1 "/" $2) ~ re) print }' "$jobs_file" >"$jobs_file.only" && mv "$jobs_file.only" "$jobs_file"
fi
njobs=$(wc -l <"$jobs_file")
# The wall estimate: the jobs in order on JOBS slots per GPU (RACECHECK_JOBS of them for racecheck), each job
# on the slot that frees first, each capped at TIMEOUT_S.
estimate=$(awk -v j="$jobs_at_once" -v r="$race_at_once" -v g="${#gpus[@]}" -v cap="$job_limit" '
  { d = $4 < cap ? $4 : cap; n = j * g; nr = (r < j ? r : j) * g
    lo = 1; hi = n; if ($1 == "racecheck") hi = nr
    best = lo; for (i = lo; i <= hi; i++) if (free[i] < free[best]) best = i
    free[best] += d; if (free[best] > w) w = free[best] }
  END { printf "%d", w }' "$jobs_file")

# One job: the sanitizer around a gtest binary or a CLI command, output to WORK/<tool>/<job>.log.
run_job() {
  local tool=$1 job=$2 filter=$3 gpu=$4
  local log=$work/$tool/$job.log row=$work/$tool/$job.row rss=$work/$tool/$job.rss
  mkdir -p "$work/$tool"
  local now left t
  now=$(date +%s); left=$(( budget - (now - start) ))
  t=$job_limit; (( t > left )) && t=$left
  if (( left < 15 )); then
    printf '%s\t%s\tnot-run\t-\t-\t-\t-\t-\t0\t-\t-\t-\t-\n' "$tool" "$job" >"$row"
    return 0
  fi
  export CUDA_VISIBLE_DEVICES=$gpu
  local san=("$cs" --tool "$tool" "${common[@]}")
  read -r -a more <<<"${extra[$tool]}"
  san+=("${more[@]}")
  local pre=()  # run_cli sees it too (bash locals are dynamically scoped)
  (( ${#timer[@]} )) && pre=("${timer[@]}" "$rss")
  local t0=$SECONDS rc=0
  # timeout signals its whole process group: the tool, the test and any rank.
  case $job in
    cli_*) run_cli "$job" "$t" "${san[@]}" >"$log" 2>&1 || rc=$? ;;
    *) local f=(); [[ $filter != - ]] && f=(--gtest_filter="$filter")
       "${pre[@]}" timeout -k 10 "$t" "${san[@]}" "$build/tests/$job" "${f[@]}" >"$log" 2>&1 || rc=$? ;;
  esac
  local secs=$(( SECONDS - t0 ))
  local errors vendor probe warnings leaks untracked status signal=- peak=-
  read -r errors vendor probe warnings leaks untracked < <(count_log "$tool" "$log")
  # GNU time's last line is %M (KiB); a line before it says how the command ended.
  [[ -s $rss ]] && peak=$(awk 'END { if ($1 ~ /^[0-9]+$/) printf "%d", $1 / 1024; else print "-" }' "$rss")
  # How it ended: timeout's TERM (124), or its KILL 10 s later (137 at the limit); a signal before the limit
  # reached the sanitizer itself (128 + n) or only its target: compute-sanitizer then says "process didn't
  # terminate successfully", and run 3's five such jobs all exited 9, SIGKILL's number, so a code that is a signal
  # number is taken as the signal (our reading, not documented: marked "?").
  local sig=0 cut=""
  if (( rc == 124 || (rc > 128 && secs >= t) )); then cut=timeout
  elif (( rc > 128 )); then sig=$(( rc - 128 )); signal=SIG$(kill -l "$sig" 2>/dev/null || echo "$sig")
  elif grep -q "process didn't terminate successfully" "$log"; then
    if (( rc >= 1 && rc <= 64 )); then sig=$rc; signal="SIG$(kill -l "$rc" 2>/dev/null || echo "$rc")?"
    else sig=-1; signal="?"; fi
  fi
  # KILL, TERM, INT and HUP come from outside (the OOM killer, a person); any other signal is the test crashing.
  case $sig in 9|15|2|1) cut=killed ;; 0) ;; *) cut=crashed ;; esac
  if (( errors > 0 )); then status=ERRORS
  elif [[ $cut == timeout ]]; then status=TIMEOUT
  elif [[ $cut == killed ]]; then status=KILLED
  elif [[ $cut == crashed ]]; then status=FAILED
  elif (( rc == 77 )); then status=skipped  # every test of the binary skipped, none failed (tests/support/skip_exit_code.h)
  elif (( rc != 0 && rc != 99 )); then status=FAILED
  elif (( rc == 99 && probe == 0 && vendor == 0 )); then status=FAILED  # the tool said error but none was counted: read the log
  elif (( vendor > 0 )); then status=VENDOR
  else status=clean; fi
  if [[ $status == clean || $status == VENDOR || $status == skipped ]]; then
    grep -qE "(ERROR|RACECHECK) SUMMARY" "$log" || status=FAILED  # the tool never reported
    # --error-exitcode hides the test's own exit code when the tool reported anything (an NCCL probe, a vendor
    # kernel's race): a failed gtest is read from its output.
    grep -q '^\[  FAILED  \]' "$log" && status=FAILED
  fi
  # Launches the tool could not track (its own memory ran out): neither a finding nor clean.
  if (( untracked > 0 )) && [[ $status == clean || $status == VENDOR || $status == FAILED ]] &&
    ! grep -q '^\[  FAILED  \]' "$log"; then
    status=INCOMPLETE
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$job" "$status" "$errors" "$vendor" "$probe" \
    "$warnings" "$leaks" "$secs" "$rc" "$signal" "$peak" "$gpu" >"$row"
  local done_n
  done_n=$(find "$work" -name '*.row' | wc -l)
  printf '[%4ds %3d/%d] %s/%s: %s (%s errors, %s vendor, %s nccl-probe, %s warnings, %s leaks, %s s, %s MiB, gpu %s)\n' \
    $(( $(date +%s) - start )) "$done_n" "$njobs" "$tool" "$job" "$status" "$errors" "$vendor" "$probe" "$warnings" \
    "$leaks" "$secs" "$peak" "$gpu"
}

# The CLI jobs: run_cli JOB SECONDS SANITIZER...
run_cli() {
  local job=$1 t=$2; shift 2
  local dir=$work/cli/$tool/$job; mkdir -p "$dir"
  case $job in
    cli_sweep)  # every method of the CI smoke sweep on the GPU (bf16), greedy and sampled
      "${pre[@]}" timeout -k 10 "$t" "$@" "$build/triforce" sweep --config configs/sweeps/ci-smoke.ini --device cuda \
        --out "$dir/smoke.h5" --quiet ;;
    cli_generate_smollm2)  # the default model (its tokenizer, GGUF dequantization), triforce and ar
      awk 'BEGIN { for (i = 0; i < 600; i++) print (i * 7919 + 13) % 49152 }' >"$dir/ids.txt"
      "${pre[@]}" timeout -k 10 "$t" "$@" "$build/triforce" generate --device cuda --prompt-tokens "$dir/ids.txt" \
        --max-new-tokens 32 --ignore-eos --method triforce --compare ar --json ;;
    cli_tp2_shared_gpu)  # two ranks on the one GPU, a sanitizer per rank
      awk 'BEGIN { for (i = 0; i < 200; i++) print (i * 37 + 11) % 256 }' >"$dir/ids.txt"
      local mpi=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE -x TRIFORCE_SANITIZER_SHAPES -x CUDA_VISIBLE_DEVICES
                 -x CUDA_DEVICE_ORDER -np 2)
      [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
      "${pre[@]}" timeout -k 10 "$t" "${mpi[@]}" "$@" "$build/triforce" generate --target tests/fixtures/hf/gqa_f32 \
        --device cuda --prompt-tokens "$dir/ids.txt" --max-new-tokens 24 --ignore-eos --method triforce \
        --draft layerskip:1 --budget 64 --chunk-size 8 --json ;;
  esac
}

{
  if [[ $dry == 1 ]]; then
    echo "DRY_RUN: no GPU, no compute-sanitizer; build: $build"
  else
    echo "compute-sanitizer: $("$cs" --version 2>&1 | tail -1)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1) (using ${gpus[*]})"
    echo "git: ${TRIFORCE_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}; build: $build"
  fi
  echo "tools: $tools; $njobs jobs, ${ORDER:-longest} first, $jobs_at_once at a time per GPU ($race_at_once racecheck), ${#gpus[@]} GPU(s)," \
       "budget $budget s, $job_limit s a job, TRIFORCE_SANITIZER_SHAPES=$TRIFORCE_SANITIZER_SHAPES," \
       "peak RSS: $( (( ${#timer[@]} )) && echo "/usr/bin/time" || echo "not kept (no GNU time)")"
  echo "estimated wall: ${estimate} s (the jobs in order on the slots, each capped at $job_limit s)"
} | tee "$out/summary.txt"
if [[ $dry == 1 ]]; then
  echo "jobs, in launch order (tool job filter estimate-seconds):"
  cat "$jobs_file"
  rm -rf "$work" "$out"
  exit 0
fi

# The host's lowest MemAvailable, sampled every 2 s (evidence for or against the OOM killer).
memlog=$work/mem.min
(
  low=
  while :; do
    a=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null)
    if [[ -n $a ]] && [[ -z $low || $a -lt $low ]]; then low=$a; echo "$low" >"$memlog"; fi
    sleep 2
  done
) &
sampler=$!

# The three files, also when the run is interrupted.
pack() {
  kill "$sampler" 2>/dev/null
  {
    printf 'tool\tjob\tstatus\terrors\tvendor\tnccl_probe\twarnings\tleaks\tseconds\texit\tsignal\tpeak_rss_mib\tgpu\n'
    while read -r tool job _; do
      if [[ -f $work/$tool/$job.row ]]; then cat "$work/$tool/$job.row"
      else printf '%s\t%s\tnot-run\t-\t-\t-\t-\t-\t0\t-\t-\t-\t-\n' "$tool" "$job"; fi
    done <"$jobs_file"
  } >"$out/summary.tsv"
  {
    echo "wall: $(( $(date +%s) - start )) s (estimated ${estimate} s)"
    local total low
    total=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
    low=$( [[ -s $memlog ]] && awk '{ printf "%.1f", $1 / 1048576 }' "$memlog" || echo "?")
    echo "host memory: ${total:-?} GiB, lowest MemAvailable during the run ${low} GiB"
    # The OOM killer's lines, where the kernel log is readable here (often it is not in a container).
    dmesg 2>/dev/null | grep -iE "out of memory|oom-kill|killed process" | tail -n 20 | sed 's/^/kernel: /'
    # (column is not on every image: awk pads the same table.)
    awk -F'\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } if (NF > nf) nf = NF }
      END { for (r = 1; r <= NR; r++) { line = ""; for (i = 1; i <= nf; i++) line = line (i < nf ? sprintf("%-" w[i] "s  ", c[r, i]) : c[r, i]); print line } }' "$out/summary.tsv"
    awk -F'\t' 'NR > 1 { n[$1]++; s[$1 " " $3]++; if ($4 ~ /^[0-9]+$/) e[$1] += $4; if ($5 ~ /^[0-9]+$/) v[$1] += $5
                         if ($6 ~ /^[0-9]+$/) p[$1] += $6 }
      END { for (t in n) printf "%s: %d jobs: %d clean, %d ERRORS (%d errors), %d VENDOR (%d vendor reports), %d FAILED, %d KILLED, %d TIMEOUT, %d INCOMPLETE, %d not-run, %d skipped; %d NCCL probe reports\n",
            t, n[t], s[t " clean"], s[t " ERRORS"], e[t], s[t " VENDOR"], v[t], s[t " FAILED"], s[t " KILLED"], s[t " TIMEOUT"], s[t " INCOMPLETE"], s[t " not-run"], s[t " skipped"], p[t] }' "$out/summary.tsv"
  } >>"$out/summary.txt"
  tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.row' --exclude='*.rss' --exclude='*.h5' --exclude=cli \
    --exclude=mem.min . 2>/dev/null
  rm -rf "$work"
}
trap 'echo "sanitize.sh: interrupted; packing what ran" >&2; pack; exit 130' INT TERM

# The scheduler: jobs start in the list's order whenever a slot is free, a racecheck job only while fewer than
# RACECHECK_JOBS run on that GPU (a waiting racecheck job lets the next other job pass), each on the GPU with the
# fewest jobs running.
mapfile -t queue <"$jobs_file"
declare -A pid_gpu pid_tool
declare -A on_gpu race_on_gpu
for g in "${gpus[@]}"; do on_gpu[$g]=0; race_on_gpu[$g]=0; done
running=0
while (( ${#queue[@]} > 0 || running > 0 )); do
  launched=1
  while (( launched )); do
    launched=0
    for i in "${!queue[@]}"; do
      read -r tool job filter _ <<<"${queue[$i]}"
      best=
      for g in "${gpus[@]}"; do
        (( on_gpu[$g] < jobs_at_once )) || continue
        [[ $tool == racecheck ]] && (( race_on_gpu[$g] >= race_at_once )) && continue
        if [[ -z $best ]] || (( on_gpu[$g] < on_gpu[$best] )); then best=$g; fi
      done
      [[ -n $best ]] || continue
      run_job "$tool" "$job" "$filter" "$best" &
      pid_gpu[$!]=$best; pid_tool[$!]=$tool
      (( on_gpu[$best]++, running++ ))
      [[ $tool == racecheck ]] && (( race_on_gpu[$best]++ ))
      unset 'queue[i]'
      launched=1
      break
    done
  done
  (( running > 0 )) || break
  sleep 1
  for pid in "${!pid_gpu[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid" 2>/dev/null
    g=${pid_gpu[$pid]}
    (( on_gpu[$g]--, running-- ))
    [[ ${pid_tool[$pid]} == racecheck ]] && (( race_on_gpu[$g]-- ))
    unset 'pid_gpu[$pid]' 'pid_tool[$pid]'
  done
done
trap - INT TERM
pack
tail -n "$(echo "$tools" | wc -w)" "$out/summary.txt"
echo "out: $out/summary.txt, summary.tsv, logs.tar.gz"
! awk -F'\t' 'NR > 1 && ($3 == "ERRORS" || $3 == "FAILED") { bad = 1 } END { exit !bad }' "$out/summary.tsv"
