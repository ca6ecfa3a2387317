#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: dependencies, a warnings-as-errors build,
# the GoogleTest suite under CTest, the same suite under AddressSanitizer + UBSan, and the Python
# cross-checks against PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time, so that a CI log shows where its 30 minutes go.
stage_start=$SECONDS
stage() {
  echo "test.sh: $1 took $((SECONDS - stage_start)) s (total $SECONDS s)"
  stage_start=$SECONDS
}
./scripts/setup.sh
jobs=$(nproc)
# The Python module is built for, and tested in, a venv with PyTorch 2.13 (CPU) from pip: the Release
# build below is configured with the venv's interpreter, so build/python imports there too.
venv="$PWD/build/venv"
[[ -x "$venv/bin/python" ]] || { mkdir -p build && /usr/bin/python3 -m venv "$venv"; }
# triton and flash-linear-attention (with fla-core and einops): python/tests/test_fla_integration.py runs
# fla's operators and layers on the CPU through linattn (Triton: a 286 MB download). onnx: its reference
# LinearAttention (opset 27) checks the query groups in python/tests/test_query_groups.py.
"$venv/bin/pip" install -q torch==2.13.0 numpy pytest scikit-build-core transformers==5.25.0 triton==3.9.0 \
  flash-linear-attention==0.6.0 scikit-learn==1.9.1 onnx==1.23.2
stage "setup and the venv"
python="$venv/bin/python"
# Test processes run side by side on few cores: OpenMP threads that spin while they wait would steal
# the cores the other process needs (seen: 0.1 s tests taking 50 s). Waiting threads sleep instead.
export OMP_WAIT_POLICY=passive

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_WERROR=ON -DLINATTN_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=$python -DPYTHON_EXECUTABLE=$python >/dev/null
cmake --build build -j "$jobs"
stage "the Release build"
ctest --test-dir build --output-on-failure -j "$jobs"
stage "the Release suite"

# The install rules: a user's CMake project finds the installed package and runs an operator.
rm -rf build/install-check build/consumer
cmake --install build --prefix "$PWD/build/install-check" >/dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install-check" >/dev/null
cmake --build build/consumer
./build/consumer/consumer
# And find_package(linattn COMPONENTS mpi): the installed linattn::mpi over two ranks, against the
# single-process operator (examples/consumer/mpi_main.cpp), where the build has LINATTN_MPI.
if [[ -x build/consumer/consumer_mpi ]]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    mpiexec -n 2 --oversubscribe ./build/consumer/consumer_mpi
fi
stage "the install and the consumers"

# The sanitizer build: clang -O1, and Highway's one static target for this machine (-march=native,
# HWY_COMPILE_ONLY_STATIC) instead of every x86 target: the dispatch runs that target anyway, and the
# Release suite above already runs every compiled target (tests/simd_targets_test.cpp). Compiling five
# targets under gcc -O2 + ASan took 878 s of CI's 1588 s; this build takes a fraction of it.
if [[ "${LINATTN_SKIP_SANITIZERS:-0}" != 1 ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
    "-DCMAKE_CXX_FLAGS=-O1 -gline-tables-only -DHWY_COMPILE_ONLY_STATIC=1" -DCMAKE_C_FLAGS=-O1 -DLINATTN_NATIVE=ON \
    -DLINATTN_WERROR=ON -DLINATTN_SANITIZERS=ON -DLINATTN_BUILD_TOOLS=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow
  stage "the sanitizer build and suite"
fi

# libFuzzer on every reader of untrusted files, a bounded time each, under ASan + UBSan (docs/fuzzing.md).
# 15 s each in CI (the script's default is 45 s): CI's 30 minutes now also hold the MPI tests (twice:
# Release and sanitizers) and the aarch64 step; a fresh-clone run took 1790 s with 25 s each.
if [[ "${LINATTN_SKIP_FUZZ:-0}" != 1 ]]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} ./scripts/fuzz.sh
  stage "the fuzzers"
fi

# The aarch64 cross build under qemu-user (docs/cross-platform.md), in its own build dir: simd_targets_test
# (every operator, forward and backward, against the fp64 oracle under each target the emulated CPU runs) under
# SVE2 at 128 bits (which also runs SVE and NEON), a NEON-only CPU, SVE_256 and SVE2 at 512 bits. Only the
# library and that test are built. The whole suite under SVE2-128 (its build 164 s, its run 160 s) took CI to
# 1885 s, past its 30 minutes; scripts/cross_test.sh aarch64 runs it (all six CPUs), by hand.
if [[ "${LINATTN_SKIP_CROSS:-0}" != 1 ]]; then
  LINATTN_CROSS_TOOLS=0 ./scripts/cross_test.sh aarch64 sve2-128:simd neon:simd sve256:simd sve2-512:simd
  stage "the aarch64 step"
fi

# `pip install .` (pyproject.toml, scikit-build-core) into the venv, through a wheel. It reuses the
# Release build above (build-dir=build, the same options, the same cmake and ninja), so nothing is
# compiled a third time: CMake re-runs and the python component is installed (about 10 s).
rm -rf build/wheel
tools_path="$(dirname "$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' build/CMakeCache.txt)")"
tools_path+=":$(dirname "$(sed -n 's/^CMAKE_MAKE_PROGRAM:[A-Z]*=//p' build/CMakeCache.txt)")"
PATH="$tools_path:$PATH" "$venv/bin/pip" wheel -q --no-build-isolation --no-deps -w build/wheel \
  --config-settings=build-dir=build --config-settings=cmake.define.LINATTN_BUILD_TESTS=ON \
  --config-settings=cmake.define.LINATTN_BUILD_TOOLS=ON --config-settings=cmake.define.LINATTN_WERROR=ON .
"$venv/bin/pip" install -q --force-reinstall --no-deps build/wheel/linattn-*.whl
stage "the wheel"

# Python module cross-checks against PyTorch, on the installed package, and the command's end-to-end
# tests (with the fault test, tools/tests/test_faults.py: kills, a full disk and a read-only folder
# during writes).
LINATTN_BIN="$PWD/build/tools/linattn" LINATTN_BUILD_DIR="$PWD/build" $python -m pytest -q python/tests tools/tests
stage "pytest"
