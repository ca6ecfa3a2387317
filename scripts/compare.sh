#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install dependencies, build, and run the seed's
# comparison of exact and linear attention (`linattn compare`) on this machine. Extra arguments go to
# `linattn compare` (see `build/tools/linattn compare --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=/usr/bin/python3 -DPYTHON_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build build -j "$(nproc)" --target linattn_cli
exec ./build/tools/linattn compare --out out/compare "$@"
