"""Causal masks, key padding and cross-attention against torch's own math (float64, masked [Nq, Nk]
products), in all three memory layouts; gradients against torch autograd of the same math."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt
from linattn_test_support import LAYOUTS, layout_array, rel_err, torch_linear, torch_softmax

# (B, Nq, Nk, H, D, E, key_lengths): self and cross lengths, Nq < Nk and Nq > Nk (bottom-right causal
# leaves the first Nq − Nk rows with no key), key lengths from 0 and 1 up to Nk.
CASES = [
    (1, 1, 1, 1, 1, 1, None),
    (2, 65, 65, 3, 59, 16, [65, 1]),
    (1, 63, 97, 1, 64, 128, [40]),
    (2, 97, 63, 3, 16, 1, None),
    (3, 64, 64, 1, 17, 33, [0, 64, 63]),
    (1, 1000, 1000, 1, 16, 16, [997]),
    (3, 2, 130, 2, 8, 5, [130, 2, 1]),
]


def case_inputs(case, layout, lo=-1.0, seed=0):
    B, Nq, Nk, H, D, E, lengths = case
    rng = np.random.default_rng(seed)
    q = layout_array(rng.uniform(lo, 1, (B, Nq, H, D)), layout)
    k = layout_array(rng.uniform(lo, 1, (B, Nk, H, D)), layout)
    v = layout_array(rng.uniform(-1, 1, (B, Nk, H, E)), layout)
    return q, k, v, (None if lengths is None else np.array(lengths, dtype=np.int64))


def doubles(*arrays):
    return [torch.from_numpy(np.array(a)).double() for a in arrays]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_softmax_against_torch(case, causal, layout):
    q, k, v, lengths = case_inputs(case, layout)
    got = linattn.softmax_attention(q, k, v, causal=causal, key_lengths=lengths)
    want = torch_softmax(*doubles(q, k, v), causal=causal, key_lengths=lengths)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert rel_err(got, want) < 2e-6


@pytest.mark.parametrize("feature_map", ["elu", "relu", "identity"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_linear_against_torch(case, causal, feature_map):
    # identity features can be negative: positive inputs keep its normaliser away from 0.
    lo = 0.0 if feature_map == "identity" else -1.0
    layout = LAYOUTS[CASES.index(case) % 3]
    q, k, v, lengths = case_inputs(case, layout, lo=lo)
    got = linattn.linear_attention(q, k, v, feature_map=feature_map, causal=causal, key_lengths=lengths)
    want = torch_linear(*doubles(q, k, v), feature_map, causal=causal, key_lengths=lengths)
    assert rel_err(got, want) < 1e-5


def test_scale_and_eps_are_used():
    q, k, v, _ = case_inputs(CASES[1], "bnhd")
    got = linattn.softmax_attention(q, k, v, scale=0.3)
    assert rel_err(got, torch_softmax(*doubles(q, k, v), scale=0.3)) < 2e-6
    assert rel_err(got, torch_softmax(*doubles(q, k, v))) > 1e-3
    got = linattn.linear_attention(q, k, v, eps=10.0)
    assert rel_err(got, torch_linear(*doubles(q, k, v), eps=10.0)) < 2e-6
    assert rel_err(got, torch_linear(*doubles(q, k, v))) > 1e-3


def test_rows_that_see_no_key_are_zero():
    q, k, v, _ = case_inputs(CASES[3], "bnhd")  # Nq = 97 > Nk = 63: causal rows 0..33 see nothing
    for out in (linattn.softmax_attention(q, k, v, causal=True),
                linattn.linear_attention(q, k, v, causal=True)):
        assert np.all(out[:, :34] == 0) and np.all(out[:, 34:].any(axis=-1))
    lengths = np.array([0, 63])
    out = linattn.softmax_attention(q, k, v, key_lengths=lengths)
    assert np.all(out[0] == 0) and np.all(out[1].any(axis=-1))


@pytest.mark.parametrize("attention", ["softmax", "linear"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[4], CASES[6]], ids=str)
def test_gradients_against_torch_autograd(case, causal, attention):
    q, k, v, lengths = case_inputs(case, LAYOUTS[CASES.index(case) % 3], seed=5)
    w = np.random.default_rng(6).uniform(-1, 1, (case[0], case[1], case[3], case[5]))
    ours = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    theirs = [x.requires_grad_() for x in doubles(q, k, v)]
    if attention == "softmax":
        out = lt.softmax_attention(*ours, causal=causal, key_lengths=lengths, layout="bnhd")
        want = torch_softmax(*theirs, causal=causal, key_lengths=lengths)
    else:
        out = lt.linear_attention(*ours, causal=causal, key_lengths=lengths, layout="bnhd")
        want = torch_linear(*theirs, causal=causal, key_lengths=lengths)
    (out * torch.from_numpy(w).float()).sum().backward()
    (want * torch.from_numpy(w)).sum().backward()
    for name, a, b in zip("qkv", ours, theirs):
        assert rel_err(a.grad, b.grad) < 2e-5, name
