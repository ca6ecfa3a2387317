#!/usr/bin/env bash
# Installs linattn's build and test dependencies from Debian 12's packages (idempotent).
set -euo pipefail
packages=(build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev libomp-dev
          libcli11-dev zlib1g-dev nlohmann-json3-dev libopenblas-dev pybind11-dev python3-dev python3-venv python3-numpy
          python3-torch python3-pytest gnuplot-nox clang-14 libclang-rt-14-dev
          libopenmpi-dev openmpi-bin)
# linattn.distributed's tests: mpi4py built against Debian's Open MPI (python/tests/test_distributed.py).
packages+=(python3-mpi4py)
# scripts/applications: the speech task's voices (espeak-ng, flite) and resampling (sox); GNU time measures the
# peak memory of the LRA table's runs (reproduce_applications.sh, vit_scaling.py).
packages+=(espeak-ng flite sox time)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
