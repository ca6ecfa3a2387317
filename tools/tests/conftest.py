"""Shared helpers for the `linattn` command's end-to-end tests.

The binary comes from $LINATTN_BIN (scripts/test.sh sets it); without it, build/tools/linattn.
"""
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def binary():
    path = os.environ.get("LINATTN_BIN") or str(REPO / "build" / "tools" / "linattn")
    if not os.access(path, os.X_OK):
        pytest.fail(f"linattn binary not found at {path}: build it and set LINATTN_BIN")
    return path


# The bounds a memory refusal (exit 3) may name, the tightest on the machine that runs it
# (linattn::available_memory, include/linattn/memory.hpp).
MEMORY_BOUND = r"MemAvailable|the memory cgroup's limit|RLIMIT_AS"
MPI_ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def mpi_bench_json(ranks, *args):
    """`mpirun -np ranks linattn bench ARGS --json` (oversubscribed): rank 0's one JSON object. Skips
    where mpirun is missing or the command was built without linattn_mpi."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    command = [mpirun, "-np", str(ranks), "--oversubscribe", binary(), "bench", *map(str, args), "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=MPI_ENV)
    if "built without MPI" in proc.stderr:
        pytest.skip("linattn built without linattn_mpi")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout  # rank 0 alone prints
    return json.loads(lines[0])


def run_cli(*args, timeout=120):
    """Runs `linattn ARGS`; returns the CompletedProcess (text stdout/stderr)."""
    return subprocess.run([binary(), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc, code):
    """The process exited with `code` (not a signal) and said why in one stderr line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("linattn: error: "), proc.stderr
    return lines[0]


def relative_error(got, want):
    """max|got - want| / max|want|, the suite's measure."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


@pytest.fixture
def cli():
    return run_cli
