"""`linattn compare` with tiny flags: the tables, the JSON, the CSV, the plot and the progress bar."""
import csv
import json
import os
import pty
import subprocess

import pytest

from conftest import binary, run_cli

# One thread: on a shared machine, 2-thread OpenMP regions can stall for tens of ms each.
TINY = ["--seq", "32,64,96", "--heads", 1, "--dim", 8, "--budget", 0, "--min-reps", 1, "--threads", 1]
METHODS = ["softmax", "linear", "performer", "linformer", "gla", "gated_deltanet"]  # the default: one of each family
CAUSAL = {"causal", "gla", "gated_deltanet"}  # compared with causal softmax


def test_compare_writes_json_csv_and_png(tmp_path):
    out = tmp_path / "results"
    proc = run_cli("compare", *TINY, "--out", out)
    assert proc.returncode == 0, proc.stderr
    for n in ["32", "64", "96"]:
        assert f"N = {n} " in proc.stdout
    assert "time ∝ N^k" in proc.stdout

    doc = json.loads((out / "compare.json").read_text())
    assert doc["config"]["seqs"] == [32, 64, 96] and doc["config"]["methods"] == METHODS
    assert len(doc["results"]) == 3 * len(METHODS)
    for r in doc["results"]:
        assert r["forward_seconds"]["median"] > 0
        assert r["peak_bytes"] > 0
        if r["method"] == "softmax":
            assert r["relative_error"] is None
        elif r["method"] == "linformer":  # P = min(N, 256) = N: mean pooling over 1 key is the identity
            assert r["relative_error"] < 1e-5
        else:
            assert r["relative_error"] > 0 and r["forward_backward_seconds"]["median"] > 0
            assert r["error_reference"] == ("causal softmax" if r["method"] in CAUSAL else "softmax")
    softmax = {r["seq"]: r["forward_backward_seconds"]["median"] for r in doc["results"] if r["method"] == "softmax"}
    for r in doc["results"]:
        if r["method"] == "softmax":
            assert r["speedup_vs_softmax"] is None
        else:
            assert r["speedup_vs_softmax"] == pytest.approx(softmax[r["seq"]] / r["forward_backward_seconds"]["median"])
    for method in METHODS:
        assert isinstance(doc["fits"][method]["forward"], float)
        assert doc["fits"][method]["points"] == 3

    with open(out / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * len(METHODS)
    assert {r["method"] for r in rows} == set(METHODS)
    assert all(float(r["forward_seconds"]) > 0 for r in rows)

    png = (out / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10000
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.gp", "compare.json", "compare.png"]


def test_linear_error_matches_run_on_the_same_definition(tmp_path):
    """compare's error is max|out − softmax| / max|softmax|: linear attention is a different function,
    so the error is far from 0 on N(0, 1) inputs, and identical runs give identical errors."""
    errors = []
    for i in range(2):
        out = tmp_path / f"r{i}"
        proc = run_cli("compare", "--seq", 64, "--heads", 2, "--dim", 16, "--methods", "softmax,linear", "--budget", 0,
                       "--min-reps", 1, "--no-backward", "--no-plot", "--out", out)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads((out / "compare.json").read_text())
        errors.append([r["relative_error"] for r in doc["results"] if r["method"] == "linear"][0])
        assert not (out / "compare.png").exists()
    assert errors[0] == errors[1] and 0.05 < errors[0] < 10


def test_progress_bar_only_on_a_terminal(tmp_path):
    args = [binary(), "compare", *map(str, TINY), "--methods", "linear", "--no-plot", "--out", str(tmp_path)]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and "\r" not in piped.stderr and "#" not in piped.stderr
    master, slave = pty.openpty()
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=slave, timeout=60)
    os.close(slave)
    drawn = b""
    try:
        while chunk := os.read(master, 65536):
            drawn += chunk
    except OSError:
        pass
    os.close(master)
    assert proc.returncode == 0
    assert b"[" in drawn and b"#" in drawn and b"N=96 linear" in drawn


def test_compare_decayed_methods(tmp_path):
    """The decayed family's rows, on request: timed forward and forward+backward, with the table's flops."""
    proc = run_cli("compare", *TINY, "--methods", "softmax,retention,simple_gla,gla", "--no-plot", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["config"]["methods"] == ["softmax", "retention", "simple_gla", "gla"]
    for r in doc["results"]:
        assert r["forward_seconds"]["median"] > 0 and r["forward_backward_seconds"]["median"] > 0
        if r["method"] != "softmax":
            assert r["error_reference"] == "causal softmax" and r["backward_flops"] > 0
