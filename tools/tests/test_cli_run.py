"""`linattn run`: .npy round trips against PyTorch, bad files, and atomic outputs."""
import os
import re
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import MEMORY_BOUND, assert_one_line_error, relative_error, run_cli

def save(path, array):
    np.save(path, np.ascontiguousarray(array, dtype=np.float32))
    return path


def inputs(tmp_path, B, Nq, Nk, H, D, E, seed=0, dout=True):
    rng = np.random.default_rng(seed)
    arrays = {
        "q": rng.standard_normal((B, Nq, H, D)).astype(np.float32),
        "k": rng.standard_normal((B, Nk, H, D)).astype(np.float32),
        "v": rng.standard_normal((B, Nk, H, E)).astype(np.float32),
    }
    if dout:
        arrays["dout"] = rng.standard_normal((B, Nq, H, E)).astype(np.float32)
    for name, array in arrays.items():
        save(tmp_path / f"{name}.npy", array)
    return arrays


def run_args(tmp_path, *extra, dout=True):
    # One thread: on a shared machine 2-thread OpenMP regions can stall for tens of ms each
    # (bench and compare tests cover the default thread count).
    args = ["run", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy", "--v", tmp_path / "v.npy",
            "--out", tmp_path / "out.npy", "--threads", 1]
    if dout:
        args += ["--dout", tmp_path / "dout.npy"]
    return args + list(extra)


def torch_softmax(q, k, v, causal=False, key_lengths=None):
    """The seed's standard_attention over [B, H, N, D] (permuted from [B, N, H, D]), with masks."""
    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))
    scores = torch.matmul(q, k.transpose(-2, -1)) / q.size(-1) ** 0.5
    Nq, Nk = q.shape[2], k.shape[2]
    mask = torch.zeros(q.shape[0], 1, Nq, Nk, dtype=torch.bool)
    if causal:  # bottom-right: query i sees key j iff j ≤ i + Nk − Nq
        mask |= torch.ones(Nq, Nk, dtype=torch.bool).triu(Nk - Nq + 1)
    if key_lengths is not None:
        for b, length in enumerate(key_lengths):
            mask[b, :, :, length:] = True
    attn = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return torch.matmul(attn, v).permute(0, 2, 1, 3)


def seed_linear_attention(Q, K, V):
    """The seed's linear_attention verbatim, for one batch: Q, K [N, L, D], V [N, L, E] (L = heads)."""
    Q_prime = F.elu(Q) + 1
    K_prime = F.elu(K) + 1
    KV = torch.einsum("nld,nle->lde", K_prime, V)
    Z = 1 / (torch.einsum("nld,ld->nl", Q_prime, K_prime.sum(dim=0)) + 1e-6)
    return torch.einsum("nld,lde,nl->nle", Q_prime, KV, Z)


def torch_linear(q, k, v, causal=False):
    if not causal:
        return torch.stack([seed_linear_attention(q[b], k[b], v[b]) for b in range(q.shape[0])])
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    S = torch.cumsum(torch.einsum("bnhd,bnhe->bnhde", pk, v), dim=1)
    z = torch.cumsum(pk, dim=1)
    return torch.einsum("bnhd,bnhde->bnhe", pq, S) / (torch.einsum("bnhd,bnhd->bnh", pq, z) + 1e-6)[..., None]


def check_against_torch(tmp_path, arrays, fn, fwd_tol=2e-5, grad_tol=1e-4, grads=True):
    q, k, v = (torch.tensor(arrays[n], dtype=torch.float64, requires_grad=True) for n in "qkv")
    out = fn(q, k, v)
    assert relative_error(np.load(tmp_path / "out.npy"), out.detach().numpy()) < fwd_tol
    if grads:
        (out * torch.tensor(arrays["dout"], dtype=torch.float64)).sum().backward()
        for name, x in zip(["dq", "dk", "dv"], [q, k, v]):
            got = np.load(tmp_path / f"{name}.npy")
            assert got.dtype == np.float32 and got.shape == x.shape
            assert relative_error(got, x.grad.numpy()) < grad_tol, name


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("B,Nq,Nk,H,D,E", [(1, 1, 1, 1, 1, 1), (2, 65, 97, 3, 16, 8), (1, 64, 63, 2, 59, 64)])
def test_softmax_matches_torch(tmp_path, reference, B, Nq, Nk, H, D, E):
    arrays = inputs(tmp_path, B, Nq, Nk, H, D, E)
    proc = run_cli(*run_args(tmp_path, "--op", "softmax", *(["--reference"] if reference else [])))
    assert proc.returncode == 0, proc.stderr
    check_against_torch(tmp_path, arrays, torch_softmax)


def test_softmax_causal_key_lengths_and_lse(tmp_path):
    arrays = inputs(tmp_path, 3, 33, 40, 2, 16, 16)
    proc = run_cli(*run_args(tmp_path, "--op", "softmax", "--causal", "--key-lengths", "40,1,17", "--lse",
                             tmp_path / "lse.npy"))
    assert proc.returncode == 0, proc.stderr
    check_against_torch(tmp_path, arrays, lambda q, k, v: torch_softmax(q, k, v, True, [40, 1, 17]))
    lse = np.load(tmp_path / "lse.npy")
    assert lse.shape == (3, 2, 33)


@pytest.mark.parametrize("reference", [False, True])
# Not N = 1 or D = 1: there φ(q) cancels in the normaliser, dq is O(eps) and no fp32 dq is accurate.
@pytest.mark.parametrize("B,N,H,D,E", [(1, 2, 1, 2, 1), (2, 97, 3, 16, 24), (1, 1000, 1, 64, 59)])
def test_linear_matches_the_seed(tmp_path, reference, B, N, H, D, E):
    arrays = inputs(tmp_path, B, N, N, H, D, E)
    proc = run_cli(*run_args(tmp_path, "--op", "linear", *(["--reference"] if reference else [])))
    assert proc.returncode == 0, proc.stderr
    check_against_torch(tmp_path, arrays, torch_linear)


@pytest.mark.parametrize("op", ["causal", "recurrent"])
def test_causal_linear_matches_torch(tmp_path, op):
    arrays = inputs(tmp_path, 2, 130, 130, 3, 16, 8, dout=op == "causal")
    proc = run_cli(*run_args(tmp_path, "--op", op, dout=op == "causal"))
    assert proc.returncode == 0, proc.stderr
    check_against_torch(tmp_path, arrays, lambda q, k, v: torch_linear(q, k, v, causal=True), grads=op == "causal")


def test_bhnd_layout_is_the_same_math(tmp_path):
    arrays = inputs(tmp_path, 2, 17, 17, 3, 8, 8)
    for name in ["q", "k", "v", "dout"]:
        save(tmp_path / f"{name}.npy", arrays[name].transpose(0, 2, 1, 3))
    proc = run_cli(*run_args(tmp_path, "--op", "softmax", "--layout", "bhnd"))
    assert proc.returncode == 0, proc.stderr
    out = torch_softmax(*(torch.tensor(arrays[n], dtype=torch.float64) for n in "qkv")).numpy()
    got = np.load(tmp_path / "out.npy")
    assert got.shape == (2, 3, 17, 8)
    assert relative_error(got.transpose(0, 2, 1, 3), out) < 2e-5


def test_performer_runs_and_matches_its_oracle(tmp_path):
    inputs(tmp_path, 1, 33, 33, 2, 8, 8)
    fast = run_cli(*run_args(tmp_path, "--op", "performer", "--features", 64, "--seed", 7, dout=False))
    assert fast.returncode == 0, fast.stderr
    fast_out = np.load(tmp_path / "out.npy")
    oracle = run_cli(*run_args(tmp_path, "--op", "performer", "--features", 64, "--seed", 7, "--reference", dout=False))
    assert oracle.returncode == 0, oracle.stderr
    assert relative_error(fast_out, np.load(tmp_path / "out.npy")) < 1e-4


def test_fortran_order_is_read_correctly(tmp_path):
    arrays = inputs(tmp_path, 1, 9, 9, 2, 4, 4)
    np.save(tmp_path / "q.npy", np.asfortranarray(arrays["q"]))
    assert b"'fortran_order': True" in (tmp_path / "q.npy").read_bytes()[:128]
    proc = run_cli(*run_args(tmp_path, "--op", "softmax"))
    assert proc.returncode == 0, proc.stderr
    check_against_torch(tmp_path, arrays, torch_softmax)


def npy_header(descr="<f4", fortran=False, shape=(1, 4, 1, 2)):
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def bad_files():
    good = npy_header() + np.zeros(8, np.float32).tobytes()
    return {
        "truncated data": good[:-5],
        "truncated header": good[:20],
        "empty": b"",
        "float64": npy_header("<f8") + np.zeros(8, np.float64).tobytes(),
        "int32": npy_header("<i4") + np.zeros(8, np.int32).tobytes(),
        "rank 3": npy_header(shape=(4, 1, 2)) + np.zeros(8, np.float32).tobytes(),
        "negative dim": npy_header(shape=(1, -4, 1, 2)) + np.zeros(8, np.float32).tobytes(),
        "huge dims": npy_header(shape=(1 << 40, 1 << 40, 1, 2)) + np.zeros(8, np.float32).tobytes(),
        "huge header length": b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 100,
        "version 9": b"\x93NUMPY\x09\x00" + good[8:],
        "not a dict": good[:10] + b"[1, 2, 3]".ljust(len(good) - 10 - 32, b" ") + good[-32:],
        "bad magic": b"\x93NUMPZ" + good[6:],
        "garbage": bytes(range(256)) * 3,
    }


@pytest.mark.parametrize("kind", list(bad_files()))
def test_bad_npy_gets_a_one_line_error(tmp_path, kind):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    (tmp_path / "k.npy").write_bytes(bad_files()[kind])
    proc = run_cli(*run_args(tmp_path, dout=False))
    line = assert_one_line_error(proc, 1)
    assert "k.npy" in line
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize(
    "name,shape,expected",
    [("k", (1, 4, 1, 3), "head dim"), ("v", (1, 5, 1, 2), "sequence"), ("k", (2, 4, 1, 2), "batch"),
     ("v", (1, 4, 2, 2), "heads"), ("dout", (1, 4, 1, 3), "head dim")],
)
def test_mismatched_shapes_name_the_file(tmp_path, name, shape, expected):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2)
    save(tmp_path / f"{name}.npy", np.zeros(shape))
    line = assert_one_line_error(run_cli(*run_args(tmp_path)), 1)
    assert f"{name}.npy" in line and expected in line


def test_missing_file(tmp_path):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    os.remove(tmp_path / "v.npy")
    line = assert_one_line_error(run_cli(*run_args(tmp_path, dout=False)), 1)
    assert "v.npy" in line


def test_key_lengths_are_checked_as_flags(tmp_path):
    inputs(tmp_path, 2, 4, 4, 1, 2, 2, dout=False)
    assert_one_line_error(run_cli(*run_args(tmp_path, "--key-lengths", "1", dout=False)), 2)
    assert_one_line_error(run_cli(*run_args(tmp_path, "--key-lengths", "1,5", dout=False)), 2)


def test_failure_leaves_old_outputs_untouched_and_no_temporaries(tmp_path):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2)
    (tmp_path / "out.npy").write_bytes(b"previous contents")
    save(tmp_path / "dout.npy", np.zeros((1, 4, 1, 7)))  # wrong E: fails after q, k, v loaded fine
    assert_one_line_error(run_cli(*run_args(tmp_path)), 1)
    assert (tmp_path / "out.npy").read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dout.npy", "k.npy", "out.npy", "q.npy", "v.npy"]


def test_unwritable_output_fails_cleanly(tmp_path):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    args = run_args(tmp_path, dout=False)
    args[args.index(tmp_path / "out.npy")] = tmp_path / "no" / "such" / "dir" / "out.npy"
    proc = run_cli(*args)
    line = assert_one_line_error(proc, 1)
    assert "out.npy" in line


def test_oversized_input_is_refused_before_loading(tmp_path):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    # A header that claims 2^44 floats: refused on the estimate (exit 3), before reading any data.
    (tmp_path / "q.npy").write_bytes(npy_header(shape=(1, 1 << 22, 1 << 10, 4)))
    line = assert_one_line_error(run_cli(*run_args(tmp_path, dout=False)), 3)
    assert re.search(MEMORY_BOUND, line), line  # whichever bound is tightest here


def test_random_header_mutations_never_crash(tmp_path):
    """A corpus-driven fuzz of the .npy path through the command: each mutation exits 0, 1 or 3."""
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    good = (tmp_path / "q.npy").read_bytes()
    rng = np.random.default_rng(1234)
    for i in range(120):
        data = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            kind = rng.integers(0, 3)
            pos = int(rng.integers(0, len(data)))
            if kind == 0:
                data[pos] ^= 1 << int(rng.integers(0, 8))
            elif kind == 1:
                data = data[:pos]
            else:
                data[pos:pos] = bytes(rng.integers(0, 256, int(rng.integers(1, 8))).astype(np.uint8))
        (tmp_path / "q.npy").write_bytes(bytes(data))
        proc = run_cli(*run_args(tmp_path, dout=False))
        assert proc.returncode in (0, 1, 3), (i, proc.returncode, proc.stderr)
        if proc.returncode:
            assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
