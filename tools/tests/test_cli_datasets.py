"""The dataset file (docs/datasets.md) through the command (issue 41): `linattn train --task image|speech
--data FILE` trains the encoder classifier on tiny files that scripts/applications/dataset_file.py writes,
`linattn eval` scores a split of them, and every bad file or mismatched checkpoint is refused by name
with nothing written."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

from conftest import REPO, assert_one_line_error, run_cli

sys.path.insert(0, str(REPO / "scripts" / "applications"))
from dataset_file import dataset_bytes, write_dataset  # noqa: E402

SEQ_LEN, VOCAB, CLASSES = 16, 8, 3
COUNTS = {"train": 96, "validation": 24, "test": 30}


def separable_splits(seed=0, seq_len=SEQ_LEN, vocab=VOCAB, dtype=np.uint8):
    """Class c's sequences are mostly token c among noise: the mean pool of a trained encoder finds it."""
    rng = np.random.default_rng(seed)
    splits = {}
    for name, n in COUNTS.items():
        labels = rng.integers(0, CLASSES, n)
        tokens = rng.integers(CLASSES, vocab, (n, seq_len))
        marked = rng.random((n, seq_len)) < 0.6
        tokens[marked] = np.broadcast_to(labels[:, None], (n, seq_len))[marked]
        splits[name] = (tokens.astype(dtype), labels)
    return splits


def dataset(tmp_path, name="tiny.ds", task="image", seed=0, **kw):
    path = tmp_path / name
    write_dataset(path, task, separable_splits(seed, **kw), kw.get("vocab", VOCAB), ["a", "b", "c"])
    return path


MODEL = ["--batch", 16, "--d-model", 16, "--heads", 2, "--layers", 1, "--mlp-hidden", 32, "--threads", 1,
         "--log-every", 1000, "--warmup", 5]


def train(tmp_path, data, *flags, task="image", name="m", steps=60):
    out = tmp_path / f"{name}.model"
    proc = run_cli("train", "--task", task, "--data", data, "--steps", steps, "--lr", 1e-2, "--eval-batches", 2,
                   "--out", out, *MODEL, *flags, timeout=300)
    return proc, out


def test_trains_and_eval_scores_the_test_split(tmp_path):
    data = dataset(tmp_path)
    proc, out = train(tmp_path, data, "--attention", "softmax")
    assert proc.returncode == 0, proc.stderr
    assert "sequences of 16 tokens" in proc.stdout and "validation accuracy" in proc.stdout
    ckpt = str(out) + ".ckpt"
    result = json.loads(run_cli("eval", ckpt, "--data", data, "--json").stdout)
    assert result["task"] == "image" and result["split"] == "test"
    assert result["examples"] == COUNTS["test"] and result["seq_len"] == SEQ_LEN
    assert result["accuracy"] > 0.8, result  # chance is 1/3
    # The model file gives the same score when told its task and file.
    same = json.loads(run_cli("eval", out, "--task", "image", "--data", data, "--json").stdout)
    assert same["accuracy"] == result["accuracy"]
    part = run_cli("eval", ckpt, "--data", data, "--split", "validation", "--examples", 10)
    assert part.returncode == 0 and "validation split: 10 sequences of 16 tokens" in part.stdout


@pytest.mark.parametrize("attention", ["linear", "gated_deltanet", "linformer"])
def test_speech_task_and_resume(tmp_path, attention):
    data = dataset(tmp_path, "speech.ds", task="speech")
    proc, out = train(tmp_path, data, "--attention", attention, task="speech", steps=4)
    assert proc.returncode == 0, proc.stderr
    ckpt = str(out) + ".ckpt"
    # A resumed run names its dataset again, and it must be the same file (by CRC).
    line = assert_one_line_error(run_cli("train", "--resume", ckpt, "--steps", 6, "--out", out), 1)
    assert "--data" in line
    other = dataset(tmp_path, "other.ds", task="speech", seed=5)
    before = open(ckpt, "rb").read()
    line = assert_one_line_error(run_cli("train", "--resume", ckpt, "--data", other, "--steps", 6, "--out", out), 1)
    assert "CRC-32" in line and "other.ds" in line
    assert open(ckpt, "rb").read() == before
    proc = run_cli("train", "--resume", ckpt, "--data", data, "--steps", 6, "--out", out, "--log-every", 1000)
    assert proc.returncode == 0, proc.stderr
    assert "resumed at step 4" in proc.stdout
    result = json.loads(run_cli("eval", ckpt, "--data", data, "--json").stdout)
    assert result["task"] == "speech" and result["attention"] == attention


def test_refuses_another_dataset_or_task(tmp_path):
    data = dataset(tmp_path)
    proc, out = train(tmp_path, data, steps=2)
    assert proc.returncode == 0, proc.stderr
    ckpt = str(out) + ".ckpt"
    # eval names the dataset it needs, refuses another file (its CRC) and another task.
    assert "--data" in assert_one_line_error(run_cli("eval", ckpt), 2)
    other = dataset(tmp_path, "other.ds", seed=7)
    line = assert_one_line_error(run_cli("eval", ckpt, "--data", other), 1)
    assert "CRC-32" in line and "other.ds" in line
    line = assert_one_line_error(run_cli("eval", ckpt, "--data", data, "--task", "speech"), 1)
    assert 'task "image"' in line and 'task "speech"' in line
    # train refuses a file of another task, naming both.
    speech = dataset(tmp_path, "speech.ds", task="speech")
    line = assert_one_line_error(run_cli("train", "--task", "image", "--data", speech, "--steps", 1,
                                         "--out", tmp_path / "x.model"), 1)
    assert 'task "speech"' in line and 'task "image"' in line
    assert not (tmp_path / "x.model").exists() and not (tmp_path / "x.model.ckpt").exists()
    # The file fixes the length: a different --seq-len is a usage error; no --data is one too.
    line = assert_one_line_error(run_cli("train", "--task", "image", "--data", data, "--seq-len", 32), 2)
    assert "--seq-len" in line and "16" in line
    assert "--data" in assert_one_line_error(run_cli("train", "--task", "image"), 2)
    # A wider vocabulary reads, but the model's byte tokenizer cannot hold it.
    wide = dataset(tmp_path, "wide.ds", vocab=300, dtype=np.uint16)
    line = assert_one_line_error(run_cli("train", "--task", "image", "--data", wide, "--steps", 1,
                                         "--out", tmp_path / "w.model"), 1)
    assert "wide.ds" in line and "vocab is 300" in line


def test_a_generated_task_refuses_a_data_file(tmp_path):
    """ListOps, Pathfinder, copy and MQAR make their data from --seed: a --data file given to them would be
    ignored while the user believes it was read, so train and eval refuse it by name."""
    data = dataset(tmp_path)
    for task in ("listops", "pathfinder", "copy"):
        out = tmp_path / f"{task}.model"
        line = assert_one_line_error(run_cli("train", "--task", task, "--data", data, "--steps", 1, "--out", out), 2)
        assert "--data" in line and task in line
        assert not out.exists() and not (tmp_path / f"{task}.model.ckpt").exists()
    out = tmp_path / "listops.model"
    proc = run_cli("train", "--task", "listops", "--seq-len", 64, "--steps", 1, "--out", out, *MODEL)
    assert proc.returncode == 0, proc.stderr
    line = assert_one_line_error(run_cli("eval", str(out) + ".ckpt", "--data", data, "--examples", 4), 2)
    assert "--data" in line and '"listops"' in line
    assert run_cli("eval", str(out) + ".ckpt", "--examples", 4).returncode == 0


def test_truncated_or_corrupted_file_is_refused_and_nothing_written(tmp_path):
    good = dataset(tmp_path).read_bytes()
    out = tmp_path / "bad.model"
    for name, data, words in [
        ("cut.ds", good[:-7], "CRC-32"),
        ("flip.ds", good[:60] + bytes([good[60] ^ 1]) + good[61:], "CRC-32"),
        ("short.ds", good[:20], "truncated"),
        ("other.bin", b"PK\x03\x04" + good[4:], "magic"),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        line = assert_one_line_error(run_cli("train", "--task", "image", "--data", path, "--steps", 1, "--out", out), 1)
        assert name in line and words in line, line
        assert path.read_bytes() == data
    assert not out.exists() and not (tmp_path / "bad.model.ckpt").exists()


def test_writer_refuses_bad_arguments_and_writes_atomically(tmp_path):
    splits = separable_splits()
    with pytest.raises(ValueError, match="dtype"):
        dataset_bytes("image", {**splits, "test": (splits["test"][0].astype(np.int32), splits["test"][1])}, 8, "abc")
    with pytest.raises(ValueError, match="length 8, expected 16"):
        dataset_bytes("image", {**splits, "test": (splits["test"][0][:, :8], splits["test"][1])}, 8, "abc")
    with pytest.raises(ValueError, match="labels 1..3, expected 0 to 2"):
        dataset_bytes("image", {**splits, "train": (splits["train"][0], splits["train"][1] + 1)}, 8, "abc")
    with pytest.raises(ValueError, match="token 7, expected < vocab 4"):
        dataset_bytes("image", splits, 4, "abc")
    with pytest.raises(ValueError, match="task"):
        dataset_bytes("Image", splits, 8, "abc")
    with pytest.raises(ValueError, match="expected exactly"):
        dataset_bytes("image", {"train": splits["train"]}, 8, "abc")
    path = tmp_path / "d.ds"
    path.write_bytes(b"old")
    crc = write_dataset(path, "image", splits, 8, "abc")
    assert path.read_bytes() == dataset_bytes("image", splits, 8, "abc")
    assert crc == int.from_bytes(path.read_bytes()[-4:], "little")
    assert os.listdir(tmp_path) == ["d.ds"]  # no temporary left
    with pytest.raises(ValueError):
        write_dataset(path, "image", splits, 4, "abc")
    assert path.read_bytes() == dataset_bytes("image", splits, 8, "abc")  # a refused write leaves the old file


def test_plot_draws_the_accuracy_curve(tmp_path):
    data = dataset(tmp_path)
    line = assert_one_line_error(run_cli("train", "--task", "image", "--data", data, "--plot", tmp_path / "c.txt"), 2)
    assert "--plot" in line and ".png" in line
    if shutil.which("gnuplot") is None:
        pytest.skip("gnuplot not found: --plot only warns")
    png = tmp_path / "curve.png"
    proc, _ = train(tmp_path, data, "--eval-every", 5, "--csv", tmp_path / "c.csv", "--plot", png, steps=15)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in proc.stdout
    script = (tmp_path / "curve.gp").read_text()
    rows = script.split("$curve << EOD\n")[1].split("EOD")[0].split()
    # The evaluations at steps 5, 10 and 15, as the CSV has them.
    accuracy = {int(rows[i]): float(rows[i + 2]) for i in range(0, len(rows), 3)}
    csv = [r.split(",") for r in (tmp_path / "c.csv").read_text().splitlines()[1:]]
    assert sorted(accuracy) == [5, 10, 15] == [int(r[0]) for r in csv]
    assert all(accuracy[int(r[0])] == pytest.approx(float(r[7]), abs=1e-6) for r in csv)


def test_image_data_script_writes_the_digits(tmp_path):
    pytest.importorskip("sklearn", reason="make_image_data.py reads scikit-learn's digits")
    from make_image_data import digits_splits, main, upscale

    splits = digits_splits(16, seed=1)
    assert [len(splits[s][1]) for s in ("train", "validation", "test")] == [1258, 180, 359]
    for tokens, labels in splits.values():
        assert tokens.dtype == np.uint8 and tokens.shape[1] == 256 and set(np.unique(labels)) <= set(range(10))
    assert np.array_equal(digits_splits(16, seed=1)["test"][0], splits["test"][0])
    assert not np.array_equal(digits_splits(16, seed=2)["test"][1], splits["test"][1])
    # Upscaling keeps the corners and interpolates between pixel centres.
    image = np.array([[[0.0, 1.0], [2.0, 3.0]]])
    assert np.allclose(upscale(image, 3)[0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])
    path = tmp_path / "digits16.ds"
    assert main(["--size", "16", "--out", str(path)]) == 0
    proc, out = train(tmp_path, path, "--attention", "linear", steps=2)
    assert proc.returncode == 0, proc.stderr
    assert "sequences of 256 tokens" in proc.stdout and "10 classes" in proc.stdout
