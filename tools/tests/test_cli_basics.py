"""Exit codes, --help, bench's JSON schema, explain's numbers and the memory refusal."""
import json
import re

import pytest

from conftest import MEMORY_BOUND, assert_one_line_error, run_cli

SUBCOMMANDS = ["compare", "explain", "bench", "run", "accuracy", "info"]


def test_top_level_help_lists_every_subcommand():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name in SUBCOMMANDS:
        assert name in proc.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_has_help(name):
    proc = run_cli(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"linattn {name}" in proc.stdout
    assert "--" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],  # no subcommand
        ["frobnicate"],
        ["bench", "--op", "softmax", "--batch", "1", "--heads", "1", "--seq", "8"],  # --dim missing
        ["bench", "--op", "nope", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "4"],
        ["bench", "--op", "linear", "--batch", "0", "--heads", "1", "--seq", "8", "--dim", "4"],
        ["bench", "--op", "linear", "--batch", "1", "--heads", "1", "--seq", "eight", "--dim", "4"],
        ["bench", "--op", "linear", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "4", "--threads", "-1"],
        ["bench", "--op", "linear", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "4", "--frobnicate"],
        ["bench", "--op", "recurrent", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "4", "--backward"],
        ["bench", "--op", "linear", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "4", "--causal"],
        ["compare", "--methods", "softmax,bogus"],
        ["compare", "--min-seq", "512", "--max-seq", "64"],
        ["compare", "--seq", "0"],
        ["explain", "--dim", "-3"],
        ["accuracy", "--method", "reformer"],
        ["accuracy", "--method", "linformer", "--seq", "64", "--sizes", "16,128"],
        ["accuracy", "--input", "spiky"],
        ["run", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"],  # --q missing
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--feature-map", "tanh"],
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--layout", "nbhd"],
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--dq", "dq.npy"],
        ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--op", "recurrent", "--dout",
         "d.npy"],
    ],
)
def test_bad_flags_exit_2_with_one_line(args, tmp_path):
    proc = run_cli(*args)
    assert_one_line_error(proc, 2)


BENCH_KEYS = {
    "op": str, "batch": int, "heads": int, "seq": int, "dim": int, "value_dim": int, "threads": int,
    "backward": bool, "seconds": float, "gflops": float, "peak_bytes": int, "flops": float,
    "tokens_per_second": float, "repetitions": int,
}


@pytest.mark.parametrize(
    "op,backward", [("softmax", False), ("softmax", True), ("linear", True), ("causal", True), ("recurrent", False),
                    ("retention", True), ("lightning", False), ("simple_gla", True), ("gla", False), ("gla", True),
                    ("delta_rule", True), ("gated_delta_rule", False), ("kda", True)]
)
def test_bench_json_schema(op, backward):
    args = ["bench", "--op", op, "--batch", 2, "--heads", 3, "--seq", 65, "--dim", 16, "--value-dim", 24,
            "--threads", 1, "--json", "--budget", 0, "--min-reps", 2]
    if backward:
        args.append("--backward")
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1
    j = json.loads(proc.stdout)
    for key, kind in BENCH_KEYS.items():
        assert key in j, key
        assert isinstance(j[key], kind) and not (kind is int and isinstance(j[key], bool)), (key, j[key])
    assert (j["op"], j["batch"], j["heads"], j["seq"], j["dim"], j["value_dim"]) == (op, 2, 3, 65, 16, 24)
    assert j["threads"] == 1 and j["backward"] == backward
    assert j["seconds"] > 0 and j["repetitions"] >= 2
    assert j["gflops"] == pytest.approx(j["flops"] / j["seconds"] * 1e-9, rel=1e-9)
    assert j["tokens_per_second"] == pytest.approx(2 * 65 / j["seconds"], rel=1e-9)
    # Inputs alone are 2·65·3·(16+16+24) floats; the peak counts at least those.
    assert j["peak_bytes"] >= 4 * 2 * 65 * 3 * (16 + 16 + 24)


def test_bench_flop_count_is_the_documented_one():
    j = json.loads(run_cli("bench", "--op", "softmax", "--batch", 1, "--heads", 2, "--seq", 32, "--dim", 8,
                           "--value-dim", 4, "--json", "--budget", 0, "--min-reps", 1).stdout)
    assert j["flops"] == 2 * 1 * 2 * 32 * 32 * (8 + 4)
    j = json.loads(run_cli("bench", "--op", "linear", "--batch", 1, "--heads", 2, "--seq", 32, "--dim", 8,
                           "--value-dim", 4, "--json", "--budget", 0, "--min-reps", 1, "--backward").stdout)
    # The operator table's count (docs/cli.md), per (batch, head) with N = 32, M = D = 8, E = 4:
    # forward N(2ME + M) + N(2ME + 2M + E), backward N(6ME + 2M) + N(4ME + 4M): 10·N·M·E leading.
    n, m, e = 32, 8, 4
    forward = n * (2 * m * e + m) + n * (2 * m * e + 2 * m + e)
    backward = n * (6 * m * e + 2 * m) + n * (4 * m * e + 4 * m)
    assert j["flops"] == 2 * (forward + backward)


def test_bench_decayed_flop_count_is_the_chunked_one():
    """The decayed family's count (docs/cli.md): per chunk of c tokens (chunk 64, so one chunk of 100 = 64 + 36),
    forward c(c+1)(D+E) + 4cDE + DE, backward c(c+1)(3D+2E) + 10cDE + 2DE."""
    d, e = 8, 4
    forward = sum(c * (c + 1) * (d + e) + 4 * c * d * e + d * e for c in (64, 36))
    backward = sum(c * (c + 1) * (3 * d + 2 * e) + 10 * c * d * e + 2 * d * e for c in (64, 36))
    for op in ("retention", "simple_gla", "gla"):
        j = json.loads(run_cli("bench", "--op", op, "--batch", 1, "--heads", 2, "--seq", 100, "--dim", d,
                               "--value-dim", e, "--json", "--budget", 0, "--min-reps", 1, "--backward").stdout)
        assert j["op"] == op and j["causal"] is True
        assert j["flops"] == 2 * (forward + backward)


def test_bench_delta_flop_count_is_the_chunked_one():
    """The delta rule's count (table/delta_rows.cpp): per chunk of c tokens the load
    c(c-1)D + c(c+1)D + (c^3 - c)/3 + c(c+1)(D+E), forward load + 6cDE + c(c+1)E (+ DE gated)."""
    d, e = 8, 4

    def load(c):
        return c * (c - 1) * d + c * (c + 1) * d + (c ** 3 - c) / 3 + c * (c + 1) * (d + e)

    for op, gated in (("delta_rule", 0), ("gated_delta_rule", 1), ("kda", 1)):
        forward = sum(load(c) + 6 * c * d * e + c * (c + 1) * e + gated * d * e for c in (64, 36))
        j = json.loads(run_cli("bench", "--op", op, "--batch", 1, "--heads", 2, "--seq", 100, "--dim", d,
                               "--value-dim", e, "--json", "--budget", 0, "--min-reps", 1).stdout)
        assert j["op"] == op and j["causal"] is True
        assert j["flops"] == pytest.approx(2 * forward, rel=1e-12)


def test_run_refuses_the_decayed_family(tmp_path):
    proc = run_cli("run", "--op", "gla", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v",
                   tmp_path / "v.npy", "--out", tmp_path / "out.npy")
    assert_one_line_error(proc, 2)
    assert "bench and compare" in proc.stderr


def test_bench_text_output():
    proc = run_cli("bench", "--op", "linear", "--batch", 1, "--heads", 1, "--seq", 16, "--dim", 4, "--budget", 0)
    assert proc.returncode == 0, proc.stderr
    assert "median" in proc.stdout and "GFLOP/s" in proc.stdout and "peak" in proc.stdout


def test_oversized_bench_is_refused_up_front():
    proc = run_cli("bench", "--op", "softmax", "--batch", 4096, "--heads", 64, "--seq", 1 << 24, "--dim", 128)
    line = assert_one_line_error(proc, 3)
    # The bound named is whichever is tightest here: MemAvailable, the memory cgroup or RLIMIT_AS.
    assert "needs about" in line and re.search(MEMORY_BOUND, line) and "PiB" in line


def test_oversized_compare_is_refused_before_writing(tmp_path):
    out = tmp_path / "results"
    proc = run_cli("compare", "--batch", 100000, "--heads", 64, "--seq", "64,1048576", "--out", out)
    assert_one_line_error(proc, 3)
    assert not out.exists()


def test_explain_prints_real_shapes_flops_and_memory():
    proc = run_cli("explain", "--batch", 2, "--heads", 3, "--seq", 100, "--dim", 16, "--value-dim", 8)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "[2, 3, 100, 100]" in text  # the scores
    assert "[2, 3, 16, 8]" in text  # the state φ(K)ᵀV
    assert "234.4 KiB" in text  # 2·3·100·100 floats
    # scores: 2·B·H·N²·D + B·H·N² = 1.98 M; attn V: 2·B·H·N²·E = 960 k; φ(K)ᵀV: 2·B·H·N·M·E = 154 k
    assert "1.98 M" in text and "960 k" in text and "154 k" in text


def test_accuracy_tables(tmp_path):
    proc = run_cli("accuracy", "--method", "linformer", "--seq", 64, "--sizes", "8,64", "--trials", 1, "--dim", 16,
                   "--value-dim", 8, "--input", "peaked", "--out", tmp_path / "a", "--no-plot")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): [float(x) for x in line.split("|")[2:4]]
            for line in proc.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()}
    assert set(rows) == {"8", "64"}
    assert rows["64"][0] == 0  # mean pooling over P = N segments is the identity: exactly softmax
    assert rows["8"][0] > 0 and rows["8"][1] > 0
    proc = run_cli("accuracy", "--seq", 64, "--sizes", "16,32", "--trials", 1, "--dim", 16, "--out", tmp_path / "b",
                   "--no-plot")
    assert proc.returncode == 0, proc.stderr
    assert "FAVOR+ orthogonal" in proc.stdout and "| 32 |" in proc.stdout


def test_accuracy_writes_curves_for_both_inputs_and_a_plot(tmp_path):
    out = tmp_path / "acc"
    proc = run_cli("accuracy", "--seq", 64, "--sizes", "16,64", "--trials", 1, "--dim", 16, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "random inputs" in proc.stdout and "peaked inputs" in proc.stdout
    lines = (out / "accuracy.csv").read_text().splitlines()
    assert lines[0] == "method,variant,input,size,mean_error,max_error"
    rows = [line.split(",") for line in lines[1:]]
    # 2 variants × 2 inputs × 2 sizes, every error finite and positive
    assert len(rows) == 8
    assert {(r[2], r[3]) for r in rows} == {("random", "16"), ("random", "64"), ("peaked", "16"), ("peaked", "64")}
    assert all(0 < float(r[4]) < float("inf") for r in rows)
    png = (out / "accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "accuracy.png.tmp").exists()


def test_favor_is_an_alias_of_performer():
    """FAVOR+ is "favor" in the library and the table; the command takes both names and prints "performer"."""
    runs = [json.loads(run_cli("bench", "--op", op, "--batch", 1, "--heads", 2, "--seq", 16, "--dim", 8,
                               "--features", 12, "--json", "--budget", 0, "--min-reps", 1, "--backward").stdout)
            for op in ("favor", "performer")]
    assert runs[0]["op"] == runs[1]["op"] == "performer"
    assert runs[0]["flops"] == runs[1]["flops"] > 0 and runs[0]["feature_dim"] == 12
