"""linformer_attention: keys and values projected along the sequence (E, F), then exact softmax
attention; against torch's own math, its autograd, gradcheck, and its errors."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt
from linattn_test_support import rel_err, torch_softmax

pytestmark = pytest.mark.skipif(not hasattr(linattn, "linformer_attention"),
                                reason="built without include/linattn/linformer.hpp")


def torch_linformer(q, k, v, E, F=None, key_lengths=None, scale=None):
    """k̃ = E[:, :Nk] k and ṽ = F[:, :Nk] v over the visible keys, then softmax attention over the P rows."""
    B, Nk, H, _ = k.shape
    F = E if F is None else F
    if E.dim() == 2:
        E, F = E.expand(H, *E.shape), F.expand(H, *F.shape)
    lengths = torch.full((B,), Nk) if key_lengths is None else torch.as_tensor(np.asarray(key_lengths))
    keep = (torch.arange(Nk)[None, :] < lengths[:, None]).to(k.dtype)[:, :, None, None]  # [B, Nk, 1, 1]
    kp = torch.einsum("hpj,bjhd->bphd", E[:, :, :Nk], k * keep)
    vp = torch.einsum("hpj,bjhd->bphd", F[:, :, :Nk], v * keep)
    return torch_softmax(q, kp, vp, scale=scale)


# (B, Nq, Nk, H, D, Ev, P, N_max, per_head, separate_F, key_lengths)
CASES = [
    (1, 1, 1, 1, 1, 1, 1, 1, False, True, None),
    (2, 63, 65, 3, 59, 16, 17, 97, True, True, [65, 1]),
    (3, 97, 64, 2, 16, 33, 64, 64, False, False, [0, 64, 30]),
    (1, 5, 1000, 1, 64, 64, 32, 1000, True, False, None),
]


def make(case, seed=0):
    B, Nq, Nk, H, D, Ev, P, N_max, per_head, separate_F, lengths = case
    rng = np.random.default_rng(seed)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    eshape = (H, P, N_max) if per_head else (P, N_max)
    E = u(*eshape) / np.float32(np.sqrt(Nk))  # a float32 divisor: numpy 2 would promote to float64
    F = u(*eshape) / np.float32(np.sqrt(Nk)) if separate_F else None
    return u(B, Nq, H, D), u(B, Nk, H, D), u(B, Nk, H, Ev), E, F, lengths


def t64(x):
    return None if x is None else torch.from_numpy(np.asarray(x)).double()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_backward_against_torch(case):
    q, k, v, E, F, lengths = make(case)
    got = linattn.linformer_attention(q, k, v, E, F, key_lengths=lengths)
    theirs = [t64(x).requires_grad_() if x is not None else None for x in (q, k, v, E, F)]
    want = torch_linformer(*theirs, key_lengths=lengths)
    assert rel_err(got, want.detach()) < 5e-6
    dout = np.random.default_rng(1).uniform(-1, 1, got.shape).astype(np.float32)
    (want * t64(dout)).sum().backward()
    grads = linattn.linformer_attention_backward(q, k, v, E, F, dout, key_lengths=lengths)
    assert (grads[4] is None) == (F is None)
    for name, g, t in zip(["dq", "dk", "dv", "dE", "dF"], grads, theirs):
        if t is not None:
            assert rel_err(g, t.grad) < 2e-5, name


def test_identity_projection_is_softmax_attention():
    q, k, v, *_ = make(CASES[2])
    eye = np.eye(64, dtype=np.float32)
    np.testing.assert_allclose(linattn.linformer_attention(q, k, v, eye, eye), linattn.softmax_attention(q, k, v),
                               rtol=0, atol=2e-6)


def test_torch_autograd_and_gradcheck():
    q, k, v, E, F, lengths = make(CASES[1])
    ours = [torch.from_numpy(x).requires_grad_() for x in (q, k, v, E, F)]
    (lt.linformer_attention(*ours, key_lengths=lengths, layout="bnhd").square()).sum().backward()
    grads = linattn.linformer_attention_backward(q, k, v, E, F, 2 * linattn.linformer_attention(q, k, v, E, F,
                                                                                                 key_lengths=lengths),
                                                 key_lengths=lengths)
    for t, g in zip(ours, grads):
        assert rel_err(t.grad, g) < 1e-6
    g = torch.Generator().manual_seed(0)
    small = [(torch.rand(s, generator=g, dtype=torch.float64) - 0.5).requires_grad_()
             for s in ((2, 3, 2, 3), (2, 4, 2, 3), (2, 4, 2, 2), (2, 3, 5))]
    fn = lambda q, k, v, E: lt.linformer_attention(q, k, v, E, key_lengths=[4, 2], layout="bnhd")  # noqa: E731
    assert torch.autograd.gradcheck(fn, small)


def test_linformer_errors():
    q, k, v, E, F, _ = make(CASES[1])
    with pytest.raises(TypeError, match="^E: expected a numpy.ndarray of float32, got list$"):
        linattn.linformer_attention(q, k, v, E.tolist(), F)
    with pytest.raises(ValueError, match="E has an empty axis"):
        linattn.reference.linformer_attention(*(x.astype(np.float64) for x in (q, k, v, E[:, :0], F[:, :0])))
    with pytest.raises(TypeError, match="^E: expected float32, got float64$"):
        linattn.linformer_attention(q, k, v, E.astype(np.float64), F)
    with pytest.raises(ValueError, match=r"^F: expected 2 dims \[P, N_max\] or 3 dims \[H, P, N_max\], got 1$"):
        linattn.linformer_attention(q, k, v, E, F[0, 0])
    with pytest.raises(ValueError, match=r"^F: shape \(3, 17, 96\), expected \(3, 17, 97\) \(E's shape\)$"):
        linattn.linformer_attention(q, k, v, E, F[..., :96])
    for fn in (linattn.linformer_attention, linattn.reference.linformer_attention):
        cast = (lambda x: x) if fn is linattn.linformer_attention else (lambda x: x.astype(np.float64))
        with pytest.raises(ValueError, match="65"):  # 65 keys, N_max = 60
            fn(*(cast(x) for x in (q, k, v, E[..., :60], F[..., :60])))
        with pytest.raises(ValueError, match=r"\bE\b"):  # 2 heads of projections for 3 heads
            fn(*(cast(x) for x in (q, k, v, E[:2], F[:2])))
