"""scripts/applications/make_speech_data.py: a tiny keyword-spotting file (two keywords and "unknown",
a few examples, espeak-ng only) has the layout of docs/datasets.md with the right shapes and labels, holds
real utterances, is the same file for the same seed and another for another seed, and keeps the voices of
the three splits apart. Skipped where espeak-ng or sox is not installed (scripts/setup.sh installs them)."""
import hashlib
import importlib.util
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import REPO, binary

SCRIPT = REPO / "scripts" / "applications" / "make_speech_data.py"
TINY = ["--keywords", "yes,no", "--train", "3", "--eval", "2", "--length", "1500", "--synthesizers", "espeak-ng"]
pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                                reason="espeak-ng or sox not installed (scripts/setup.sh installs both)")


def make(path, *args):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(path), *args], capture_output=True, text=True,
                          timeout=120)
    return proc


def read(path):
    """The file's fields, read from the bytes as docs/datasets.md lays them out (independently of the writer)."""
    data = path.read_bytes()
    assert zlib.crc32(data[:-4]) == struct.unpack("<I", data[-4:])[0]
    assert data[:8] == b"LATNDSET"
    version, width, seq_len, vocab, classes = struct.unpack_from("<IIqqq", data, 8)
    offset = 8 + 32

    def text():
        nonlocal offset
        (n,) = struct.unpack_from("<q", data, offset)
        offset += 8 + n
        return data[offset - n:offset].decode("ascii")

    task = text()
    names = [text() for _ in range(classes)]
    splits = {}
    for split in ("train", "validation", "test"):
        (count,) = struct.unpack_from("<q", data, offset)
        offset += 8
        tokens = np.frombuffer(data, np.uint8 if width == 1 else np.uint16, count * seq_len, offset)
        offset += count * seq_len * width
        labels = np.frombuffer(data, "<u4", count, offset)
        offset += 4 * count
        splits[split] = (tokens.reshape(count, seq_len), labels)
    assert offset == len(data) - 4
    return dict(version=version, seq_len=seq_len, vocab=vocab, task=task, names=names, splits=splits)


def test_a_tiny_file_has_the_shapes_labels_and_utterances(tmp_path):
    path = tmp_path / "tiny.ds"
    proc = make(path, *TINY)
    assert proc.returncode == 0, proc.stderr
    assert "held out for validation" in proc.stderr and "100%" in proc.stderr
    f = read(path)
    assert (f["task"], f["vocab"], f["seq_len"], f["names"]) == ("speech", 256, 1500, ["yes", "no", "unknown"])
    for split, per_class in (("train", 3), ("validation", 2), ("test", 2)):
        tokens, labels = f["splits"][split]
        assert tokens.shape == (3 * per_class, 1500)
        assert np.bincount(labels, minlength=3).tolist() == [per_class] * 3
        # Every example holds a word: mu-law tokens far from silence's 127/128 (a quiet word's peak, -12 dB,
        # is token 223 or 32), not a window of padding.
        assert (np.ptp(tokens, axis=1) > 64).all(), split


def test_the_seed_fixes_the_file(tmp_path):
    digests = []
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        assert make(tmp_path / name, *TINY, "--seed", seed).returncode == 0
        digests.append(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    assert digests[0] != digests[2]


def test_the_splits_have_their_own_voices():
    spec = importlib.util.spec_from_file_location("make_speech_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for seed in (1, 2, 3):
        voices = module.held_out_speakers(module.speakers(["espeak-ng", "flite"]), seed)
        sets = [set(voices[s]) for s in ("train", "validation", "test")]
        assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
        assert sum(map(len, sets)) == len(module.ESPEAK_VOICES) * len(module.ESPEAK_VARIANTS) + len(module.FLITE_VOICES)
        for held in sets[1:]:  # each synthesizer is heard in the held-out splits too
            assert {synth for synth, _ in held} == {"espeak-ng", "flite"}


@pytest.mark.parametrize("args, named", [
    (["--keywords", "yes,no", "--unknown-words", "no,cat"], "--unknown-words"),
    (["--rate", "500"], "--rate"),
    (["--synthesizers", "festival"], "--synthesizers"),
    (["--train", "0"], "--train"),
])
def test_bad_arguments_are_named_and_nothing_is_written(tmp_path, args, named):
    proc = make(tmp_path / "bad.ds", *args)
    assert proc.returncode == 2
    assert named in proc.stderr
    assert not list(tmp_path.iterdir())


def test_the_command_trains_on_the_file(tmp_path):
    """linattn's reader takes the file: one training step of the speech task, where this build has it."""
    path = tmp_path / "tiny.ds"
    assert make(path, *TINY).returncode == 0
    proc = subprocess.run([binary(), "train", "--task", "speech", "--data", str(path), "--steps", "1", "--batch", "2",
                           "--d-model", "16", "--heads", "2", "--layers", "1", "--mlp-hidden", "16", "--eval-batches",
                           "1", "--threads", "1", "--out", str(tmp_path / "m.model")], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode == 2 and "--task" in proc.stderr:
        pytest.skip("this build of linattn has no --task speech yet")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m.model").exists()
