#!/usr/bin/env bash
# Fuzzes every parser target of tests/fuzz for SECONDS each (default 20) with
# libFuzzer, ASan and UBSan, starting from its seed corpus tests/fuzz/<target>/.
#   tests/fuzz/run_fuzzers.sh [SECONDS] [BUILD_DIR]     (BUILD_DIR default: build-fuzz)
# FUZZ_RUNS=N stops each target after N inputs (SECONDS stays the cap) and FUZZ_SEED
# fixes libFuzzer's seed (default 1): CI uses both, so its run is the one reproduced here.
# Prints each target's execution count. A crash, sanitizer report, uncaught
# exception, leak, timeout (> 10 s) or out-of-memory (> 2 GB) fails the script;
# the input that caused it is left in BUILD_DIR/crashes/<target>/ (add it to
# tests/fuzz/<target>/ as crash_<what> once the parser is fixed). New inputs
# the fuzzer finds go to BUILD_DIR/corpus/<target>/, never into the source tree.
# Exits 0 with a note when clang++ cannot link -fsanitize=fuzzer (Debian 12:
# apt-get install clang libclang-rt-14-dev).
set -uo pipefail
secs=${1:-20}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build-fuzz}
cxx=${FUZZ_CXX:-clang++}
cc=${FUZZ_CC:-clang}
targets=(safetensors gguf hf_config sweep_ini tokenizer_json bpe_merges npy token_file)

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "run_fuzzers: $cxx cannot link -fsanitize=fuzzer (install clang and libclang-rt-14-dev); skipped"
  exit 0
fi

t0=$(date +%s)
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
  -DTRIFORCE_FUZZ=ON -DTRIFORCE_CUDA=OFF -DTRIFORCE_BENCH=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >"$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log"; exit 1; }
echo "run_fuzzers: built ${#targets[@]} targets in $(($(date +%s) - t0)) s; fuzzing each for $secs s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/crashes/$t"
  log="$build/crashes/$t.log"
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -seed="${FUZZ_SEED:-1}" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$t/" "$build/corpus/$t" "$root/tests/fuzz/$t" >"$log" 2>&1
  rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  printf 'run_fuzzers: %-15s %10s executions (%s)%s\n' "$t" "${execs:-?}" "${cov:-cov: ?}" \
    "$([[ $rc -ne 0 ]] && echo "  FAILED (exit $rc)")"
  if [[ $rc -ne 0 ]]; then
    failed+=("$t")
    grep -E 'ERROR|runtime error|uncaught|Test unit written|deadly|timeout|out-of-memory' "$log" | head -8
    ls "$build/crashes/$t"
  fi
done
echo "run_fuzzers: $(($(date +%s) - t0)) s in all"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run_fuzzers: findings in ${failed[*]}: inputs in $build/crashes/, logs $build/crashes/<target>.log"
  exit 1
fi
