"""ListOps (issue 41): the generator against a Python evaluator of LRA's grammar, the encoder classifier
that `linattn train --task listops` trains, `linattn eval` on the test split, and the refusals."""
import json

import numpy as np
import pytest

from conftest import assert_one_line_error, run_cli

OPERATORS = {"[MAX": max, "[MIN": min, "[MED": lambda args: int(np.median(args)), "[SM": lambda args: sum(args) % 10}


def parse(words, i=0, depth=1):
    """(value, next index, deepest depth) of the node at words[i], checking LRA's grammar: an operator
    takes 2 to 10 arguments and appears only above depth 10; a leaf is a digit."""
    word = words[i]
    if word.isdigit():
        assert len(word) == 1 and depth <= 10
        return int(word), i + 1, depth
    assert word in OPERATORS and depth < 10, (word, depth)
    args, i, deepest = [], i + 1, depth
    while words[i] != "]":
        value, i, d = parse(words, i, depth + 1)
        args.append(value)
        deepest = max(deepest, d)
    assert 2 <= len(args) <= 10, args
    return OPERATORS[word](args), i + 1, deepest


def examples(split, count, seq_len, seed):
    proc = run_cli("listops", "--split", split, "--examples", count, "--seq-len", seq_len, "--seed", seed)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(rows) == count
    return [(int(label), text) for label, text in rows]


@pytest.mark.parametrize("seq_len", [16, 64, 2000])
def test_generator_follows_the_grammar_and_labels_are_the_values(seq_len):
    count = 8 if seq_len == 2000 else 300
    rows = examples("test", count, seq_len, 5)
    labels = set()
    for label, text in rows:
        words = text.split()
        assert seq_len // 4 <= len(words) <= seq_len, len(words)  # LRA: 500-2,000 tokens at 2,000
        value, end, _ = parse(words)
        assert end == len(words), text  # one expression, nothing after it
        assert label == value, text
        labels.add(label)
    if count > 100:
        assert len(labels) >= 8  # the ten classes all occur (bar chance) over a few hundred expressions


def test_splits_are_fixed_by_the_seed():
    a = examples("validation", 20, 64, 1)
    assert examples("validation", 20, 64, 1) == a  # the same seed, the same split
    assert examples("validation", 20, 64, 2) != a
    assert examples("test", 20, 64, 1) != a and examples("train", 20, 64, 1) != a


def train(tmp_path, *flags, name="lo"):
    out = tmp_path / f"{name}.model"
    proc = run_cli("train", "--task", "listops", "--seq-len", 32, "--batch", 32, "--d-model", 32, "--heads", 2,
                   "--layers", 1, "--mlp-hidden", 64, "--lr", 3e-3, "--warmup", 10, "--threads", 1, "--log-every",
                   1000, "--out", out, *flags, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, out


def majority_rate(split, count, seq_len, seed):
    labels = [label for label, _ in examples(split, count, seq_len, seed)]
    return max(labels.count(c) for c in range(10)) / len(labels)


def test_tiny_training_beats_chance_and_eval_scores_the_test_split(tmp_path):
    proc, out = train(tmp_path, "--attention", "softmax", "--steps", 300, "--eval-batches", 16)
    assert "encoder classifier" in proc.stdout and "validation accuracy" in proc.stdout
    ckpt = str(out) + ".ckpt"
    scored = run_cli("eval", ckpt, "--json")
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout)
    assert result["split"] == "test" and result["examples"] == 2000 and result["seq_len"] == 32
    # Chance is 0.1; ListOps' labels are skewed (MAX tends to 9), so the bar is the majority class's rate.
    assert result["accuracy"] > majority_rate("test", 2000, 32, 1) + 0.03, result
    # The model file gives the same score once told the length; another seed, another split.
    same = json.loads(run_cli("eval", "--model", out, "--seq-len", 32, "--seed", 1, "--json").stdout)
    assert same["accuracy"] == result["accuracy"] and same["loss"] == pytest.approx(result["loss"])
    other = run_cli("eval", ckpt, "--split", "validation", "--examples", 100)
    assert other.returncode == 0 and "validation split: 100 expressions" in other.stdout


@pytest.mark.parametrize("attention", ["linear", "performer", "gla", "gated_deltanet", "linformer"])
def test_every_family_trains_the_encoder(tmp_path, attention):
    proc, out = train(tmp_path, "--attention", attention, "--steps", 4, "--eval-batches", 2, name=attention)
    if attention == "gla" or attention == "gated_deltanet":
        assert "runs both directions" in proc.stdout
    result = json.loads(run_cli("eval", str(out) + ".ckpt", "--examples", 64, "--json").stdout)
    assert result["examples"] == 64 and 0 <= result["accuracy"] <= 1


def test_refusals(tmp_path):
    # Linformer trains the encoder only: the decoder's causal attention has no Linformer form.
    line = assert_one_line_error(run_cli("train", "--task", "copy", "--attention", "linformer", "--steps", 1), 2)
    assert "linformer" in line and "causal" in line
    # eval refuses a checkpoint of another task, naming it, and a decoder model file.
    copy = tmp_path / "copy.model"
    proc = run_cli("train", "--task", "copy", "--steps", 2, "--seq-len", 16, "--batch", 2, "--d-model", 8,
                   "--layers", 1, "--heads", 2, "--mlp-hidden", 8, "--out", copy)
    assert proc.returncode == 0, proc.stderr
    line = assert_one_line_error(run_cli("eval", str(copy) + ".ckpt"), 1)
    assert 'task "copy"' in line and "listops" in line
    line = assert_one_line_error(run_cli("eval", copy, "--seq-len", 16), 1)
    assert "decoder" in line
    # A listops model file needs its length; a truncated checkpoint is a clear error and stays as it was.
    _, out = train(tmp_path, "--attention", "linear", "--steps", 2, "--eval-batches", 1, name="small")
    line = assert_one_line_error(run_cli("eval", out), 2)
    assert "--seq-len" in line
    ckpt = tmp_path / "small.model.ckpt"
    cut = ckpt.read_bytes()[:-100]
    ckpt.write_bytes(cut)
    assert_one_line_error(run_cli("eval", ckpt), 1)
    assert ckpt.read_bytes() == cut
    # generate has no next token to sample from a classifier.
    line = assert_one_line_error(run_cli("generate", "--model", out, "--prompt", "1", "--tokens", 2), 1)
    assert "classifier" in line and "eval" in line


def test_resume_continues_a_listops_run(tmp_path):
    _, out = train(tmp_path, "--attention", "linear", "--steps", 4, "--eval-batches", 1, name="first")
    ckpt = str(out) + ".ckpt"
    proc = run_cli("train", "--resume", ckpt, "--steps", 8, "--out", out, "--log-every", 1000, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "resumed at step 4" in proc.stdout and "step      8/8" in proc.stdout
    result = json.loads(run_cli("eval", ckpt, "--examples", 32, "--json").stdout)
    assert result["examples"] == 32 and result["attention"] == "linear"
