#!/usr/bin/env bash
# Cross-builds linattn and runs its GoogleTest suite under qemu-user, once per Highway target the emulated CPU
# gives (docs/cross-platform.md). Installs what it needs from Debian 12's packages first (idempotent).
#   scripts/cross_test.sh aarch64 [RUN...]   runs: neon sve128 sve256 sve512 sve2-128 sve2-512 (default: all)
#   scripts/cross_test.sh riscv64            what Debian 12 allows for riscv64 (see the note it prints)
# Environment: LINATTN_CROSS_BUILD_DIR (default build-<arch>), LINATTN_CROSS_TOOLS=0 (skip the command),
# LINATTN_CROSS_SLOW=1 (also the slow-labelled tests, skipped by default: minutes each under emulation).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-}
[[ $# -gt 0 ]] && shift
jobs=$(nproc)
export OMP_WAIT_POLICY=passive  # test processes share few cores (scripts/test.sh)

# apt-get install of the packages not yet installed, with an index update only when something is missing.
install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "cross_test: installing ${missing[*]}" >&2
  local sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" \
    >/dev/null
}

# Debian multiarch: the arm64 packages install beside the amd64 ones once dpkg knows the architecture.
add_architecture() {
  dpkg --print-foreign-architectures | grep -qx "$1" && return 0
  local sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" dpkg --add-architecture "$1"
  "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
}

# One suite run: QEMU_CPU picks the emulated CPU for every binary ctest starts; the dispatch probe must report
# the target and lane count this run is for, or the run fails before the suite starts.
run_suite() {
  local name=$1 cpu=$2 target=$3 lanes=$4 build=$5 only_simd=$6 start=$SECONDS
  echo "== $name: QEMU_CPU=$cpu, expecting $target with $lanes fp32 lanes"
  export QEMU_CPU=$cpu LINATTN_EXPECT_TARGET=$target LINATTN_EXPECT_LANES=$lanes
  local probe status
  probe=$(qemu-aarch64 "$build/tests/simd_targets_test" --gtest_filter='SimdDispatch.*' 2>&1) && status=0 || status=$?
  grep -E "dispatch chose" <<<"$probe" || true
  if ((status)); then
    echo "$probe" >&2
    echo "cross_test: $name: the emulated CPU did not give $target with $lanes lanes" >&2
    return 1
  fi
  if [[ $only_simd == 1 ]]; then  # every operator against the oracle under each target this CPU runs
    qemu-aarch64 "$build/tests/simd_targets_test" >"$build/simd-$name.log" 2>&1 && status=0 || status=$?
    if ((status)); then cat "$build/simd-$name.log"; else grep -E "compiled and runnable|PASSED" "$build/simd-$name.log"; fi
    echo "== $name (simd_targets_test only): $((SECONDS - start)) s"
    unset QEMU_CPU LINATTN_EXPECT_TARGET LINATTN_EXPECT_LANES
    return "$status"
  fi
  local label=()
  [[ "${LINATTN_CROSS_SLOW:-0}" == 1 ]] || label=(-LE slow)
  local log="$build/ctest-$name.log"
  # layering: a host Python check, not a binary (the native suite runs it).
  /usr/bin/ctest --test-dir "$build" --output-on-failure -j "$jobs" "${label[@]}" -E '^layering$' >"$log" 2>&1 &&
    status=0 || status=$?
  if ((status)); then cat "$log"; else tail -n 3 "$log"; fi
  echo "== $name: $((SECONDS - start)) s"
  unset QEMU_CPU LINATTN_EXPECT_TARGET LINATTN_EXPECT_LANES
  return "$status"
}

aarch64() {
  add_architecture arm64
  # libgomp1:arm64: the cross toolchain's own libgomp lies in /usr/aarch64-linux-gnu/lib, where the arm64 loader
  # that qemu runs does not look; the multiarch one lies in /usr/lib/aarch64-linux-gnu beside the other libraries.
  install_packages g++-aarch64-linux-gnu qemu-user cmake ninja-build libhwy-dev:arm64 libgtest-dev:arm64 \
    libgmock-dev:arm64 zlib1g-dev:arm64 libopenblas-dev:arm64 libgomp1:arm64 libcli11-dev nlohmann-json3-dev python3
  local build=${LINATTN_CROSS_BUILD_DIR:-build-aarch64} tools=ON
  [[ "${LINATTN_CROSS_TOOLS:-1}" == 1 ]] || tools=OFF
  local start=$SECONDS run_arg targets=()
  # Only RUN:simd runs asked for: build the library and simd_targets_test alone.
  targets=(--target simd_targets_test)
  for run_arg in "$@"; do [[ $run_arg == *:simd ]] || targets=(); done
  (($#)) || targets=()
  /usr/bin/cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_WERROR=ON \
    -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DLINATTN_BUILD_TOOLS=$tools >/dev/null
  /usr/bin/cmake --build "$build" -j "$jobs" "${targets[@]}"
  echo "== aarch64 build: $((SECONDS - start)) s"
  [[ $tools == OFF ]] || QEMU_CPU=max qemu-aarch64 "$build/tools/linattn" --version
  # name, QEMU_CPU, the target hwy::TargetName must report, fp32 lanes. a64fx has SVE without SVE2 and vector
  # lengths 128, 256 and 512; max has SVE2. sve-default-vector-length is in bytes. At 256 bits Highway prefers
  # its SVE_256 target, at 128 with SVE2 its SVE2_128 (fixed-length code for those widths).
  local -A cpu=([neon]="max,sve=off" [sve128]="a64fx,sve-default-vector-length=16"
    [sve256]="a64fx,sve-default-vector-length=32" [sve512]="a64fx,sve-default-vector-length=64"
    [sve2-128]="max,sve-default-vector-length=16" [sve2-512]="max,sve-default-vector-length=64")
  local -A target=([neon]=NEON [sve128]=SVE [sve256]=SVE_256 [sve512]=SVE [sve2-128]=SVE2_128 [sve2-512]=SVE2)
  local -A lanes=([neon]=4 [sve128]=4 [sve256]=8 [sve512]=16 [sve2-128]=4 [sve2-512]=16)
  local runs=("$@")
  ((${#runs[@]})) || runs=(neon sve128 sve256 sve512 sve2-128 sve2-512)
  local run failed=()
  for run in "${runs[@]}"; do
    # RUN:simd runs simd_targets_test alone (every operator under each target the CPU runs), not the whole suite.
    local name=${run%:simd} only_simd=0
    [[ $name == "$run" ]] || only_simd=1
    [[ -n "${cpu[$name]:-}" ]] || { echo "cross_test: unknown run '$run', expected one of ${!cpu[*]}" >&2; exit 2; }
    run_suite "$name" "${cpu[$name]}" "${target[$name]}" "${lanes[$name]}" "$build" "$only_simd" || failed+=("$run")
  done
  if ((${#failed[@]})); then
    echo "cross_test: aarch64 failed under: ${failed[*]}" >&2
    exit 1
  fi
  echo "cross_test: aarch64 passed under: ${runs[*]}"
}

case "$arch" in
  aarch64) aarch64 "$@" ;;
  riscv64) source "$(dirname "$0")/cross/riscv64.sh" ;;
  *)
    echo "usage: scripts/cross_test.sh aarch64|riscv64 [RUN...] (got '${arch}')" >&2
    exit 2
    ;;
esac
