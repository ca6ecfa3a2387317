"""linattn.fla against a naive recurrence written here from the math,
    S_t = diag(exp g_t) S_{t−1} + k_t v_tᵀ,   o_t = scale · q_tᵀ S_t,
token by token in float64: forward, final state and gradients (including through initial_state and
final_state) of every function, in float32 (the fast path) and float64 (the fp64 oracle)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import linattn
from linattn import fla
from linattn_test_support import assert_close, assert_outputs_and_gradients

# ----------------------------------------------------------------------------------------------
# The naive recurrence.


def segments_of(B, T, cu):
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


def naive(q, k, v, log_decay, scale, h0=None, cu=None, reverse=False):
    """o [B, T, H, V] and the final states [N, H, K, V]; log_decay [B, T, H, K]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    rows = {}
    finals = []
    for n, (b, begin, end) in enumerate(segments_of(B, T, cu)):
        S = q.new_zeros(H, K, V) if h0 is None else h0[n]
        steps = range(end - 1, begin - 1, -1) if reverse else range(begin, end)
        for t in steps:
            S = log_decay[b, t].exp()[:, :, None] * S + k[b, t][:, :, None] * v[b, t][:, None, :]
            rows[(b, t)] = scale * torch.einsum("hk,hkv->hv", q[b, t], S)
        finals.append(S)
    o = torch.stack([torch.stack([rows[(b, t)] for t in range(T)]) for b in range(B)])
    return o, torch.stack(finals)


def naive_normalized(o, q, k, scale, z0, cu, B, T):
    """o_t / (scale·q_t·z_t + 1e-10), z_t = z0 + the sum of the sequence's keys up to t."""
    outs, zs = [], []
    for n, (b, begin, end) in enumerate(segments_of(B, T, cu)):
        z = k[b, begin:end].cumsum(0)
        if z0 is not None:
            z = z + z0[n]
        outs.append(o[b, begin:end] / ((scale * q[b, begin:end] * z).sum(-1, keepdim=True) + 1e-10))
        zs.append(z[-1:])
    if cu is None:
        return torch.stack(outs), torch.stack(zs)
    return torch.cat(outs)[None], torch.stack(zs)


def retention_log_decay(H):
    return torch.tensor([math.log(1 - 2.0 ** (-5 - h)) for h in range(H)], dtype=torch.float64)


# ----------------------------------------------------------------------------------------------
# The functions, called uniformly: (name, gate kind, mode).

CASES = [
    ("chunk_linear_attn", None),
    ("chunk_linear_attn_normalized", None),
    ("fused_recurrent_linear_attn", None),
    ("fused_recurrent_linear_attn_normalized", None),
    ("chunk_retention", "retention"),
    ("fused_recurrent_retention", "retention"),
    ("chunk_simple_gla", "token"),
    ("fused_recurrent_simple_gla", "token"),
    ("chunk_simple_gla_gamma", "gamma"),
    ("fused_recurrent_simple_gla_gamma", "gamma"),
    ("chunk_gla", "key"),
    ("fused_recurrent_gla", "key"),
]


def call(name, q, k, v, g, gamma, h, z0=None, cu=None, reverse=False, **extra):
    """(o, S_final, z_final or None) of the named function."""
    common = dict(initial_state=h, output_final_state=True, cu_seqlens=cu, **extra)
    if reverse:
        common["reverse"] = True
    normalized = name.endswith("_normalized")
    base = name.replace("_normalized", "").replace("_gamma", "")
    fn = getattr(fla, base)
    if base.endswith("linear_attn"):
        if normalized:
            common["initial_state"] = None if h is None else (h, z0)
        o, ht = fn(q, k, v, normalize=normalized, **common)
        return (o, ht[0], ht[1]) if normalized else (o, ht, None)
    if name.endswith("_gamma"):
        o, ht = fn(q, k, v, g_gamma=gamma, **common)
    elif base == "fused_recurrent_gla":
        o, ht = fn(q, k, v, gk=g, **common)
    elif g is None:
        o, ht = fn(q, k, v, **common)
    else:
        o, ht = fn(q, k, v, g, **common)
    return o, ht, None


def make_inputs(name, kind, B, T, H, K, V, dtype, seed, positive=False):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, V)
    if positive or name.endswith("_normalized"):  # keeps the normaliser away from 0
        q, k = q.abs() + 0.1, k.abs() + 0.1
    g = gamma = None
    if kind == "token":
        g = F.logsigmoid(rand(B, T, H) + 2)
    elif kind == "key":
        g = F.logsigmoid(rand(B, T, H, K) + 2)
    elif kind == "gamma":
        gamma = -torch.rand(H, generator=gen, dtype=torch.float64) * 0.2
    N = B
    h = rand(N, H, K, V)
    z0 = rand(N, 1, H, K).abs() if name.endswith("_normalized") else None
    cast = [None if x is None else x.to(dtype) for x in (q, k, v, g, gamma, h, z0)]
    return cast


def full_log_decay(kind, g, gamma, B, T, H, K):
    if kind is None:
        return torch.zeros(B, T, H, K, dtype=torch.float64)
    if kind == "retention":
        return retention_log_decay(H).view(1, 1, H, 1).expand(B, T, H, K)
    if kind == "gamma":
        return gamma.view(1, 1, H, 1).expand(B, T, H, K)
    if kind == "token":
        return g[..., None].expand(B, T, H, K)
    return g


def reference(name, kind, q, k, v, g, gamma, h, z0, cu=None, reverse=False):
    """The naive (o, S_final, z_final or None) in float64."""
    B, T, H, K = q.shape
    scale = K ** -0.5
    o, S = naive(q, k, v, full_log_decay(kind, g, gamma, B, T, H, K), scale, h, cu, reverse)
    if not name.endswith("_normalized"):
        return o, S, None
    if reverse:  # the running key sums run backwards too: normalise the reversed sequences
        idx = reverse_index(T, cu)
        on, zn = naive_normalized(o[:, idx], q[:, idx], k[:, idx], scale, z0, cu, B, T)
        return on[:, idx], S, zn
    on, zn = naive_normalized(o, q, k, scale, z0, cu, B, T)
    return on, S, zn


def reverse_index(T, cu):
    if cu is None:
        return torch.arange(T - 1, -1, -1)
    return torch.cat([torch.arange(cu[i + 1] - 1, cu[i] - 1, -1) for i in range(len(cu) - 1)])




def check_against_naive(name, kind, B, T, H, K, V, dtype, seed, cu=None, reverse=False, grads=True):
    inputs = make_inputs(name, kind, B, T, H, K, V, dtype, seed)
    if cu is not None:
        inputs = list(inputs)
        N = len(cu) - 1
        gen = torch.Generator().manual_seed(seed + 1)
        inputs[5] = torch.randn(N, H, K, V, generator=gen, dtype=torch.float64).to(dtype)
        if inputs[6] is not None:
            inputs[6] = torch.randn(N, 1, H, K, generator=gen, dtype=torch.float64).abs().to(dtype)
    q, k, v, g, gamma, h, z0 = inputs
    leaves = [x.clone().requires_grad_() if x is not None else None for x in (q, k, v, g, h, z0)]
    q_, k_, v_, g_, h_, z_ = leaves
    o, S, z = call(name, q_, k_, v_, g_, gamma, h_, z_, cu=cu, reverse=reverse)
    leaves64 = [x.detach().double().requires_grad_() if x is not None else None for x in (q, k, v, g, h, z0)]
    q6, k6, v6, g6, h6, z6 = leaves64
    o_ref, S_ref, z_ref = reference(name, kind, q6, k6, v6, g6, None if gamma is None else gamma.double(), h6, z6,
                                    cu, reverse)
    assert_outputs_and_gradients(name, (o, S, z), (o_ref, S_ref, z_ref), leaves, leaves64,
                                 ["q", "k", "v", "g", "initial_state", "z0"], dtype, seed, grads)


# ----------------------------------------------------------------------------------------------
# Every function against the naive recurrence.


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("T,K,V", [(1, 16, 24), (63, 16, 24), (65, 16, 24), (97, 16, 24), (65, 7, 5)])
@pytest.mark.parametrize("name,kind", CASES, ids=[c[0] for c in CASES])
def test_matches_naive(name, kind, T, K, V, dtype):
    check_against_naive(name, kind, 2, T, 2, K, V, dtype, seed=T + K)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("name,kind", CASES, ids=[c[0] for c in CASES])
def test_cu_seqlens_matches_naive(name, kind, dtype):
    check_against_naive(name, kind, 1, 97, 2, 16, 8, dtype, seed=5, cu=[0, 30, 31, 95, 97])


@pytest.mark.parametrize("name,kind", [c for c in CASES if c[0].startswith("fused")], ids=lambda c: str(c))
@pytest.mark.parametrize("cu", [None, [0, 20, 70, 71]], ids=["batch", "cu_seqlens"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_reverse_matches_naive(name, kind, cu, dtype):
    B = 2 if cu is None else 1
    check_against_naive(name, kind, B, 71, 2, 8, 12, dtype, seed=7, cu=cu, reverse=True)


@pytest.mark.parametrize("name,kind", CASES, ids=[c[0] for c in CASES])
def test_cu_seqlens_no_leakage(name, kind):
    """Packed sequences give what each gives alone, forward and gradients (fp32)."""
    cu = [0, 40, 41, 105, 130]
    q, k, v, g, gamma, _, _ = make_inputs(name, kind, 1, 130, 2, 8, 8, torch.float32, seed=11)
    leaves = [x.clone().requires_grad_() if x is not None else None for x in (q, k, v, g)]
    o, S, z = call(name, *leaves[:3], leaves[3], gamma, None, cu=cu)
    (o.sum() + S.sum() + (0 if z is None else z.sum())).backward()
    for n in range(len(cu) - 1):
        sl = slice(cu[n], cu[n + 1])
        alone = [x[:, sl].clone().requires_grad_() if x is not None else None for x in (q, k, v, g)]
        o1, S1, z1 = call(name, *alone[:3], alone[3], gamma, None)
        (o1.sum() + S1.sum() + (0 if z1 is None else z1.sum())).backward()
        assert_close(o[:, sl], o1, 1e-5, f"{name} o of sequence {n}")
        assert_close(S[n:n + 1], S1, 1e-5, f"{name} final_state of sequence {n}")
        if z is not None:
            assert_close(z[n:n + 1], z1, 1e-5, f"{name} z of sequence {n}")
        for a, b, what in zip(leaves, alone, "qkvg"):
            if a is not None:
                assert_close(a.grad[:, sl], b.grad, 1e-5, f"{name} d{what} of sequence {n}")


# ----------------------------------------------------------------------------------------------
# Numerical extremes.


@pytest.mark.parametrize("name", ["chunk_simple_gla", "chunk_gla", "fused_recurrent_simple_gla", "fused_recurrent_gla"])
def test_strong_decay(name):
    """g = −20 per token: each token all but forgets the past; finite and accurate, with gradients."""
    kind = "token" if "simple" in name else "key"
    B, T, H, K, V = 1, 200, 2, 16, 16
    q, k, v, g, _, h, _ = make_inputs(name, kind, B, T, H, K, V, torch.float64, seed=3)
    g = torch.full_like(g, -20.0)
    leaves = [x.float().requires_grad_() for x in (q, k, v, g, h)]
    o, S, _ = call(name, *leaves[:4], None, leaves[4])
    ref_o, ref_S = naive(q, k, v, full_log_decay(kind, g, None, B, T, H, K), K ** -0.5, h)
    assert_close(o, ref_o, 1e-4, "o")
    assert_close(S, ref_S, 1e-4, "final_state")
    (o.sum() + S.sum()).backward()
    for x, what in zip(leaves, ["q", "k", "v", "g", "initial_state"]):
        assert torch.isfinite(x.grad).all(), f"d{what} not finite"


@pytest.mark.parametrize("name", ["chunk_simple_gla", "chunk_gla", "chunk_linear_attn"])
def test_no_decay_long(name):
    """g = 0 over 4096 tokens (the state only grows), against the naive recurrence."""
    kind = {"chunk_simple_gla": "token", "chunk_gla": "key", "chunk_linear_attn": None}[name]
    B, T, H, K, V = 1, 4096, 1, 16, 8
    q, k, v, g, _, _, _ = make_inputs(name, kind, B, T, H, K, V, torch.float64, seed=4)
    if g is not None:
        g = torch.zeros_like(g)
    extra = dict(normalize=False) if name == "chunk_linear_attn" else {}
    args = (q.float(), k.float(), v.float()) + (() if g is None else (g.float(),))
    o, S = getattr(fla, name)(*args, output_final_state=True, **extra)
    ref_o, ref_S = naive(q, k, v, torch.zeros(B, T, H, K, dtype=torch.float64), K ** -0.5)
    assert_close(o, ref_o, 1e-4, "o")
    assert_close(S, ref_S, 1e-4, "final_state")


@pytest.mark.parametrize("name", ["chunk_simple_gla", "chunk_gla"])
def test_no_decay_64k(name):
    """g = 0 over 65536 tokens; the naive reference is a cumulative sum of k vᵀ in fp64."""
    B, T, H, K, V = 1, 65536, 1, 4, 4
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(B, T, H, d, generator=gen, dtype=torch.float64) for d in (K, K, V))
    g = torch.zeros(B, T, H) if name == "chunk_simple_gla" else torch.zeros(B, T, H, K)
    o, S = getattr(fla, name)(q.float(), k.float(), v.float(), g, output_final_state=True)
    states = torch.einsum("bthk,bthv->bthkv", k, v).cumsum(1)
    ref_o = K ** -0.5 * torch.einsum("bthk,bthkv->bthv", q, states)
    assert_close(o, ref_o, 1e-4, "o")
    assert_close(S, states[:, -1], 1e-4, "final_state")


# ----------------------------------------------------------------------------------------------
# gradcheck through the fp64 oracle.


@pytest.mark.parametrize("name,kind", CASES, ids=[c[0] for c in CASES])
def test_gradcheck(name, kind):
    q, k, v, g, gamma, h, z0 = make_inputs(name, kind, 1, 5, 2, 3, 2, torch.float64, seed=1)
    tensors = [x.clone().requires_grad_() for x in (q, k, v, g, h, z0) if x is not None]

    def fn(*xs):
        it = iter(xs)
        q_, k_, v_ = next(it), next(it), next(it)
        g_ = next(it) if g is not None else None
        h_ = next(it)
        z_ = next(it) if z0 is not None else None
        o, S, z = call(name, q_, k_, v_, g_, gamma, h_, z_)
        return (o, S) if z is None else (o, S, z)

    assert torch.autograd.gradcheck(fn, tensors, eps=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------------------------
# Behaviour of the interface.


def test_defaults_and_no_final_state():
    q, k, v, g, _, _, _ = make_inputs("chunk_gla", "key", 1, 10, 2, 4, 3, torch.float32, seed=2)
    o, ht = fla.chunk_gla(q, k, v, g)
    assert ht is None and o.shape == (1, 10, 2, 3)
    o2, _ = fla.chunk_gla(q, k, v, g, scale=0.5)
    assert_close(o2, o * (0.5 / 4 ** -0.5), 1e-6, "scale")
    o3, ht3 = fla.chunk_linear_attn(q, k, v)  # normalize=True by default
    assert ht3 is None
    o4, _ = fla.chunk_linear_attn(q, k, v, normalize=False)
    assert not torch.allclose(o3, o4)


def test_backward_reaches_leaves():
    q, k, v, g, _, h, _ = make_inputs("chunk_simple_gla", "token", 2, 33, 2, 8, 8, torch.float32, seed=6)
    leaves = [x.requires_grad_() for x in (q, k, v, g, h)]
    o, ht = fla.chunk_simple_gla(*leaves[:4], initial_state=leaves[4], output_final_state=True)
    (o.square().sum() + ht.sum()).backward()
    for x in leaves:
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_chunk_size_kwarg():
    q, k, v, g, _, _, _ = make_inputs("chunk_simple_gla", "token", 1, 70, 2, 8, 8, torch.float32, seed=8)
    o, _ = fla.chunk_simple_gla(q, k, v, g)
    o16, _ = fla.chunk_simple_gla(q, k, v, g, chunk_size=16)
    assert_close(o16, o, 1e-5, "chunk_size=16")
    o_r16, _ = fla.chunk_retention(q, k, v, chunk_size=16)
    o_r, _ = fla.chunk_retention(q, k, v)
    assert_close(o_r16, o_r, 1e-5, "retention chunk_size=16")


def test_chunk_and_recurrent_agree_fp32():
    q, k, v, g, _, h, _ = make_inputs("chunk_gla", "key", 2, 150, 2, 16, 8, torch.float32, seed=12)
    o1, s1 = fla.chunk_gla(q, k, v, g, initial_state=h, output_final_state=True)
    o2, s2 = fla.fused_recurrent_gla(q, k, v, gk=g, initial_state=h, output_final_state=True)
    assert_close(o1, o2, 1e-4, "o")
    assert_close(s1, s2, 1e-4, "final_state")


def test_decode_step_by_step():
    """fused_recurrent one token at a time, threading final_state, equals the whole sequence."""
    q, k, v, g, _, _, _ = make_inputs("fused_recurrent_simple_gla", "token", 1, 12, 2, 4, 4, torch.float32, seed=13)
    o_all, s_all = fla.fused_recurrent_simple_gla(q, k, v, g, output_final_state=True)
    state, outs = None, []
    for t in range(12):
        o, state = fla.fused_recurrent_simple_gla(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1],
                                                  initial_state=state, output_final_state=True)
        outs.append(o)
    assert_close(torch.cat(outs, 1), o_all, 1e-6, "o")
    assert_close(state, s_all, 1e-6, "final_state")


def test_initial_state_not_modified():
    q, k, v, g, _, h, _ = make_inputs("fused_recurrent_gla", "key", 1, 9, 1, 4, 4, torch.float32, seed=14)
    before = h.clone()
    fla.fused_recurrent_gla(q, k, v, gk=g, initial_state=h, output_final_state=True)
    fla.chunk_gla(q, k, v, g, initial_state=h, output_final_state=True)
    assert torch.equal(h, before)


# ----------------------------------------------------------------------------------------------
# Errors that name the argument.


def small(dtype=torch.float32, B=1, T=6, H=2, K=4, V=3):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(B, T, H, d, generator=gen).to(dtype) for d in (K, K, V)]


def test_error_device():
    q, k, v = small()
    with pytest.raises(TypeError, match="q: expected a CPU tensor"):
        fla.chunk_retention(q.to("meta"), k, v)


def test_error_dtypes():
    q, k, v = small()
    with pytest.raises(TypeError, match="q: expected float32"):
        fla.chunk_retention(q.to(torch.int16), k, v)  # half precision runs (test_fla_half.py); integers do not
    with pytest.raises(TypeError, match="k: expected torch.float32"):
        fla.chunk_retention(q, k.double(), v)
    with pytest.raises(TypeError, match="g: expected torch.float32"):
        fla.chunk_simple_gla(q, k, v, torch.zeros(1, 6, 2, dtype=torch.float64))


def test_error_shapes():
    q, k, v = small()
    with pytest.raises(ValueError, match="q: expected 4 dims"):
        fla.chunk_retention(q[0], k, v)
    with pytest.raises(ValueError, match=r"v\.extent\[1\]|v's|v:"):
        fla.chunk_retention(q, k, v[:, :5])
    with pytest.raises(ValueError, match=r"k\.extent\[3\]|k's|k:"):
        fla.fused_recurrent_retention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="g: expected q's shape"):
        fla.chunk_gla(q, k, v, torch.zeros(1, 6, 2, 3))
    with pytest.raises(ValueError, match="g: expected 3 dims"):
        fla.chunk_simple_gla(q, k, v, torch.zeros(1, 6, 2, 4))
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        fla.chunk_retention(q, k, v, initial_state=torch.zeros(1, 2, 3, 3))
    with pytest.raises(ValueError, match="g_gamma: expected shape"):
        fla.chunk_simple_gla(q, k, v, g_gamma=torch.zeros(3))


def test_error_cu_seqlens():
    q, k, v = small(B=2)
    with pytest.raises(ValueError, match="batch size is expected to be 1 rather than 2"):
        fla.chunk_gla(q, k, v, torch.zeros_like(q), cu_seqlens=torch.tensor([0, 3, 6]))
    q, k, v = small()
    with pytest.raises(ValueError, match="number of initial states.*2 rather than 1"):
        fla.fused_recurrent_retention(q, k, v, initial_state=torch.zeros(1, 2, 4, 3), cu_seqlens=torch.tensor([0, 3, 6]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        fla.chunk_retention(q, k, v, cu_seqlens=torch.tensor([0, 4, 3, 6]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        fla.chunk_retention(q, k, v, cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(TypeError, match="cu_seqlens: expected integers"):
        fla.chunk_retention(q, k, v, cu_seqlens=torch.tensor([0.0, 6.0]))


@pytest.mark.parametrize("name", ["chunk_simple_gla", "chunk_gla", "fused_recurrent_simple_gla", "fused_recurrent_gla",
                                  "fused_recurrent_retention"])
def test_state_v_first(name):
    """A state given and returned as [N, H, V, K] is the transpose of the [N, H, K, V] one."""
    q, k, v = small(B=2, T=9)
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(2, 2, 4, 3, generator=gen)
    fn = getattr(fla, name)
    gate = {"chunk_simple_gla": {"g": -torch.rand(2, 9, 2, generator=gen)},
            "fused_recurrent_simple_gla": {"g": -torch.rand(2, 9, 2, generator=gen)},
            "chunk_gla": {"g": -torch.rand(2, 9, 2, 4, generator=gen)},
            "fused_recurrent_gla": {"gk": -torch.rand(2, 9, 2, 4, generator=gen)}}.get(name, {})
    o, final = fn(q, k, v, initial_state=h, output_final_state=True, **gate)
    o_t, final_t = fn(q, k, v, initial_state=h.transpose(-1, -2).contiguous(), output_final_state=True,
                      state_v_first=True, **gate)
    assert torch.allclose(o_t, o, atol=1e-6, rtol=0)
    assert final_t.shape == (2, 2, 3, 4)
    assert torch.allclose(final_t.transpose(-1, -2), final, atol=1e-6, rtol=0)


def test_error_unsupported_arguments():
    q, k, v = small()
    g = torch.zeros_like(q)
    with pytest.raises(ValueError, match="Cannot pass both"):
        fla.fused_recurrent_retention(q, k, v, state_v_first=True, transpose_state_layout=True)
    with pytest.raises(NotImplementedError, match="gv"):
        fla.fused_recurrent_gla(q, k, v, gk=g, gv=torch.zeros_like(v))
    with pytest.raises(DeprecationWarning, match="head_first"):
        fla.chunk_simple_gla(q, k, v, head_first=False)
    with pytest.raises(ValueError, match="chunk_size"):
        fla.chunk_retention(q, k, v, chunk_size=48)
    with pytest.raises(TypeError, match="not_an_argument"):  # chunk_gla takes no **kwargs in fla either
        fla.chunk_gla(q, k, v, g, not_an_argument=1)


def test_error_bindings():
    q, k, v = (x.numpy() for x in small())
    with pytest.raises(ValueError, match="decay: expected"):
        linattn._linattn.decayed_attention(q, k, v, None, decay="mamba")
    state = np.zeros((1, 2, 3, 4), dtype=np.float32).transpose(0, 1, 3, 2)  # [1, 2, 4, 3], not C order
    with pytest.raises(ValueError, match="state: expected a C-contiguous array"):
        linattn._linattn.decayed_recurrent(q, k, v, None, state, decay="linear")
    with pytest.raises(TypeError, match="state: expected float32"):
        linattn._linattn.decayed_recurrent(q, k, v, None, np.zeros((1, 2, 4, 3)), decay="linear")
    with pytest.raises(TypeError, match="q: expected float64"):
        linattn._linattn.reference.decayed_attention(q, k, v, None, decay="linear")
    # A non-contiguous initial state is copied, not refused, and gives the contiguous result.
    h = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32).transpose(0, 1, 3, 2)
    o1, s1 = linattn._linattn.decayed_attention(q, k, v, None, decay="linear", initial_state=h,
                                                output_final_state=True)
    o2, s2 = linattn._linattn.decayed_attention(q, k, v, None, decay="linear", initial_state=np.ascontiguousarray(h),
                                                output_final_state=True)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(s1, s2)


@pytest.mark.parametrize("name", ["fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule", "chunk_gla",
                                  "fused_recurrent_simple_gla"])
def test_calls_without_a_graph_give_the_operators_numbers(name):
    """Under no_grad (a decode step) linattn.fla computes without the torch operator's dispatch
    (_fla_ops._graph_free); the numbers are the operator's, bitwise, and a call whose inputs need a
    gradient still records the graph."""
    from linattn import _fla_ops
    gen = torch.Generator().manual_seed(5)
    B, T, H, K, V = 2, 33, 2, 8, 5
    q, k = (torch.randn(B, T, H, K, generator=gen) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen)
    gk = -torch.rand(B, T, H, K, generator=gen)
    g, beta = -torch.rand(B, T, H, generator=gen), torch.rand(B, T, H, generator=gen)
    fn = getattr(fla, name)
    args = {"fused_recurrent_gated_delta_rule": lambda *x: fn(*x[:3], x[3], beta=x[4], output_final_state=True),
            "chunk_gated_delta_rule": lambda *x: fn(*x, output_final_state=True),
            "chunk_gla": lambda q, k, v, g, beta: fn(q, k, v, gk, output_final_state=True),
            "fused_recurrent_simple_gla": lambda q, k, v, g, beta: fn(q, k, v, g, output_final_state=True)}[name]
    with torch.no_grad():
        o, final = args(q, k, v, g, beta)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta)]
    o_graph, final_graph = args(*leaves)
    assert o_graph.grad_fn is not None
    assert torch.equal(o, o_graph.detach()) and torch.equal(final, final_graph.detach())
    assert hasattr(_fla_ops.delta_forward, "graph_op") and hasattr(_fla_ops.decayed_forward, "graph_op")
