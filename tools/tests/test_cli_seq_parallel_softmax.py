"""`linattn bench --op softmax --seq-parallel` (ring attention, tools/commands/bench_ring.cpp) under
mpirun: the JSON keys of issue 16 and the bytes each rank sends per call. Skipped where the command
was built without linattn_mpi or mpirun is missing."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import binary

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
B, H, D = 1, 2, 16


def bench(ranks, seq, *extra):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    args = [mpirun, "-np", str(ranks), "--oversubscribe", binary(), "bench", "--op", "softmax", "--seq-parallel",
            "--batch", str(B), "--heads", str(H), "--seq", str(seq), "--dim", str(D), "--budget", "0",
            "--min-reps", "1", "--json", *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=ENV)
    if "built without MPI" in proc.stderr:
        pytest.skip("linattn built without linattn_mpi")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout  # rank 0 alone prints
    return json.loads(lines[0])


def test_keys_and_bytes_per_shard():
    small, large = bench(2, 64, "--causal"), bench(2, 128, "--causal")
    for key in ("seconds", "gflops", "ranks", "compute_seconds", "comm_seconds", "bytes_sent"):
        assert key in small, small
    assert small["ranks"] == 2 and small["layout"] == "balanced" and small["causal"]
    # The forward sends P − 1 k/v shards of N/P rows, 4·B·H·(D + E) bytes a row: 32 more rows each.
    assert large["bytes_sent"] - small["bytes_sent"] == 4 * B * H * (D + D) * (128 - 64) // 2


def test_backward_sends_the_gradients_too():
    forward, both = bench(2, 64), bench(2, 64, "--backward")
    assert forward["layout"] == "contiguous" and not forward["causal"]
    shard = 4 * B * H * 2 * D * 32
    # Forward + backward: 1 + 1 k/v shards and 2 dk/dv shards, and one more agreement record.
    agreement = forward["bytes_sent"] - shard
    assert both["bytes_sent"] == 4 * shard + 2 * agreement
