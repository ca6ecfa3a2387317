"""`linattn bench --op causal|linear --seq-parallel --shards` under mpirun: how the sequence is cut
(tools/commands/bench_seq_parallel.cpp, distributed::causal_shard_lengths). Skipped where the command was
built without linattn_mpi or mpirun is missing."""
import subprocess

import pytest

from conftest import binary, mpi_bench_json

def bench(op, ranks, seq, *extra):
    return mpi_bench_json(ranks, "--op", op, "--seq-parallel", "--batch", 1, "--heads", 2, "--seq", seq, "--dim", 16,
                          "--budget", 0, "--min-reps", 1, *extra)


def test_the_causal_forward_gives_the_last_rank_more_tokens():
    got = bench("causal", 3, 1000)
    shards = got["shards"]
    assert sum(shards) == 1000 and len(shards) == 3, got
    assert shards[0] == shards[1] < shards[2], shards
    # kCausalSumsPerPass = 0.35, kCausalFinishPerPass = 0.55: n0 = ⌊1000 / (3 + 0.35 − 0.55·0.35)⌋.
    assert shards[0] == int(1000 / (3 + 0.35 - 0.55 * 0.35)), shards


@pytest.mark.parametrize("op, extra", [("causal", ["--shards", "even"]), ("causal", ["--backward"]),
                                       ("linear", [])])
def test_even_shards_otherwise(op, extra):
    assert bench(op, 2, 1001, *extra)["shards"] == [500, 501]


def test_balanced_on_request():
    shards = bench("linear", 2, 1000, "--shards", "balanced")["shards"]
    assert sum(shards) == 1000 and shards[0] < shards[1], shards


@pytest.mark.parametrize("args", [["--op", "causal", "--shards", "even"],
                                  ["--op", "causal", "--shards", "sideways", "--seq-parallel"]])
def test_bad_shards_are_usage_errors(args):
    proc = subprocess.run([binary(), "bench", "--batch", "1", "--heads", "1", "--seq", "64", "--dim", "16", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "--shards" in proc.stderr, proc.stderr
