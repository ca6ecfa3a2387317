"""--dtype f32|bf16|f16 on `linattn run` (float16 .npy files in and out) and on `linattn bench`."""
import json

import numpy as np
import pytest

from conftest import run_cli


def _files(tmp_path, dtype):
    rng = np.random.default_rng(3)
    arrays = {n: rng.uniform(-1, 1, (1, 65, 2, 17)).astype(dtype) for n in ("q", "k", "v", "dout")}
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
    return arrays


@pytest.mark.parametrize("op", ["softmax", "linear", "causal", "recurrent"])
def test_run_float16_files(tmp_path, op):
    _files(tmp_path, np.float16)
    common = ["run", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v", tmp_path / "v.npy", "--op", op]
    grads = [] if op == "recurrent" else ["--dout", tmp_path / "dout.npy"]
    r = run_cli(*common, *grads, "--out", tmp_path / "out.npy", "--dtype", "f16")
    assert r.returncode == 0, r.stderr
    r = run_cli(*common, "--out", tmp_path / "ref.npy", "--reference")  # the fp64 oracle on the same values
    assert r.returncode == 0, r.stderr
    out, ref = np.load(tmp_path / "out.npy"), np.load(tmp_path / "ref.npy")
    assert out.dtype == np.float16
    # float16 storage: within a few half-ulps of the oracle, relative to the output's magnitude.
    assert np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max() < 4e-3
    if grads:
        assert np.load(tmp_path / "dq.npy").dtype == np.float16


def test_run_bf16_writes_float32_of_bf16_values(tmp_path):
    _files(tmp_path, np.float32)
    r = run_cli("run", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v", tmp_path / "v.npy",
                "--out", tmp_path / "out.npy", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "out.npy")
    assert out.dtype == np.float32
    bits = out.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0)  # every value is a bf16


def test_dtype_refusals(tmp_path):
    _files(tmp_path, np.float32)
    r = run_cli("run", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v", tmp_path / "v.npy",
                "--out", tmp_path / "out.npy", "--dtype", "f16", "--reference")
    assert r.returncode != 0 and "--dtype" in r.stderr
    r = run_cli("bench", "--op", "softmax", "--batch", "1", "--heads", "1", "--seq", "8", "--dim", "8", "--dtype", "f8")
    assert r.returncode != 0 and "--dtype" in r.stderr


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_bench_dtype(dtype):
    r = run_cli("bench", "--op", "softmax", "--batch", "1", "--heads", "2", "--seq", "64", "--dim", "16",
                "--backward", "--dtype", dtype, "--budget", "0.02", "--min-reps", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["dtype"] == dtype
