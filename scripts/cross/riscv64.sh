# scripts/cross_test.sh riscv64 (sourced by it): what Debian 12 allows for 64-bit RISC-V (docs/cross-platform.md).
# - RVV: neither compiler builds Debian 12's Highway 1.0.3 for the vector extension; the two probes below show the
#   errors on every run, so the note stays true (or tells when it no longer is).
# - Scalar: Debian 12 has no riscv64 port (no libhwy-dev:riscv64, libgtest-dev:riscv64, ...), so Highway, zlib and
#   OpenBLAS are built from Debian's source packages (apt-get source) and GoogleTest from libgtest-dev's
#   /usr/src/googletest, all into $build/deps; then the library and the suite, run under qemu-riscv64. GCC 12.2
#   gives Highway's SCALAR target (its EMU128 is off below GCC 12.3, detect_targets.h); there is no runtime dispatch
#   on RISC-V in Highway 1.0.3.
build=${LINATTN_CROSS_BUILD_DIR:-build-riscv64}
install_packages g++-riscv64-linux-gnu qemu-user clang-14 cmake ninja-build dpkg-dev make libgtest-dev libgmock-dev
mkdir -p "$build"
build=$(cd "$build" && pwd)
deps="$build/deps"
src="$build/src"
export LINATTN_RISCV64_DEPS="$deps"

probe_rvv() {
  local probe="$build/rvv_probe.cpp"
  cat >"$probe" <<'EOF'
#include "hwy/highway.h"
namespace hn = hwy::HWY_NAMESPACE;
float Sum(const float* x) { const hn::ScalableTag<float> d; return hn::GetLane(hn::SumOfLanes(d, hn::LoadU(d, x))); }
EOF
  local out
  echo "== RVV probe, riscv64-linux-gnu-g++ -march=rv64gcv (Highway 1.0.3 from /usr/include):"
  if out=$(riscv64-linux-gnu-g++ -std=c++20 -O2 -march=rv64gcv -c "$probe" -o /dev/null 2>&1); then
    echo "   compiles: RVV with GCC now works, update docs/cross-platform.md"
  else
    grep -m1 error <<<"$out"
  fi
  echo "== RVV probe, clang++-14 --target=riscv64-linux-gnu -march=rv64gcv:"
  if out=$(clang++-14 --target=riscv64-linux-gnu -march=rv64gcv -std=c++20 -O2 -c "$probe" -o /dev/null 2>&1); then
    echo "   compiles: RVV with clang-14 now works, update docs/cross-platform.md"
  else
    echo "   $(grep -c 'error:' <<<"$out") errors (clang stops at 20), the first:"
    grep -m1 -A3 "error: no matching function" <<<"$out" | grep -E "error|candidate" || grep -m1 error <<<"$out"
  fi
}

# Debian's source packages, fetched once (apt-get source needs a deb-src entry; one is added if none exists).
fetch_sources() {
  mkdir -p "$src"
  if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    local sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      "${sudo_cmd[@]}" tee /etc/apt/sources.list.d/linattn-deb-src.sources >/dev/null
    "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  fi
  (cd "$src" && for p in highway zlib openblas; do
    ls -d "$src"/"$p"-*/ >/dev/null 2>&1 || apt-get source -qq "$p" >/dev/null 2>&1
  done)
}

build_deps() {
  [[ -f "$deps/.done" ]] && return 0
  local tc="$PWD/cmake/toolchains/riscv64-linux-gnu.cmake" common
  common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$tc" -DCMAKE_INSTALL_PREFIX="$deps"
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON)
  /usr/bin/cmake -S "$(ls -d "$src"/highway-*/)" -B "$build/hwy" "${common[@]}" -DHWY_ENABLE_TESTS=OFF \
    -DHWY_ENABLE_EXAMPLES=OFF -DHWY_ENABLE_CONTRIB=OFF -DBUILD_TESTING=OFF >/dev/null
  /usr/bin/cmake --build "$build/hwy" -j "$jobs" --target install >/dev/null
  /usr/bin/cmake -S /usr/src/googletest -B "$build/gtest" "${common[@]}" >/dev/null
  /usr/bin/cmake --build "$build/gtest" -j "$jobs" --target install >/dev/null
  # zlib: its own configure (Debian's source drops win32/, which its CMakeLists.txt wants); static only, so the test
  # binaries need no guest library path.
  (cd "$(ls -d "$src"/zlib-*/)" && CHOST=riscv64-linux-gnu CC=riscv64-linux-gnu-gcc ./configure --static \
    --prefix="$deps" >/dev/null && make -s -j "$jobs" install >/dev/null)
  # OpenBLAS: the C interface only (no Fortran, no LAPACK), the generic RISC-V kernels, static. install gets the
  # same variables as the build, or it rebuilds everything for the variables it lacks (seen).
  local blas=(TARGET=RISCV64_GENERIC HOSTCC=gcc CC=riscv64-linux-gnu-gcc NOFORTRAN=1 NO_LAPACK=1 ONLY_CBLAS=1 NO_SHARED=1
    USE_OPENMP=0 NUM_THREADS=2)
  make -s -C "$(ls -d "$src"/openblas-*/)" -j "$jobs" "${blas[@]}" libs >/dev/null
  make -s -C "$(ls -d "$src"/openblas-*/)" "${blas[@]}" PREFIX="$deps" install >/dev/null
  touch "$deps/.done"
}

probe_rvv
start=$SECONDS
fetch_sources
build_deps
echo "== riscv64 dependencies: $((SECONDS - start)) s"
/usr/bin/cmake -S . -B "$build/linattn" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_WERROR=ON \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/riscv64-linux-gnu.cmake -DCMAKE_PREFIX_PATH="$deps" \
  -DLINATTN_BUILD_TOOLS=OFF >/dev/null
/usr/bin/cmake --build "$build/linattn" -j "$jobs"
echo "== riscv64 build: $((SECONDS - start)) s"
qemu-riscv64 -L /usr/riscv64-linux-gnu "$build/linattn/tests/simd_targets_test" --gtest_filter='SimdDispatch.*' |
  grep "dispatch chose"
label=(-LE slow)
[[ "${LINATTN_CROSS_SLOW:-0}" != 1 ]] || label=()
/usr/bin/ctest --test-dir "$build/linattn" --output-on-failure -j "$jobs" "${label[@]}" -E '^layering$'
echo "== riscv64 total: $((SECONDS - start)) s"
