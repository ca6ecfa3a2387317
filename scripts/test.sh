#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: dependencies, a warnings-as-errors build,
# the GoogleTest suite under CTest, the same suite under AddressSanitizer + UBSan, and the Python
# cross-checks against PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)
python=/usr/bin/python3
# Test processes run side by side on few cores: OpenMP threads that spin while they wait would steal
# the cores the other process needs (seen: 0.1 s tests taking 50 s). Waiting threads sleep instead.
export OMP_WAIT_POLICY=passive

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_WERROR=ON -DLINATTN_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=$python -DPYTHON_EXECUTABLE=$python >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

# The install rules: a user's CMake project finds the installed package and runs an operator.
rm -rf build/install-check build/consumer
cmake --install build --prefix "$PWD/build/install-check" >/dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install-check" >/dev/null
cmake --build build/consumer
./build/consumer/consumer

if [[ "${LINATTN_SKIP_SANITIZERS:-0}" != 1 ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINATTN_WERROR=ON -DLINATTN_SANITIZERS=ON \
    -DLINATTN_BUILD_TOOLS=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow
fi

# libFuzzer on every reader of untrusted files, a bounded time each, under ASan + UBSan (docs/fuzzing.md).
if [[ "${LINATTN_SKIP_FUZZ:-0}" != 1 ]]; then
  ./scripts/fuzz.sh
fi

# Python module cross-checks against PyTorch, and the command's end-to-end tests (with the fault
# test, tools/tests/test_faults.py: kills, a full disk and a read-only folder during writes).
PYTHONPATH="$PWD/build/python" LINATTN_BIN="$PWD/build/tools/linattn" $python -m pytest -q python/tests tools/tests
