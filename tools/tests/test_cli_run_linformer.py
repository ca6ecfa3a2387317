"""`linattn run --op linformer`: E (and F) from .npy files, forward and backward (dq, dk, dv, dE, dF) and
the log-sum-exp against PyTorch's autograd in fp64, through the fast operator and --reference, and the
flags and files it refuses."""
import numpy as np
import pytest
import torch

from conftest import assert_one_line_error, relative_error, run_cli
from test_cli_run import inputs, run_args, save


def torch_linformer(q, k, v, E, F, key_lengths=None, scale=None):
    """k̃ = E[:, :, :Nk] k and ṽ = F[:, :, :Nk] v over each batch's visible keys, then softmax over the P rows.
    q, k, v: [B, N, H, D]; E, F: [H or 1, P, N_max]. Returns out [B, Nq, H, E] and lse [B, H, Nq]."""
    B, Nk, H, D = k.shape
    lengths = [Nk] * B if key_lengths is None else key_lengths
    keep = (torch.arange(Nk)[None, :] < torch.tensor(lengths)[:, None]).to(k.dtype)[:, :, None, None]
    E, F = E.expand(H, -1, -1), F.expand(H, -1, -1)
    kp = torch.einsum("hpj,bjhd->bhpd", E[:, :, :Nk], k * keep)
    vp = torch.einsum("hpj,bjhd->bhpd", F[:, :, :Nk], v * keep)
    scores = torch.einsum("bihd,bhpd->bhip", q, kp) * (D ** -0.5 if scale is None else scale)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhip,bhpe->bihe", torch.softmax(scores, dim=-1), vp)
    return out, lse


def projections(tmp_path, heads, P, N_max, separate_F, seed=3):
    rng = np.random.default_rng(seed)
    shape = (heads, P, N_max) if heads else (P, N_max)  # heads = 0: one [P, N_max] for all heads
    E = (rng.standard_normal(shape) / np.sqrt(N_max)).astype(np.float32)
    save(tmp_path / "E.npy", E)
    F = None
    if separate_F:
        F = (rng.standard_normal(shape) / np.sqrt(N_max)).astype(np.float32)
        save(tmp_path / "F.npy", F)
    return E, F


def linformer_args(tmp_path, *extra, separate_F=True, dout=True):
    args = run_args(tmp_path, "--op", "linformer", "--proj-e", tmp_path / "E.npy", *extra, dout=dout)
    return args + (["--proj-f", tmp_path / "F.npy"] if separate_F else [])


# (B, Nq, Nk, H, D, E, P, N_max, heads of E (0: a [P, N_max] file), separate F, key lengths)
CASES = [
    (1, 1, 1, 1, 1, 1, 1, 1, 1, True, None),
    (2, 65, 63, 3, 16, 8, 17, 97, 3, True, [63, 1]),
    (3, 33, 64, 2, 59, 64, 64, 64, 0, False, [64, 5, 30]),
    (1, 97, 97, 2, 8, 5, 7, 100, 1, True, None),
]


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_linformer_matches_torch(tmp_path, reference, case):
    B, Nq, Nk, H, D, Ev, P, N_max, heads, separate_F, lengths = case
    arrays = inputs(tmp_path, B, Nq, Nk, H, D, Ev)
    E, F = projections(tmp_path, heads, P, N_max, separate_F)
    extra = ["--lse", tmp_path / "lse.npy"] + (["--key-lengths", ",".join(map(str, lengths))] if lengths else [])
    proc = run_cli(*linformer_args(tmp_path, *extra, *(["--reference"] if reference else []), separate_F=separate_F))
    assert proc.returncode == 0, proc.stderr
    q, k, v = (torch.tensor(arrays[n], dtype=torch.float64, requires_grad=True) for n in "qkv")
    e = torch.tensor(E, dtype=torch.float64, requires_grad=True)
    f = torch.tensor(F, dtype=torch.float64, requires_grad=True) if separate_F else e
    out, lse = torch_linformer(q, k, v, e.reshape(-1, P, N_max), f.reshape(-1, P, N_max), lengths)
    assert relative_error(np.load(tmp_path / "out.npy"), out.detach().numpy()) < 2e-5
    assert relative_error(np.load(tmp_path / "lse.npy"), lse.detach().numpy()) < 2e-5
    (out * torch.tensor(arrays["dout"], dtype=torch.float64)).sum().backward()
    grads = {"dq": q, "dk": k, "dv": v, "dE": e, **({"dF": f} if separate_F else {})}
    for name, x in grads.items():
        got = np.load(tmp_path / f"{name}.npy")
        assert got.dtype == np.float32 and got.shape == x.shape, name
        assert relative_error(got, x.grad.numpy()) < 1e-4, name
    assert (tmp_path / "dF.npy").exists() == separate_F


def test_identity_projection_is_softmax(tmp_path):
    inputs(tmp_path, 2, 9, 9, 2, 4, 4, dout=False)
    save(tmp_path / "E.npy", np.eye(9))
    assert run_cli(*linformer_args(tmp_path, separate_F=False, dout=False)).returncode == 0
    linformer = np.load(tmp_path / "out.npy")
    assert run_cli(*run_args(tmp_path, "--op", "softmax", dout=False)).returncode == 0
    assert relative_error(linformer, np.load(tmp_path / "out.npy")) < 1e-6


def test_scale_reaches_the_operator(tmp_path):
    arrays = inputs(tmp_path, 1, 7, 5, 2, 4, 3, dout=False)
    E, F = projections(tmp_path, 2, 3, 6, True)
    assert run_cli(*linformer_args(tmp_path, "--scale", 0.3, dout=False)).returncode == 0
    q, k, v = (torch.tensor(arrays[n], dtype=torch.float64) for n in "qkv")
    out, _ = torch_linformer(q, k, v, torch.tensor(E, dtype=torch.float64), torch.tensor(F, dtype=torch.float64),
                             scale=0.3)
    assert relative_error(np.load(tmp_path / "out.npy"), out.numpy()) < 2e-5


def test_gradient_paths_and_layout(tmp_path):
    arrays = inputs(tmp_path, 1, 6, 6, 2, 4, 3)
    for name in ["q", "k", "v", "dout"]:
        save(tmp_path / f"{name}.npy", arrays[name].transpose(0, 2, 1, 3))
    projections(tmp_path, 2, 3, 8, True)
    proc = run_cli(*linformer_args(tmp_path, "--layout", "bhnd", "--dproj-e", tmp_path / "gE.npy", "--dproj-f",
                                   tmp_path / "gF.npy"))
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "out.npy").shape == (1, 2, 6, 3)
    assert np.load(tmp_path / "gE.npy").shape == (2, 3, 8) and np.load(tmp_path / "gF.npy").shape == (2, 3, 8)
    assert not (tmp_path / "dE.npy").exists()


@pytest.mark.parametrize("extra,op,message", [
    ([], "linformer", "--proj-e: --op linformer needs the projection E"),
    (["--proj-e", "E.npy"], "softmax", "apply to --op linformer"),
    (["--proj-e", "E.npy", "--causal"], "linformer", "--causal: --op linformer has no causal mode"),
    (["--proj-e", "E.npy", "--dproj-f", "x.npy"], "linformer", "--dproj-f needs --proj-f"),
    (["--proj-e", "E.npy", "--feature-map", "relu"], "linformer", "--feature-map applies to the linear operators"),
    (["--proj-e", "E.npy", "--dproj-e", "x.npy"], "linformer", "need --dout"),
    (["--scale", "0.5"], "linear", "--scale applies to --op softmax and linformer"),
    (["--lse", "lse.npy"], "causal", "--lse applies to --op softmax and linformer"),
])
def test_bad_flags_exit_2(tmp_path, extra, op, message):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    projections(tmp_path, 1, 2, 4, False)
    extra = [tmp_path / x if str(x).endswith(".npy") else x for x in extra]
    line = assert_one_line_error(run_cli(*run_args(tmp_path, "--op", op, *extra, dout=False)), 2)
    assert message in line


@pytest.mark.parametrize("E_shape,F_shape,message", [
    ((4,), None, "--proj-e"),  # rank 1
    ((2, 2, 2, 4), None, "has rank 4, expected [P, N_max] or [H, P, N_max]"),
    ((3, 2, 4), None, "has 3 heads, expected 2 (--q's heads) or 1"),
    ((2, 3), None, "has N_max = 3 columns, expected ≥ 4 (--k's sequence length)"),
    ((2, 0, 4), None, "has an empty axis"),
    ((2, 2, 4), (2, 2, 5), "--proj-f"),
])
def test_bad_projection_files_exit_1(tmp_path, E_shape, F_shape, message):
    inputs(tmp_path, 1, 4, 4, 2, 2, 2, dout=False)
    save(tmp_path / "E.npy", np.zeros(E_shape))
    if F_shape:
        save(tmp_path / "F.npy", np.zeros(F_shape))
    line = assert_one_line_error(run_cli(*linformer_args(tmp_path, separate_F=bool(F_shape), dout=False)), 1)
    assert message in line and ("F.npy" if F_shape else "E.npy") in line
    assert not (tmp_path / "out.npy").exists()


def test_bad_projection_npy_exits_1(tmp_path):
    inputs(tmp_path, 1, 4, 4, 1, 2, 2, dout=False)
    (tmp_path / "E.npy").write_bytes(b"\x93NUMPY garbage")
    line = assert_one_line_error(run_cli(*linformer_args(tmp_path, separate_F=False, dout=False)), 1)
    assert "E.npy" in line
