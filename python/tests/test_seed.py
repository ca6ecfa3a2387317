"""linattn against the seed's own PyTorch code (shared/seed/linear-attention-notes.md), outputs and
autograd gradients, on shapes with odd N and odd D. The seed runs in float64 on the same float32 inputs."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt
from linattn_test_support import rel_err, seed_linear, seed_softmax

# (B, Nq, Nk, H, D, E): odd lengths and head dims, E ≠ D, cross-attention lengths.
SHAPES = [
    (1, 1, 1, 1, 1, 1),
    (2, 63, 63, 3, 59, 17),
    (1, 97, 97, 1, 16, 64),
    (3, 65, 65, 2, 33, 7),
    (1, 1000, 1000, 1, 64, 64),
    (2, 5, 97, 3, 128, 59),
    (1, 64, 1, 3, 15, 16),
]


def inputs(shape, seed_value):
    B, Nq, Nk, H, D, E = shape
    rng = np.random.default_rng(seed_value)
    return (rng.uniform(-1, 1, (B, Nq, H, D)).astype(np.float32),
            rng.uniform(-1, 1, (B, Nk, H, D)).astype(np.float32),
            rng.uniform(-1, 1, (B, Nk, H, E)).astype(np.float32),
            rng.uniform(-1, 1, (B, Nq, H, E)).astype(np.float32))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_matches_seed(seed, shape):
    q, k, v, _ = inputs(shape, 1)
    want = seed_softmax(seed, *(torch.from_numpy(x).double() for x in (q, k, v)))
    assert rel_err(linattn.softmax_attention(q, k, v), want) < 2e-6


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_linear_matches_seed(seed, shape):
    q, k, v, _ = inputs(shape, 2)
    want = seed_linear(seed, *(torch.from_numpy(x).double() for x in (q, k, v)))
    assert rel_err(linattn.linear_attention(q, k, v), want) < 2e-6


@pytest.mark.parametrize("attention", ["softmax", "linear"])
@pytest.mark.parametrize("shape", SHAPES[:4] + SHAPES[5:], ids=str)
def test_gradients_match_seed_autograd(seed, attention, shape):
    """loss = Σ out ∘ w through linattn.torch (float32, C++ backward) and through the seed in float64
    (torch autograd): dq, dk, dv agree."""
    q, k, v, w = inputs(shape, 3)
    ours = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    theirs = [torch.from_numpy(x).double().requires_grad_() for x in (q, k, v)]
    ours_fn = lt.softmax_attention if attention == "softmax" else lt.linear_attention
    seed_fn = seed_softmax if attention == "softmax" else seed_linear
    (ours_fn(*ours, layout="bnhd") * torch.from_numpy(w)).sum().backward()
    (seed_fn(seed, *theirs) * torch.from_numpy(w).double()).sum().backward()
    for name, a, b in zip("qkv", ours, theirs):
        scale = b.grad.abs().max().item()
        if shape[2] == 1 and name in "qk":
            # With one key, out = v (softmax) or v·(1 − eps/φ(q)ᵀφ(k)) (linear): dq and dk are 0 or
            # O(eps), cancellations of terms the size of dv that float32 resolves to ~1e-7 of it.
            scale = theirs[2].grad.abs().max().item()
        assert (a.grad.double() - b.grad).abs().max().item() <= 2e-5 * scale, name
