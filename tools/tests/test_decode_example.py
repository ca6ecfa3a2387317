"""examples/decode (a C program over the C API only) generates what `linattn generate` generates from
the same trained model: greedy decoding (temperature 0) must give the same text, token for token, for a
recurrent-state model and for softmax's KV cache; --context reports a line per run."""

import os
import pathlib
import subprocess

import pytest

from conftest import REPO, binary, run_cli

BUILD = pathlib.Path(os.environ.get("LINATTN_BUILD_DIR") or REPO / "build")
DECODE = BUILD / "examples" / "decode" / "decode"
TINY = ["--d-model", 16, "--heads", 2, "--layers", 1, "--mlp-hidden", 32, "--batch", 2, "--seq-len", 12,
        "--warmup", 1, "--eval-batches", 1, "--threads", 1, "--steps", 2]

pytestmark = pytest.mark.skipif(not os.access(DECODE, os.X_OK), reason=f"{DECODE} is not built")


@pytest.mark.parametrize("attention", ["linear", "softmax", "gated_deltanet"])
def test_decode_matches_linattn_generate(tmp_path, attention):
    model = tmp_path / f"{attention}.model"
    proc = subprocess.run([binary(), "train", "--task", "copy", "--attention", attention, "--out", str(model),
                           *map(str, TINY)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    want = run_cli("generate", "--model", model, "--prompt", "abc", "--tokens", 30, "--temperature", 0,
                   "--threads", 1)
    assert want.returncode == 0, want.stderr
    got = subprocess.run([str(DECODE), str(model), "abc", "30", "0"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert f"{attention} attention" in got.stderr

    line = subprocess.run([str(DECODE), str(model), "--context", "100", "8"], capture_output=True, text=True,
                          timeout=60)
    assert line.returncode == 0, line.stderr
    kind, context, tokens_per_s, tokens_per_cpu_s, state_bytes, rss = line.stdout.split()
    assert kind == attention and int(context) == 100 and int(state_bytes) > 0 and int(rss) > 0
    assert float(tokens_per_s) > 0 and float(tokens_per_cpu_s) > 0


def test_decode_reports_a_bad_model_file(tmp_path):
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    proc = subprocess.run([str(DECODE), str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("decode: load: ") and "bad.model" in proc.stderr
