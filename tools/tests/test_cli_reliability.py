"""The command's defects from the bad-input campaign (issue 17), one test each, named after the defect;
docs/reliability.md lists them. Each tripped before its fix."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import assert_one_line_error, binary, run_cli

SUBCOMMANDS = ["compare", "explain", "accuracy", "bench", "run", "train", "generate"]
TINY_TRAIN = ["--d-model", 16, "--heads", 2, "--layers", 1, "--mlp-hidden", 32, "--batch", 2, "--seq-len", 12,
              "--warmup", 1, "--eval-batches", 1, "--threads", 1]


def test_defect03_compare_max_seq_int64_max_is_refused():
    start = time.monotonic()
    proc = run_cli("compare", "--max-seq", "9223372036854775807", timeout=30)
    line = assert_one_line_error(proc, 2)
    assert "--max-seq" in line and "9223372036854775807" in line and "1073741824" in line
    assert time.monotonic() - start < 10


def test_defect08_fifo_input_is_refused_not_read_forever(tmp_path):
    fifo = tmp_path / "q.npy"
    os.mkfifo(fifo)
    np.save(tmp_path / "k.npy", np.ones((1, 4, 1, 4), np.float32))
    proc = run_cli("run", "--q", fifo, "--k", tmp_path / "k.npy", "--v", tmp_path / "k.npy", "--out",
                   tmp_path / "o.npy", timeout=30)
    line = assert_one_line_error(proc, 1)
    assert "q.npy: is not a regular file" in line


@pytest.mark.parametrize("command", [["bench", "--op", "linear", "--batch", 1, "--heads", 1, "--seq", 8, "--dim", 4],
                                     ["compare", "--seq", 8], ["generate", "--model", "m"],
                                     ["train"], ["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o"]])
def test_defect10_threads_flag_is_bounded(command):
    line = assert_one_line_error(run_cli(*command, "--threads", 100000), 2)
    assert "--threads" in line and "100000" in line and "[0, 1024]" in line


def test_defect11_bench_estimate_covers_the_packing_buffers():
    # Softmax at D = 1 held 1.45 GB at N = 10^7 (36 floats a token: every packed row is padded to 16
    # floats) where the estimate said 267 MB (5 floats a token). The refusal quotes the estimate.
    tokens = 1024 * (1 << 30)
    line = assert_one_line_error(run_cli("bench", "--op", "softmax", "--batch", 1024, "--heads", 1, "--seq", 1 << 30,
                                         "--dim", 1), 3)
    amount, unit = line.split("needs about ")[1].split(" (estimate)")[0].split()
    estimate = float(amount) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"].index(unit)
    assert estimate >= 36 * 4 * tokens, line


@pytest.mark.parametrize("args", [
    ["compare", "--budget", "nan"],
    ["compare", "--budget", "inf"],
    ["accuracy", "--qk-std", "nan"],
    ["generate", "--model", "m", "--temperature", "nan"],
    ["bench", "--op", "3", "--batch", 1, "--heads", 1, "--seq", 8, "--dim", 4],
    ["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--op", "3"],
])
def test_defect14_nan_and_numbers_for_names_are_refused(args):
    line = assert_one_line_error(run_cli(*args), 2)
    assert "expected" in line


def test_defect15_flag_messages_are_plain():
    line = assert_one_line_error(run_cli("bench", "--op", "flash", "--batch", 1, "--heads", 1, "--seq", 8,
                                         "--dim", 4), 2)
    assert "is 'flash', expected one of" in line and "causal" in line
    assert "FAILED" not in line and "->" not in line
    line = assert_one_line_error(run_cli("compare", "--budget", "-1"), 2)
    assert "--budget: is -1, expected a finite number in [0, 86400]" in line and len(line) < 200  # no 309 digits
    line = assert_one_line_error(run_cli("generate", "--model", "m", "--temperature", "-1"), 2)
    assert "--temperature: is -1, expected a finite number ≥ 0" in line and len(line) < 200


def test_unknown_subcommand_suggests_the_nearest():
    line = assert_one_line_error(run_cli("compre"), 2)
    assert "unknown subcommand 'compre'" in line and "did you mean 'compare'" in line
    line = assert_one_line_error(run_cli("zzzzzzzzzz"), 2)
    assert "unknown subcommand" in line and "did you mean" not in line


@pytest.mark.parametrize("name", [None] + SUBCOMMANDS)
def test_every_help_ends_with_examples(name):
    proc = run_cli(*([name] if name else []), "--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.strip() == "Examples:")
    examples = [line.strip() for line in lines[start + 1:]]
    # An MPI mode's example runs linattn under mpirun (train --seq-parallel).
    runs_linattn = [e.startswith(("linattn ", "gnuplot ")) or (e.startswith("mpirun ") and " linattn " in e)
                    for e in examples]
    assert examples and all(runs_linattn), examples


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot is not installed")
def test_plot_scripts_rerun_as_they_say(tmp_path):
    out = tmp_path / "cmp"
    proc = run_cli("compare", "--seq", "16,32", "--methods", "softmax,linear", "--heads", 1, "--dim", 8,
                   "--budget", 0, "--min-reps", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    acc = tmp_path / "acc"
    proc = run_cli("accuracy", "--method", "linformer", "--seq", 32, "--sizes", "8,16", "--trials", 1, "--dim", 8,
                   "--value-dim", 8, "--out", acc)
    assert proc.returncode == 0, proc.stderr
    for folder, stem in [(out, "compare"), (acc, "accuracy")]:
        (folder / f"{stem}.png").unlink()
        rerun = subprocess.run(["gnuplot", f"{stem}.gp"], cwd=folder, capture_output=True, text=True, timeout=60)
        assert rerun.returncode == 0, rerun.stderr
        assert (folder / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
        assert not (folder / f"{stem}.png.tmp").exists()


def test_accuracy_linformer_keeps_its_gaussian_curves(tmp_path):
    out = tmp_path / "acc"
    proc = run_cli("accuracy", "--method", "linformer", "--seq", 32, "--sizes", "8,16", "--trials", 1, "--dim", 8,
                   "--value-dim", 8, "--out", out, "--no-plot")
    assert proc.returncode == 0, proc.stderr
    lines = (out / "accuracy.csv").read_text().splitlines()
    # gnuplot splits at every comma, quotes or not: every row must have the header's six fields.
    assert all(len(line.split(",")) == 6 for line in lines), lines
    variants = {line.split(",")[1] for line in lines[1:]}
    assert len(variants) == 2 and any(v.startswith("Gaussian") for v in variants), variants


def test_compare_explains_errors_above_one(tmp_path):
    assert "An error above 1" in run_cli("compare", "--help").stdout
    proc = run_cli("compare", "--seq", 64, "--methods", "softmax,linear,causal", "--heads", 1, "--dim", 8,
                   "--budget", 0, "--min-reps", 1, "--out", tmp_path / "c", "--no-plot")
    assert proc.returncode == 0, proc.stderr
    errors = [row["relative_error"] for row in json.loads((tmp_path / "c" / "compare.json").read_text())["results"]
              if row["relative_error"] is not None]
    assert ("An error above 1" in proc.stdout) == any(e > 1 for e in errors), (errors, proc.stdout)


def test_train_without_out_says_where_the_model_goes(tmp_path):
    proc = subprocess.run([binary(), "train", "--steps", "2", *map(str, TINY_TRAIN)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "model: linattn.model (the default; --out FILE to choose)" in proc.stdout
    assert (tmp_path / "linattn.model").exists() and (tmp_path / "linattn.model.ckpt").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_train_killed_by_a_signal_saves_a_checkpoint(tmp_path, sig):
    model = tmp_path / "m.model"
    proc = subprocess.Popen([binary(), "train", "--steps", "100000", "--log-every", "1", "--out", str(model),
                             *map(str, TINY_TRAIN)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step "):
            break
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, stderr)
    assert "stopped by a signal at step " in stdout and "--resume" in stdout
    step = int(stdout.split("stopped by a signal at step ")[1].split(":")[0])
    # The checkpoint holds the step the signal stopped at, and the run goes on from there.
    resumed = run_cli("train", "--resume", f"{model}.ckpt", "--steps", step + 1, "--out", model, "--threads", 1,
                      timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed at step {step})" in resumed.stdout


def test_train_resume_with_conflicting_flags(tmp_path):
    model = tmp_path / "m.model"
    proc = run_cli("train", "--steps", 2, "--out", model, *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    line = assert_one_line_error(run_cli("train", "--resume", f"{model}.ckpt", "--attention", "softmax",
                                         "--out", model), 2)
    assert "--attention is softmax, but the checkpoint" in line and "linear" in line
    proc = run_cli("train", "--resume", f"{model}.ckpt", "--steps", 3, "--out", model, "--threads", 1)
    assert proc.returncode == 0, proc.stderr
    assert "resumed at step 2" in proc.stdout and "--steps overrides the checkpoint's" in proc.stdout
    assert "step      3/3" in proc.stdout


@pytest.mark.parametrize("args,bound", [
    (["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--features", 100000], "[0, 65536]"),
    (["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--chunk-size", 1 << 40], "[1, 65536]"),
    (["bench", "--op", "favor", "--batch", 1, "--heads", 1, "--seq", 8, "--dim", 4, "--features", 1 << 40],
     "[0, 65536]"),
    (["generate", "--model", "m", "--tokens", 1 << 30], "[1, 16777216]"),
    (["train", "--batch", 1 << 20], "[1, 65536]"),
    (["train", "--favor-features", 5000], "[1, 4096]"),
    (["train", "--steps", 1 << 41], "[1, 1099511627776]"),
])
def test_every_size_flag_is_bounded(args, bound):
    """Every limit a flag can reach is bounded before anything is allocated, naming the flag, value and bound."""
    line = assert_one_line_error(run_cli(*args), 2)
    assert str(args[-2]) in line and str(args[-1]) in line and bound in line, line
