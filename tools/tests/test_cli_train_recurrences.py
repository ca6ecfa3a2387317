"""`linattn train --attention mamba2|rwkv7` then `linattn generate` (issue 40, "Reach"): a tiny copy-task run of
each kind writes a model file and a finite loss curve, generate continues a prompt from it greedily (the same
text twice, the kind named), --attention on generate refuses a model of the other kind, --help lists both kinds,
and the encoder tasks are refused by name (these kinds run in the decoder only)."""
import csv
import math

import pytest

from conftest import assert_one_line_error, run_cli

KINDS = ["mamba2", "rwkv7"]
TINY = ["--d-model", 16, "--heads", 2, "--layers", 1, "--mlp-hidden", 32, "--batch", 2, "--seq-len", 12,
        "--warmup", 1, "--eval-batches", 1, "--threads", 1, "--steps", 20, "--log-every", 10]


def train(tmp_path, attention):
    model = tmp_path / f"{attention}.model"
    proc = run_cli("train", "--task", "copy", "--attention", attention, "--out", model, "--csv",
                   tmp_path / f"{attention}.csv", *TINY)
    assert proc.returncode == 0, proc.stderr
    return model, proc


@pytest.mark.parametrize("attention", KINDS)
def test_train_then_generate(tmp_path, attention):
    model, proc = train(tmp_path, attention)
    assert f"attention {attention}" in proc.stdout + proc.stderr
    rows = list(csv.DictReader((tmp_path / f"{attention}.csv").open()))
    assert [int(r["step"]) for r in rows] == [10, 20]
    assert all(math.isfinite(float(r["loss"])) for r in rows)

    args = ["generate", "--model", model, "--prompt", "abc", "--tokens", 20, "--temperature", 0, "--threads", 1]
    first, second = run_cli(*args), run_cli(*args, "--attention", attention)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    text = first.stdout.strip("\n")
    assert text.startswith("abc") and len(text) == 3 + 20, first.stdout
    assert second.stdout == first.stdout  # greedy: the same tokens from the same state
    assert f"({attention} attention;" in first.stderr

    other = KINDS[1 - KINDS.index(attention)]
    line = assert_one_line_error(run_cli("generate", "--model", model, "--prompt", "abc", "--attention", other), 2)
    assert other in line and attention in line


@pytest.mark.parametrize("command", ["train", "generate"])
def test_help_lists_the_kinds(command):
    proc = run_cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    for kind in KINDS:
        assert kind in proc.stdout


@pytest.mark.parametrize("attention", KINDS)
def test_encoder_task_is_refused_by_name(tmp_path, attention):
    out = tmp_path / "listops.model"
    line = assert_one_line_error(run_cli("train", "--task", "listops", "--attention", attention, "--out", out,
                                         *TINY), 2)
    assert f"--attention {attention}" in line and "decoder" in line
    assert not out.exists()
