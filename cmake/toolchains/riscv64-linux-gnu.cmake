# Cross build for 64-bit RISC-V Linux with Debian's cross toolchain (g++-riscv64-linux-gnu). Debian 12 has no
# riscv64 port, so the dependencies are built from Debian's source packages into LINATTN_RISCV64_DEPS by
# scripts/cross/riscv64.sh, and qemu-riscv64 finds the cross toolchain's libc under /usr/riscv64-linux-gnu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/riscv64-linux-gnu $ENV{LINATTN_RISCV64_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(LINATTN_QEMU_RISCV64 qemu-riscv64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${LINATTN_QEMU_RISCV64} -L /usr/riscv64-linux-gnu)
set(CMAKE_C_FLAGS_INIT "-Wno-psabi")
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
