#!/usr/bin/env bash
# The science sweep (issue 20 item 3): the default model (SmolLM2-135M-Instruct) with its trained draft
# on held-out text, four sweeps (configs/sweeps/science-{budget,chunk,gamma,policy}.ini), one .h5 per
# sweep (the budget sweep: one per context, its budgets scaled to it), logs beside them. Then
#   python3 experiments/science/analyze.py OUT_DIR
#
#   experiments/science/run.sh OUT_DIR [--device cuda|cpu] [--quick] [--dry-run] [--triforce BIN]
#       [--model GGUF] [--books DIR] [--rows N] [--new N] [--only budget,policy,chunk,gamma]
#
# --only: run just these sweeps (e.g. the rest of a run that a device call's time limit cut short).
# --quick: a tiny grid (contexts 128/256, 2 prompts, 8 new tokens) that proves the pipeline on the CPU.
# --dry-run: every sweep's --dry-run, the number of runs and a time estimate; runs nothing.
# A rerun resumes (each sweep skips the runs its file holds). Exit status: non-zero if any sweep failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
usage="usage: $0 OUT_DIR [--device cuda|cpu] [--quick] [--dry-run] [--triforce BIN] [--model GGUF] [--books DIR] [--rows N] [--new N]"
[[ $# -ge 1 && $1 != -* ]] || { echo "$usage" >&2; exit 2; }
out=$1; shift
cache=${TRIFORCE_CACHE:-${XDG_CACHE_HOME:+$XDG_CACHE_HOME/triforce}}; cache=${cache:-$HOME/.cache/triforce}
only=budget,policy,chunk,gamma device=cuda quick=0 dry=0 bin="" model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf books=$cache/prompts rows="" new=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift ;; --quick) quick=1 ;; --dry-run) dry=1 ;; --triforce) bin=$2; shift ;;
    --only) only=$2; shift ;; --model) model=$2; shift ;; --books) books=$2; shift ;; --rows) rows=$2; shift ;; --new) new=$2; shift ;;
    *) echo "run.sh: unknown option $1 ($usage)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z $bin ]]; then
  for b in build-h200 build-cuda build build-cpu; do [[ -x $root/$b/triforce ]] && { bin=$root/$b/triforce; break; }; done
fi
[[ -n $bin && -x $bin ]] || { echo "run.sh: --triforce ${bin:-BIN}: no triforce executable (build first or give --triforce)" >&2; exit 2; }
[[ $device == cuda || $device == cpu ]] || { echo "run.sh: --device $device: expected cuda or cpu" >&2; exit 2; }
[[ -f $model ]] || { echo "run.sh: --model $model: no such file (the default model, ~/.cache/triforce)" >&2; exit 2; }
mkdir -p "$out/logs"

# The grid. Full: contexts 1024..7680 (the model's 8192 includes the new tokens), 5 prompts (one window
# of every book's held-out part), 96 new tokens (4 minutes on the H200; 128 would take 5). Quick: the same sweeps shrunk.
if [[ $quick == 1 ]]; then
  contexts=(128 256) rows=${rows:-2} new=${new:-8}
  budget_list() { echo 32,64; }
  chunk_args=(--context 256 --budget 64 --chunk-size 1,8)
  gamma_args=(--context 256 --budget 64 --gamma1 1,2 --gamma2 2,6)
  policy_args=(--context 256 --budget 64)
else
  contexts=(1024 2048 4096 7680) rows=${rows:-5} new=${new:-96}
  budget_list() {  # 64 .. context/2 in powers of 2
    local c=$1 b=64 l=""
    while (( b <= c / 2 )); do l+=${l:+,}$b; b=$((b * 2)); done
    echo "$l"
  }
  chunk_args=() gamma_args=() policy_args=()
fi
maxctx=${contexts[-1]}

# Held-out prompts: rows windows of maxctx tokens of the books' held-out parts.
prompts=$out/prompts/heldout.npy
mkdir -p "$out/prompts"
if [[ ! -f $prompts ]]; then
  python3 "$here/heldout_prompts.py" --triforce "$bin" --model "$model" --books "$books" --tokens "$maxctx" \
    --rows "$rows" --out "$prompts"
fi

# The middle level must not collapse when its budget covers the context (a later triforce option).
extra=()
help=$("$bin" sweep --help 2>&1 || true)
if [[ $help =~ --full-hierarchy\ +arg ]]; then extra+=(--full-hierarchy 1)
elif [[ $help == *--full-hierarchy* ]]; then extra+=(--full-hierarchy)
fi
[[ $dry == 1 ]] && extra+=(--dry-run)

# The dry run's time estimate, from results/h200/draft (SmolLM2 + the trained draft on the H200, decode
# ms/token): ar ~1, triforce/spec ~1-3 at T = 0 and ~2.5-6.5 at T = 0.6; plus a run's setup and save,
# and a sweep's model load.
ms_ar=1.0 ms_t0=2.0 ms_t=4.0 s_run=0.05 s_sweep=3
failed=() total_runs=0 total_s=0
t_all=$(date +%s.%N)
sweep() {  # sweep NAME FILE-STEM args...
  local name=$1 stem=$2; shift 2
  [[ ,$only, == *,$name,* ]] || return 0
  local log=$out/logs/$stem.log t0 t1
  t0=$(date +%s.%N)
  if "$bin" sweep --config "$root/configs/sweeps/science-$name.ini" --prompt-tokens "$prompts" --device "$device" \
      --max-new-tokens "$new" --out "$out/$stem.h5" "${extra[@]}" "$@" >"$log" 2>&1; then
    t1=$(date +%s.%N)
    if [[ $dry == 1 ]]; then
      # The points' lines: index method prompt context new budget chunk g1 g2 sink window reretrieve T ...
      local n s
      n=$(grep -c '^ *[0-9]\+ ' "$log" || true)
      s=$(awk -v per_ar="$ms_ar" -v per_t0="$ms_t0" -v per_t="$ms_t" -v per_run="$s_run" '
        /^ *[0-9]+ / { ms = $2 == "ar" ? per_ar : ($13 == 0 ? per_t0 : per_t); t += $5 * ms / 1000 + per_run }
        END { printf "%.0f", t }' "$log")
      total_runs=$((total_runs + n)) total_s=$((total_s + s + s_sweep))
      printf '%-24s %4d runs, about %4d s on the H200 (dry run; log %s)\n' "$stem" "$n" "$((s + s_sweep))" "$log"
    else
      printf '%-24s done in %6.1f s (log %s)\n' "$stem" "$(awk "BEGIN{print $t1 - $t0}")" "$log"
    fi
  else
    failed+=("$stem"); echo "run.sh: sweep $stem failed: $(tail -n 1 "$log")" >&2
  fi
}
for c in "${contexts[@]}"; do sweep budget "science-budget-c$c" --context "$c" --budget "$(budget_list "$c")"; done
# Most telling first: a run cut short by a time limit keeps the budget and policy files (a rerun resumes).
sweep policy science-policy "${policy_args[@]}"
sweep chunk science-chunk "${chunk_args[@]}"
sweep gamma science-gamma "${gamma_args[@]}"

if [[ $dry == 1 ]]; then
  echo "total: $total_runs runs, about $total_s s on the H200"
else
  echo "all sweeps: $(awk "BEGIN{print $(date +%s.%N) - $t_all}") s; files in $out"
fi
[[ ${#failed[@]} -eq 0 ]] || { echo "run.sh: failed sweeps: ${failed[*]}" >&2; exit 1; }
