"""Grouped value heads in linattn.fla's decayed functions (linear attention, retention, lightning, simple
GLA, GLA): q, k [B, T, H, K] against v [B, T, HV, V] with HV a multiple of H, value head j reading q/k head
j // (HV / H), g [B, T, HV] or [B, T, HV, K], g_gamma [HV] and states [N, HV, K, V]. Each grouped call is
checked against the same call with q and k repeat_interleave'd to HV heads (flash-linear-attention's and
transformers' convention): outputs and final states, and gradients with dq, dk of H heads against
autograd's sum over each group; chunked and token by token, with an initial state, packed sequences with
an empty one, reversed, in fp64 by finite differences, and the refusals naming the argument."""

import pytest
import torch

from linattn import fla
from linattn_test_support import assert_close
from test_grouped_heads import repeated

# (function, what its decay takes): "g" [B, T, HV], "gk" [B, T, HV, K], "gamma" g_gamma [HV],
# "layers" lightning's layer_idx/num_layers, None no decay input.
FUNCTIONS = [
    ("chunk_linear_attn", None), ("fused_recurrent_linear_attn", None),
    ("chunk_retention", None), ("fused_recurrent_retention", None),
    ("chunk_lightning_attn", "layers"), ("fused_recurrent_lightning_attn", "layers"),
    ("chunk_simple_gla", "g"), ("fused_recurrent_simple_gla", "g"),
    ("chunk_simple_gla", "gamma"), ("fused_recurrent_simple_gla", "gamma"),
    ("chunk_gla", "gk"), ("fused_recurrent_gla", "gk"),
]
IDS = [f"{name}-{decay}" for name, decay in FUNCTIONS]


def inputs(B, T, H, HV, K, V, N, seed, dtype=torch.float32):
    """q, k, v, the log decays g [B, T, HV] and gk [B, T, HV, K] (in (−1, 0)), g_gamma [HV] and an
    initial state [N, HV, K, V]."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = rand(B, T, H, K), rand(B, T, H, K), rand(B, T, HV, V)
    g = -torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    gk = -torch.rand(B, T, HV, K, generator=gen, dtype=torch.float64)
    gamma = -torch.rand(HV, generator=gen, dtype=torch.float64) * 0.5
    h = rand(N, HV, K, V) * 0.5
    return [x.to(dtype) for x in (q, k, v, g, gk)] + [gamma.float(), h.to(dtype)]


def call(name, decay, q, k, v, g, gk, gamma, h, **options):
    """fla.<name> with the decay input the case names; (o, final_state)."""
    extra = {"g": dict(g=g), "gk": dict(gk=gk) if name.startswith("fused") else dict(g=gk),
             "gamma": dict(g_gamma=gamma), "layers": dict(layer_idx=1, num_layers=4), None: {}}[decay]
    if name.endswith("linear_attn"):
        options.setdefault("normalize", False)
    return getattr(fla, name)(q, k, v, **extra, initial_state=h, output_final_state=True, **options)


def grouped_and_repeated(name, decay, tensors, grad, **options):
    """((o, final), leaves) of the grouped call and of the call with q, k repeated to HV heads; with grad,
    (o.sum() + final²) backpropagated through both."""
    HV = tensors[2].shape[2]
    runs = []
    for repeat in (False, True):
        leaves = [None if x is None else x.clone().requires_grad_(grad) for x in tensors]
        q, k = repeated(*leaves[:2], HV) if repeat else leaves[:2]
        o, final = call(name, decay, q, k, *leaves[2:], **options)
        if grad:
            (o.sum() + final.square().sum()).backward()
        runs.append(((o, final), leaves))
    return runs


def differentiable(decay):
    """The indices of the inputs autograd reaches for this case: q, k, v, the decay used, h (not g_gamma)."""
    return [0, 1, 2] + {"g": [3], "gk": [4]}.get(decay, []) + [6]


@pytest.mark.parametrize("name, decay", FUNCTIONS, ids=IDS)
@pytest.mark.parametrize("T, group", [(1, 2), (63, 3), (65, 2)])
def test_grouped_call_equals_the_repeated_call(name, decay, T, group):
    """Forward and final state as the repeated call's (the same arithmetic on the same values); the
    gradients (chunked backward, which fla's autograd runs for either forward) with dq and dk of H heads."""
    H = 2
    tensors = inputs(2, T, H, H * group, 7, 5, N=2, seed=T + group)
    (got, leaves), (want, rep) = grouped_and_repeated(name, decay, tensors, grad=True)
    assert got[0].shape == (2, T, H * group, 5) and got[1].shape == (2, H * group, 7, 5)
    assert_close(got[0], want[0], 1e-6, f"{name} o")
    assert_close(got[1], want[1], 1e-6, f"{name} final_state")
    for i in differentiable(decay):
        what = "q k v g gk g_gamma h".split()[i]
        assert leaves[i].grad.shape == tensors[i].shape, f"d{what}"
        assert_close(leaves[i].grad, rep[i].grad, 2e-5, f"{name} d{what}")


@pytest.mark.parametrize("name, decay", FUNCTIONS, ids=IDS)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_packed_sequences_with_an_empty_one(name, decay, dtype, tol):
    """cu_seqlens with an empty sequence (its final state is its initial one), fp32 and the fp64 oracle."""
    cu = torch.tensor([0, 30, 30, 65])
    tensors = inputs(1, 65, 1, 3, 5, 4, N=3, seed=5, dtype=dtype)
    (got, _), (want, _) = grouped_and_repeated(name, decay, tensors, grad=False, cu_seqlens=cu)
    assert_close(got[0], want[0], tol, f"{name} o")
    assert_close(got[1], want[1], tol, f"{name} final_state")
    assert torch.equal(got[1][1], tensors[6][1])


@pytest.mark.parametrize("name, decay", [f for f in FUNCTIONS if f[0].startswith("fused")],
                         ids=[i for i in IDS if i.startswith("fused")])
def test_reverse_scan(name, decay):
    tensors = inputs(2, 33, 2, 4, 6, 3, N=2, seed=8)
    (got, _), (want, _) = grouped_and_repeated(name, decay, tensors, grad=False, reverse=True)
    assert_close(got[0], want[0], 1e-6, f"{name} o")
    assert_close(got[1], want[1], 1e-6, f"{name} final_state")


def test_normalized_linear_attention_shares_each_groups_denominator():
    tensors = inputs(1, 40, 2, 6, 4, 3, N=1, seed=6)
    (got, _), (want, _) = grouped_and_repeated("chunk_linear_attn", None, tensors[:6] + [None], grad=False,
                                               normalize=True)
    assert_close(got[0], want[0], 1e-5, "o")
    assert_close(got[1][0], want[1][0], 1e-5, "final_state")


@pytest.mark.parametrize("name, decay", [f for f in FUNCTIONS if f[0].startswith("chunk") and f[1] != "gamma"],
                         ids=[i for i in IDS if i.startswith("chunk") and not i.endswith("gamma")])
def test_gradients_of_the_fp64_oracle_match_finite_differences(name, decay):
    tensors = inputs(1, 5, 1, 3, 3, 2, N=1, seed=2, dtype=torch.float64)
    which = differentiable(decay)
    leaves = [x.requires_grad_() for x in (tensors[i] for i in which)]

    def f(*xs):
        args = list(tensors)
        for i, x in zip(which, xs):
            args[i] = x
        return call(name, decay, *args)

    assert torch.autograd.gradcheck(f, leaves)


def test_no_copy_of_queries_and_keys(monkeypatch):
    """The grouping reaches the operator: repeat_interleave is never called, forward or backward."""
    q, k, v, g, _, _, _ = inputs(1, 20, 2, 4, 8, 8, N=1, seed=1)
    leaves = [x.requires_grad_() for x in (q, k, v, g)]

    def refuse(*args, **kwargs):
        raise AssertionError("repeat_interleave called")

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", refuse)
    o, _ = fla.chunk_simple_gla(*leaves)
    o.sum().backward()
    assert leaves[0].grad.shape == (1, 20, 2, 8) and leaves[3].grad.shape == (1, 20, 4)


def test_refusals_name_the_argument():
    q, k, v, g, gk, gamma, h = inputs(1, 4, 2, 4, 3, 3, N=1, seed=3)
    with pytest.raises(ValueError, match=r"v: expected a multiple of q's 2 heads .*got 3"):
        fla.chunk_simple_gla(q, k, v[:, :, :3], g[:, :, :3])
    with pytest.raises(ValueError, match=r"k: expected q's 2 heads, got 4"):
        fla.fused_recurrent_retention(q, v[..., :3].contiguous(), v)
    with pytest.raises(ValueError, match=r"g: expected shape \[B, T, HV\] = \[1, 4, 4\].*got \[1, 4, 2\]"):
        fla.chunk_simple_gla(q, k, v, g[:, :, :2])
    with pytest.raises(ValueError, match=r"g: expected q's shape with v's heads, \[B, T, HV, K\] = \[1, 4, 4, 3\]"):
        fla.chunk_gla(q, k, v, gk[:, :, :2])
    with pytest.raises(ValueError, match=r"g_gamma: expected shape \[HV\] = \[4\].*got \[2\]"):
        fla.chunk_simple_gla(q, k, v, g_gamma=gamma[:2])
    with pytest.raises(ValueError, match=r"initial_state: expected shape \[N, H, K, V\] = \[1, 4, 3, 3\]"):
        fla.fused_recurrent_gla(q, k, v, gk, initial_state=h[:, :2])


@pytest.mark.parametrize("name", ["parallel_simple_gla", "parallel_retention"])
@pytest.mark.parametrize("T, group", [(1, 2), (63, 3), (65, 2)])
def test_parallel_forms_take_grouped_heads(name, T, group):
    """parallel_simple_gla and parallel_retention with v [B, T, HV, V] (and g [B, T, HV]): o and the scores
    [B, HV, T, T] equal the call with q and k repeated to HV heads; dq, dk of H heads are autograd's sums
    over each group, dv and dg as the repeated call's."""
    H, HV = 2, 2 * group
    tensors = inputs(2, T, H, HV, 7, 5, N=1, seed=T + 10 * group)[:4]  # q, k, v, g
    if name == "parallel_retention":
        tensors = tensors[:3]
    runs = []
    for repeat in (False, True):
        leaves = [x.clone().requires_grad_() for x in tensors]
        q, k = repeated(*leaves[:2], HV) if repeat else leaves[:2]
        o, scores = getattr(fla, name)(q, k, *leaves[2:], scale=0.4, output_attentions=True)
        (o.sum() + o.square().sum()).backward()
        runs.append((o, scores, leaves))
    (o, scores, leaves), (want_o, want_scores, rep) = runs
    assert o.shape == (2, T, HV, 5) and scores.shape == (2, HV, T, T)
    assert_close(o, want_o, 1e-6, f"{name} o")
    assert_close(scores, want_scores, 1e-6, f"{name} scores")
    for i, what in enumerate("q k v g".split()[:len(tensors)]):
        assert leaves[i].grad.shape == tensors[i].shape, f"d{what}"
        assert_close(leaves[i].grad, rep[i].grad, 2e-5, f"{name} d{what}")


def test_parallel_retention_scores_decay_by_value_head():
    """With one q/k head and three value heads, value head h's scores decay by γ_h = 1 − 2^(−5−h): the
    scores of a group differ only by their decays (fp64, from the formula)."""
    q, k, v = inputs(1, 6, 1, 3, 4, 2, N=1, seed=4, dtype=torch.float64)[:3]
    _, scores = fla.parallel_retention(q, k, v, scale=1.0, output_attentions=True)
    dot = torch.einsum("ik,jk->ij", q[0, :, 0], k[0, :, 0])
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    for h in range(3):
        gamma = 1 - 2.0 ** (-5 - h)
        want = torch.where(j <= i, dot * gamma ** (i - j).double(), torch.zeros((), dtype=torch.float64))
        assert_close(scores[0, h], want, 1e-12, f"head {h}")


def test_parallel_forms_refuse_value_heads_not_a_multiple():
    q, k, v, g, _, _, _ = inputs(1, 4, 2, 4, 3, 3, N=1, seed=3)
    with pytest.raises(ValueError, match=r"v: expected a multiple of q's 2 heads .*got 3"):
        fla.parallel_simple_gla(q, k, v[:, :, :3], g[:, :, :3], output_attentions=True)
    with pytest.raises(ValueError, match=r"v: expected a multiple of q's 2 heads .*got 3"):
        fla.parallel_retention(q, k, v[:, :, :3], output_attentions=True)
