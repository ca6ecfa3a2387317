"""linattn.torch.scaled_dot_product_attention against torch's F.scaled_dot_product_attention on
random cases (Nq ≠ Nk, top-left is_causal, bool and float masks with broadcasting, GQA, scale, 3-d),
outputs and gradients; its dropout; and linear_dot_product_attention against its formula."""

import pytest
import torch
import torch.nn.functional as F

import linattn.torch as lt


def tensors(shapes, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def compare(kwargs, shapes, seed, atol=2e-5, mask=None):
    ours = tensors(shapes, seed)
    theirs = [x.detach().clone().requires_grad_() for x in ours]
    got = lt.scaled_dot_product_attention(*ours, attn_mask=mask, **kwargs)
    want = F.scaled_dot_product_attention(*theirs, attn_mask=mask, **kwargs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-4, equal_nan=True)
    w = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed + 1))
    finite = torch.isfinite(want)
    (got.nan_to_num() * w * finite).sum().backward()
    (want.nan_to_num() * w * finite).sum().backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, atol=atol * 10, rtol=1e-4)


# (B, Hq, Hk, L, S, E, Ev)
SHAPES = [(1, 1, 1, 5, 9, 8, 8), (2, 3, 3, 9, 5, 16, 7), (2, 4, 4, 33, 33, 32, 32), (1, 2, 2, 1, 17, 4, 4),
          (3, 2, 2, 17, 1, 5, 6), (1, 8, 2, 20, 31, 16, 16), (2, 6, 3, 64, 100, 8, 12)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_kernel_path_matches_torch(shape, is_causal, scale):
    B, Hq, Hk, L, S, E, Ev = shape
    kwargs = dict(is_causal=is_causal, scale=scale, enable_gqa=Hq != Hk)
    compare(kwargs, [(B, Hq, L, E), (B, Hk, S, E), (B, Hk, S, Ev)], seed=sum(shape))


def test_top_left_causal_differs_from_bottom_right_by_what_the_issue_says():
    q, k, v = (x.detach() for x in tensors([(1, 1, 5, 8), (1, 1, 9, 8), (1, 1, 9, 8)], 0))
    top_left = lt.scaled_dot_product_attention(q, k, v, is_causal=True)
    bottom_right = lt.softmax_attention(q, k, v, layout="bhnd", causal=True)
    torch.testing.assert_close(top_left, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert (top_left - bottom_right).abs().max() > 0.1


MASK_SHAPES = [(2, 3, 7, 11), (1, 1, 7, 11), (7, 11), (2, 1, 1, 11), (1, 3, 7, 1), (3, 1, 11)]


@pytest.mark.parametrize("mask_shape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast_as_torch(mask_shape, kind):
    g = torch.Generator().manual_seed(len(mask_shape))
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=g) > 0.3
    else:
        mask = torch.randn(mask_shape, generator=g) * 2
    compare(dict(), [(2, 3, 7, 5), (2, 3, 11, 5), (2, 3, 11, 6)], seed=3, mask=mask)


def test_fully_masked_rows_as_torch():
    mask = torch.ones(7, 11, dtype=torch.bool)
    mask[2] = False
    compare(dict(), [(1, 2, 7, 5), (1, 2, 11, 5), (1, 2, 11, 5)], seed=4, mask=mask)


def test_gqa_mask_and_3d():
    mask = torch.randn(1, 6, 1)
    compare(dict(enable_gqa=True), [(2, 6, 6, 4), (2, 2, 9, 4), (2, 2, 9, 4)], seed=5, mask=mask)
    for is_causal in (False, True):
        compare(dict(is_causal=is_causal), [(3, 7, 4), (3, 10, 4), (3, 10, 2)], seed=6)


def test_float64_and_bfloat16():
    ours = tensors([(1, 2, 6, 4), (1, 2, 8, 4), (1, 2, 8, 4)], 7, torch.float64)
    torch.testing.assert_close(lt.scaled_dot_product_attention(*ours, is_causal=True),
                               F.scaled_dot_product_attention(*ours, is_causal=True))
    assert torch.autograd.gradcheck(lambda q, k, v: lt.scaled_dot_product_attention(q, k, v, is_causal=True), ours)
    half = [x.detach().bfloat16() for x in ours]
    torch.testing.assert_close(lt.scaled_dot_product_attention(*half), F.scaled_dot_product_attention(*half),
                               atol=2e-2, rtol=2e-2)


def test_errors_as_torch():
    q, k, v = (x.detach() for x in tensors([(1, 4, 6, 4), (1, 2, 8, 4), (1, 2, 8, 4)], 8))
    with pytest.raises(ValueError, match="enable_gqa=True"):
        lt.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError, match="is_causal"):
        lt.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(6, 8, dtype=torch.bool), is_causal=True,
                                        enable_gqa=True)
    with pytest.raises(ValueError, match=r"attn_mask: expected at least 2 dims \[..., L, S\], got shape \[8\]"):
        lt.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8), enable_gqa=True)
    with pytest.raises(ValueError, match="dropout_p"):
        lt.scaled_dot_product_attention(q, k, v, dropout_p=1.5, enable_gqa=True)


def test_dropout_is_unbiased_and_differentiable():
    q, k, v = tensors([(1, 2, 6, 4), (1, 2, 8, 4), (1, 2, 8, 4)], 9)
    torch.manual_seed(0)
    draws = torch.stack([lt.scaled_dot_product_attention(q, k, v, dropout_p=0.5) for _ in range(2000)])
    plain = lt.scaled_dot_product_attention(q, k, v)
    assert not torch.equal(draws[0], draws[1])
    torch.testing.assert_close(draws.mean(0), plain, atol=0.12, rtol=0)  # 4 standard errors of the worst element (0.03)
    draws[0].sum().backward()
    assert all(x.grad is not None and torch.isfinite(x.grad).all() for x in (q, k, v))
    assert torch.equal(lt.scaled_dot_product_attention(q, k, v, dropout_p=1.0), torch.zeros_like(plain))


def linear_formula(q, k, v, is_causal, eps=1e-6):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    scores = fq @ fk.transpose(-2, -1)
    if is_causal:
        scores = scores * torch.ones(q.shape[-2], k.shape[-2]).tril()
    return (scores @ v) / (scores.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("L,S", [(5, 9), (9, 5), (16, 16)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_counterpart(L, S, is_causal):
    q, k, v = tensors([(2, 3, L, 4), (2, 3, S, 4), (2, 3, S, 5)], L * S, torch.float64)
    got = lt.linear_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(got, linear_formula(q, k, v, is_causal))
    q32, k32, v32 = (x.detach().float() for x in (q, k, v))
    torch.testing.assert_close(lt.linear_dot_product_attention(q32, k32, v32, is_causal=is_causal),
                               linear_formula(q32, k32, v32, is_causal), atol=1e-5, rtol=1e-4)
    assert torch.autograd.gradcheck(
        lambda q, k, v: lt.linear_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v))


def test_linear_counterpart_gqa():
    q, k, v = (x.detach() for x in tensors([(1, 4, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4)], 10))
    got = lt.linear_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    want = linear_formula(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("seed", range(20))
def test_random_cases(seed):
    """Random shapes, options and masks, all of torch's arguments but dropout."""
    g = torch.Generator().manual_seed(100 + seed)
    r = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))  # noqa: E731
    B, Hk, groups, L, S, E, Ev = r(1, 3), r(1, 3), r(1, 3), r(1, 40), r(1, 40), r(1, 24), r(1, 24)
    Hq = Hk * groups
    mask_kind = ["none", "bool", "float"][r(0, 2)]
    is_causal = mask_kind == "none" and r(0, 1) == 1
    mask = None
    if mask_kind != "none":
        shape = [d if r(0, 1) else 1 for d in (B, Hq, L, S)][-r(2, 4):]
        mask = torch.rand(shape, generator=g) > 0.2 if mask_kind == "bool" else torch.randn(shape, generator=g)
    kwargs = dict(is_causal=is_causal, scale=[None, 0.5][r(0, 1)], enable_gqa=groups > 1)
    compare(kwargs, [(B, Hq, L, E), (B, Hk, S, E), (B, Hk, S, Ev)], seed, mask=mask)
