#!/usr/bin/env bash
# Instructions per decode token (docs/cross-platform.md): speed cannot be measured under emulation, so this counts
# the guest instructions that tests/programs/decode_steps executes, with a qemu TCG plugin of ours
# (scripts/cross/insn_count_plugin.c), for each aarch64 CPU of scripts/cross_test.sh and for x86-64 (qemu-x86_64
# -cpu max, whose TCG has AVX2 but no AVX-512, and valgrind's callgrind as a second count of the same binary).
# Two step counts per case; (count(S2) − count(S1)) / (S2 − S1) removes start-up, setup and the first dispatch.
#   scripts/insn_count.sh [AARCH64_BUILD [X86_BUILD]]   (default build-aarch64 and build; both need decode_steps)
set -euo pipefail
cd "$(dirname "$0")/.."
arm_build=${1:-build-aarch64}
x86_build=${2:-build}
s1=64 s2=320
plugin="$arm_build/insn_count.so"
gcc -shared -fPIC -O2 -Wall -Wextra -o "$plugin" scripts/cross/insn_count_plugin.c

# count QEMU CPU ARGS...: the instructions the plugin saw for one run.
count() {
  local qemu=$1 cpu=$2 log
  shift 2
  log=$(mktemp)
  QEMU_CPU=$cpu OMP_NUM_THREADS=1 "$qemu" -plugin "$plugin" -d plugin -D "$log" "$@" >/dev/null
  sed -n 's/^insns //p' "$log"
  rm -f "$log"
}

# per_token QEMU CPU BINARY OP [CONTEXT]: instructions per step.
per_token() {
  local qemu=$1 cpu=$2 bin=$3 op=$4 context=${5:-1024} a b
  a=$(count "$qemu" "$cpu" "$bin" "$op" "$s1" "$context")
  b=$(count "$qemu" "$cpu" "$bin" "$op" "$s2" "$context")
  echo $(((b - a) / (s2 - s1)))
}

printf '%-10s %-40s %12s %16s\n' run cpu recurrent softmax@1024
for run in "neon max,sve=off" "sve128 a64fx,sve-default-vector-length=16" "sve256 a64fx,sve-default-vector-length=32" \
  "sve512 a64fx,sve-default-vector-length=64" "sve2-128 max,sve-default-vector-length=16" \
  "sve2-512 max,sve-default-vector-length=64"; do
  read -r name cpu <<<"$run"
  printf '%-10s %-40s %12s %16s\n' "$name" "$cpu" "$(per_token qemu-aarch64 "$cpu" "$arm_build/tests/decode_steps" recurrent)" \
    "$(per_token qemu-aarch64 "$cpu" "$arm_build/tests/decode_steps" softmax)"
done

x86_bin="$x86_build/tests/decode_steps"
[[ -x "$x86_bin" ]] || { echo "insn_count: no $x86_bin (build the decode_steps target natively)" >&2; exit 1; }
printf '%-10s %-40s %12s %16s\n' x86-64 "qemu-x86_64 -cpu max (AVX2)" "$(per_token qemu-x86_64 max "$x86_bin" recurrent)" \
  "$(per_token qemu-x86_64 max "$x86_bin" softmax)"

# callgrind: total instructions (Ir) of the same x86 binary on this CPU; valgrind hides AVX-512 from cpuid, so
# Highway dispatches to AVX2 here too.
if command -v valgrind >/dev/null; then
  ir() {
    local out
    out=$(mktemp)
    OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out" "$x86_bin" "$@" >/dev/null 2>&1
    sed -n 's/^summary: //p' "$out"
    rm -f "$out"
  }
  cg() {
    local a b
    a=$(ir "$1" "$s1")
    b=$(ir "$1" "$s2")
    echo $(((b - a) / (s2 - s1)))
  }
  printf '%-10s %-40s %12s %16s\n' x86-64 "valgrind callgrind (AVX2)" "$(cg recurrent)" "$(cg softmax)"
fi
