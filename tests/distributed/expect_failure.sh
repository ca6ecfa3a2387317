#!/usr/bin/env bash
# expect_failure.sh SECONDS EXPECTED COMMAND...: passes when COMMAND exits non-zero within SECONDS
# (a hang is a failure: timeout's 124) and its output contains EXPECTED.
set -u
seconds=$1 expected=$2
shift 2
start=$SECONDS
output=$(timeout --kill-after=5 "$seconds" "$@" 2>&1)
rc=$?
elapsed=$((SECONDS - start))
printf '%s\n' "$output" | tail -n 20
if ((rc == 0)); then echo "expect_failure: the command succeeded, expected it to fail" >&2; exit 1; fi
# mpiexec itself exits 137 when a rank dies of SIGKILL: the clock, not the code, tells a hang apart.
if ((elapsed >= seconds)); then echo "expect_failure: the command hung (killed after ${seconds} s)" >&2; exit 1; fi
if ! grep -qF -- "$expected" <<<"$output"; then
  echo "expect_failure: exit $rc, but the output does not name '$expected'" >&2
  exit 1
fi
echo "expect_failure: exit $rc after ${elapsed} s (limit ${seconds} s), output names '$expected'"
