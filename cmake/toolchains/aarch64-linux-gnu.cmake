# Cross build for 64-bit Arm Linux with Debian's cross toolchain (g++-aarch64-linux-gnu) against the arm64
# packages of the dependencies (dpkg --add-architecture arm64; scripts/cross_test.sh installs both). CTest runs
# every test binary under qemu-user; the emulated CPU (NEON, SVE, SVE2, the vector length) comes from QEMU_CPU at
# run time, so one build serves every Highway target (docs/cross-platform.md).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: the arm64 libraries and their CMake packages live in /usr/lib/aarch64-linux-gnu, the
# arch-independent headers in /usr/include; this makes find_package/find_library look there, not at the x86 ones.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
find_program(LINATTN_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${LINATTN_QEMU_AARCH64})
# GCC notes on every std::pair<double, double> argument that its passing changed in GCC 10.1: nothing here links
# against code built by an older GCC, so the note is noise.
set(CMAKE_C_FLAGS_INIT "-Wno-psabi")
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
