"""`linattn bench --op mamba2|rwkv7` (issue 40): the operator table's rows for Mamba-2's SSD (the chunked
decayed operator with its groups of B and C) and RWKV-7's DPLR delta rule (token by token), their flop
counts (table/mamba2_row.cpp, table/rwkv7_row.cpp) and their refusals."""
import json

import pytest

from conftest import assert_one_line_error, run_cli

QUICK = ["--threads", 1, "--json", "--budget", 0, "--min-reps", 1]


def bench_json(*args):
    proc = run_cli("bench", *args, *QUICK)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def decayed_count(n, d, e, chunk=64, backward=False):
    """The decayed family's chunked count per (batch, head) (docs/cli.md)."""
    per_pair, per_token, per_chunk = (3 * d + 2 * e, 10, 2) if backward else (d + e, 4, 1)
    total = 0
    for t0 in range(0, n, chunk):
        c = min(chunk, n - t0)
        total += c * (c + 1) * per_pair + c * per_token * d * e + per_chunk * d * e
    return total


@pytest.mark.parametrize("groups", [None, 1, 2])
def test_mamba2_counts_the_chunked_algorithm(groups):
    """B 1, L 100 (chunks 64 + 36), H 4, N (--dim) 8, P (--value-dim) 6: the decayed count per head, plus the
    elementwise work (3P + 4 forward, 8P + 13 backward per token and head) and the group sums of dB and dC."""
    b, n, h, d, p = 1, 100, 4, 8, 6
    extra = ["--groups", groups] if groups else []
    fwd = bench_json("--op", "mamba2", "--batch", b, "--heads", h, "--seq", n, "--dim", d, "--value-dim", p, *extra)
    both = bench_json("--op", "mamba2", "--batch", b, "--heads", h, "--seq", n, "--dim", d, "--value-dim", p,
                      "--backward", *extra)
    g = groups or h
    assert fwd["op"] == "mamba2" and fwd["groups"] == g and fwd["causal"] is True
    forward = h * decayed_count(n, d, p) + n * h * (3 * p + 4)
    backward = h * decayed_count(n, d, p, backward=True) + n * h * (8 * p + 13) + n * 2 * (h - g) * d
    assert fwd["flops"] == pytest.approx(forward, rel=1e-12)
    assert both["flops"] == pytest.approx(forward + backward, rel=1e-12)


def test_rwkv7_counts_the_token_by_token_recurrence():
    """9·K·V a token and head forward, 35·K·V backward (two state sweeps and the reverse one)."""
    b, n, h, k, v = 2, 65, 3, 8, 6
    fwd = bench_json("--op", "rwkv7", "--batch", b, "--heads", h, "--seq", n, "--dim", k, "--value-dim", v)
    both = bench_json("--op", "rwkv7", "--batch", b, "--heads", h, "--seq", n, "--dim", k, "--value-dim", v,
                      "--backward")
    tokens = b * h * n * k * v
    assert fwd["op"] == "rwkv7" and fwd["groups"] is None
    assert fwd["flops"] == 9 * tokens
    assert both["flops"] == (9 + 35) * tokens
    assert fwd["seconds"] > 0 and both["seconds"] > 0


def test_text_output_names_the_op():
    proc = run_cli("bench", "--op", "rwkv7", "--batch", 1, "--heads", 1, "--seq", 16, "--dim", 4, "--threads", 1,
                   "--budget", 0, "--min-reps", 1)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rwkv7 B=1 H=1 N=16 D=4 E=4"), proc.stdout


@pytest.mark.parametrize("args,needle", [
    (["--op", "mamba2", "--heads", 6, "--groups", 4], "--groups is 4, expected a divisor of --heads = 6"),
    (["--op", "rwkv7", "--heads", 2, "--groups", 1], "--groups applies to --op mamba2 only: --op rwkv7"),
    (["--op", "gla", "--heads", 2, "--groups", 1], "--groups applies to --op mamba2 only: --op gla"),
    (["--op", "mamba2", "--heads", 2, "--groups", 0], "--groups"),
    (["--op", "mamba2", "--heads", 2, "--dtype", "bf16"], "--dtype bf16: --op mamba2 runs in f32 only"),
    (["--op", "rwkv7", "--heads", 2, "--dtype", "f16"], "--dtype f16: --op rwkv7 runs in f32 only"),
    (["--op", "rwkv7", "--heads", 2, "--features", 8], "--features applies to --op performer"),
    (["--op", "mamba2", "--heads", 2, "--causal"], "--causal applies to --op softmax only"),
])
def test_refusals_name_the_flag(args, needle):
    proc = run_cli("bench", "--batch", 1, "--seq", 8, "--dim", 4, *args)
    line = assert_one_line_error(proc, 2)
    assert needle in line, line


def test_run_refuses_the_recurrences_by_name(tmp_path):
    for op in ("mamba2", "rwkv7"):
        proc = run_cli("run", "--op", op, "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
                       tmp_path / "v.npy", "--out", tmp_path / "out.npy")
        line = assert_one_line_error(proc, 2)
        assert f"--op {op}: linattn run covers" in line and "mamba2 and rwkv7 are in bench" in line, line
