"""`linattn bench --op softmax --seq-parallel` (ring attention, tools/commands/bench_ring.cpp) under
mpirun: the JSON keys of issue 16 and the bytes each rank sends per call. Skipped where the command
was built without linattn_mpi or mpirun is missing."""
from conftest import mpi_bench_json

B, H, D = 1, 2, 16


def bench(ranks, seq, *extra):
    return mpi_bench_json(ranks, "--op", "softmax", "--seq-parallel", "--batch", B, "--heads", H, "--seq", seq,
                          "--dim", D, "--budget", 0, "--min-reps", 1, *extra)


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
