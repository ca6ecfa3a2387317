#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (-fsanitize=fuzzer,address,undefined; every library
# they call is instrumented too) and runs each for a bounded time from its seed corpus in
# fuzz/corpus/<target>/. Exit 1, naming the target and the input that tripped it, on any crash,
# sanitizer report, leak, timeout or out-of-memory. docs/fuzzing.md says what each target covers.
#
#   scripts/fuzz.sh                      # every target, 45 s each, $(nproc) at a time
#   FUZZ_SECONDS=300 scripts/fuzz.sh model_crc_fuzzer state_crc_fuzzer
#
# Settings (environment): FUZZ_SECONDS per target (45), FUZZ_JOBS targets at once (nproc),
# FUZZ_CXX / FUZZ_CC the compilers (clang++-14 / clang-14), CMAKE the cmake to run (cmake),
# FUZZ_BUILD the build folder (build-fuzz). The seed corpus is never written to: new inputs go to
# $FUZZ_BUILD/corpus/<target>/, findings to $FUZZ_BUILD/findings/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-45}
jobs=${FUZZ_JOBS:-$(nproc)}
cxx=${FUZZ_CXX:-clang++-14}
cc=${FUZZ_CC:-clang-14}
cmake=${CMAKE:-cmake}
build=${FUZZ_BUILD:-build-fuzz}
all=(npy_fuzzer state_fuzzer state_crc_fuzzer model_fuzzer model_crc_fuzzer checkpoint_crc_fuzzer dataset_crc_fuzzer)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")

command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2; exit 1; }
# -O1 and no NDEBUG: asserts stay on, and the build is quick (CI's budget).
"$cmake" -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS="-O1" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DLINATTN_FUZZ=ON \
  -DLINATTN_WERROR=ON -DLINATTN_BUILD_TESTS=OFF -DLINATTN_BUILD_TOOLS=OFF >/dev/null
"$cmake" --build "$build" -j "$(nproc)" --target "${targets[@]}"

# The readers are single-threaded; no OpenMP pool to spin up per input.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local t=$1 work="$build/corpus/$1" found="$build/findings/$1"
  mkdir -p "$work" "$found"
  # -timeout: one input taking 10 s is a finding (an unbounded loop); -rss_limit_mb and
  # -malloc_limit_mb: an allocation over 1 GB is one (a size field believed before it is checked).
  "$build/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$found/" "$work" "fuzz/corpus/$t" >"$build/$t.log" 2>&1
}

failed=()
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  rm -f "$build/$t.rc"
  (run_one "$t" && echo 0 >"$build/$t.rc" || echo $? >"$build/$t.rc") &
done
wait
for t in "${targets[@]}"; do
  if [[ $(cat "$build/$t.rc" 2>/dev/null) == 0 ]]; then
    echo "fuzz: $t: $(grep -m1 -o 'number_of_executed_units: *[0-9]*' "$build/$t.log" | grep -o '[0-9]*$') inputs in ${seconds} s, no finding"
  else
    failed+=("$t")
    echo "fuzz: $t FAILED; log $build/$t.log, input in $build/findings/$t/:" >&2
    tail -n 40 "$build/$t.log" >&2
  fi
done
((${#failed[@]} == 0)) || { echo "fuzz: findings in ${failed[*]}" >&2; exit 1; }
