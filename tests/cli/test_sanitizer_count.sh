#!/usr/bin/env bash
# How experiments/h200/sanitize.sh counts a compute-sanitizer log (--count TOOL LOG: errors of ours, vendor
# reports, NCCL probe reports, warnings, leaks, untracked launches), on logs from run 5
# (results/h100/session-2026-12-07d/sanitize-run5): launches the tool could not track for lack of its own memory
# are neither errors nor nothing, and a leak the print limit cut still counts.
#   tests/cli/test_sanitizer_count.sh TRIFORCE_BIN FIXTURES
set -uo pipefail
fix=$2/sanitizer
script=$(cd "$(dirname "$0")/../.." && pwd)/experiments/h200/sanitize.sh
fail=0
expect() {  # TOOL LOG WANT
  local got
  got=$(bash "$script" --count "$1" "$fix/$2")
  if [[ $got != "$3" ]]; then echo "FAIL: $2 ($1): got '$got', want '$3'"; fail=1; else echo "ok: $2 -> $got"; fi
}
expect synccheck untracked_only.log "0 0 0 0 0 3"
expect memcheck untracked_and_unprinted_leak.log "1 0 0 0 1 2"
expect memcheck leak_printed.log "1 0 0 0 1 0"
exit $fail
