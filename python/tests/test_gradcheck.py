"""torch.autograd.gradcheck through linattn.torch: float64 tensors run the fp64 oracle, so the check
runs at gradcheck's default fp64 tolerances; float32 tensors run the fast operators and are checked
with tolerances sized for float32 central differences (see test_float32_gradcheck)."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt

# (B, Nq, Nk, H, D, E, key_lengths)
CASES = [
    (1, 3, 3, 1, 2, 2, None),
    (2, 3, 5, 2, 3, 2, [5, 2]),
    (2, 5, 3, 1, 4, 1, [3, 1]),
]


def make(case, dtype, seed=0):
    B, Nq, Nk, H, D, E, lengths = case
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, Nq, H, D), (B, Nk, H, D), (B, Nk, H, E)]
    return [(torch.rand(s, generator=g, dtype=dtype) * 2 - 1).requires_grad_() for s in shapes], lengths


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_softmax_gradcheck_fp64(case, causal):
    (q, k, v), lengths = make(case, torch.float64)
    fn = lambda q, k, v: lt.softmax_attention(q, k, v, causal=causal, key_lengths=lengths, scale=0.7, layout="bnhd")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("feature_map", ["elu", "relu", "identity"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_linear_gradcheck_fp64(case, causal, feature_map):
    (q, k, v), lengths = make(case, torch.float64, seed=1)
    if feature_map == "identity":  # keep the normaliser away from zero
        q, k = [x.detach().abs().add(0.1).requires_grad_() for x in (q, k)]
    fn = lambda q, k, v: lt.linear_attention(  # noqa: E731
        q, k, v, feature_map=feature_map, causal=causal, key_lengths=lengths, layout="bnhd")
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.filterwarnings("ignore:Input #\\d requires gradient and is not a double")
@pytest.mark.parametrize("attention", ["softmax", "linear"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_float32_gradcheck(case, attention):
    """The fast fp32 backward against central differences of the fp32 forward. A step h = 1e-2 on
    outputs of size ~1 leaves a rounding error of about 2⁻²⁴/h ≈ 1e-5 and a truncation error of
    about h²·|f'''| ≈ 1e-4 per Jacobian entry, so atol = rtol = 2e-3 still catches any wrong term
    (the entries are ~0.1 to 1)."""
    (q, k, v), lengths = make(case, torch.float32, seed=2)
    fn = lt.softmax_attention if attention == "softmax" else lt.linear_attention
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, layout="bnhd", causal=True, key_lengths=lengths), (q, k, v),
                                    eps=1e-2, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_torch_gradients_are_the_numpy_backward(attention):
    """linattn.torch hands the softmax forward's out and lse to the backward instead of recomputing
    them: the gradients are still bitwise those of the numpy backward, which recomputes."""
    (q, k, v), lengths = make((2, 33, 65, 3, 17, 9, [65, 7]), torch.float32, seed=3)
    dout = torch.rand(2, 33, 3, 9, generator=torch.Generator().manual_seed(4))
    fn = lt.softmax_attention if attention == "softmax" else lt.linear_attention
    fn(q, k, v, layout="bnhd", causal=True, key_lengths=lengths).backward(dout)
    backward = linattn.softmax_attention_backward if attention == "softmax" else linattn.linear_attention_backward
    want = backward(*(x.detach().numpy() for x in (q, k, v, dout)), causal=True, key_lengths=lengths)
    for x, w in zip((q, k, v), want):
        assert np.array_equal(x.grad.numpy(), w)


def test_changing_the_saved_output_in_place_is_caught():
    (q, k, v), _ = make(CASES[0], torch.float32)
    out = lt.softmax_attention(q, k, v, layout="bnhd")
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
