"""linattn.fla's delta rule against a naive recurrence written here from the math,
    P_t = D_t S_{t−1},   S_t = P_t + β_t k_t (v_t − P_tᵀ k_t)ᵀ,   o_t = scale · S_tᵀ q_t,
D_t = I (DeltaNet), exp(g_t) I (Gated DeltaNet) or diag(exp g_t) (KDA), q and k first divided by
sqrt(Σx² + 1e-6) with use_qk_l2norm_in_kernel; token by token in float64, its gradients by
torch.autograd through the loop. Forward, final state and gradients (q, k, v, beta, g,
initial_state) of every function in float32 (the fast path) and float64 (the fp64 oracle)."""

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


def l2norm(x):
    return x / (x.square().sum(-1, keepdim=True) + 1e-6).sqrt()


def naive(q, k, v, beta, log_decay, scale, h0=None, cu=None, normalize=False):
    """o [B, T, H, V] and the final states [N, H, K, V]; beta [B, T, H]; log_decay [B, T, H, K] or None."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    if normalize:
        q, k = l2norm(q), l2norm(k)
    rows, finals = {}, []
    for n, (b, begin, end) in enumerate(segments_of(B, T, cu)):
        S = q.new_zeros(H, K, V) if h0 is None else h0[n]
        for t in range(begin, end):
            if log_decay is not None:
                S = log_decay[b, t].exp()[:, :, None] * S
            correction = v[b, t] - torch.einsum("hk,hkv->hv", k[b, t], S)
            S = S + beta[b, t][:, None, None] * k[b, t][:, :, None] * correction[:, None, :]
            rows[(b, t)] = scale * torch.einsum("hk,hkv->hv", q[b, t], S)
        finals.append(S)
    o = torch.stack([torch.stack([rows[(b, t)] for t in range(T)]) for b in range(B)])
    return o, torch.stack(finals)


# ----------------------------------------------------------------------------------------------
# The functions, called uniformly: (name, gate kind).

CASES = [
    ("chunk_delta_rule", None),
    ("fused_recurrent_delta_rule", None),
    ("chunk_gated_delta_rule", "token"),
    ("fused_recurrent_gated_delta_rule", "token"),
    ("chunk_kda", "key"),
    ("fused_recurrent_kda", "key"),
    ("fused_recurrent_gated_delta_rule_gk", "key"),
]
IDS = [c[0] for c in CASES]


def call(name, q, k, v, beta, g, h, cu=None, **extra):
    """(o, final_state) of the named function, with the final state asked for."""
    common = dict(initial_state=h, output_final_state=True, cu_seqlens=cu, **extra)
    if name == "fused_recurrent_gated_delta_rule_gk":
        return fla.fused_recurrent_gated_delta_rule(q, k, v, gk=g, beta=beta, **common)
    if name == "fused_recurrent_gated_delta_rule":
        return fla.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **common)
    fn = getattr(fla, name)
    return fn(q, k, v, beta, **common) if g is None else fn(q, k, v, g, beta, **common)


def make_inputs(kind, B, T, H, K, V, seed, normalize, HV=None):
    """q, k, v, beta, g, h0 in float64. Without the in-kernel l2norm the keys are drawn with norm
    about 1, so that β ∈ (0, 1) keeps each update a contraction, as the models' keys are."""
    HV = HV or H
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = rand(B, T, H, K), rand(B, T, H, K), rand(B, T, HV, V)
    if not normalize:
        k = k / K ** 0.5
    beta = rand(B, T, HV).sigmoid()
    g = None
    if kind == "token":
        g = F.logsigmoid(rand(B, T, HV) + 2)
    elif kind == "key":
        g = F.logsigmoid(rand(B, T, HV, K) + 2)
    N = B
    h = rand(N, HV, K, V) * 0.5
    return q, k, v, beta, g, h


def reference(kind, q, k, v, beta, g, h, cu=None, normalize=False, scale=None):
    K = q.shape[-1]
    log_decay = None if g is None else (g[..., None] if kind == "token" else g)
    return naive(q, k, v, beta, log_decay, K ** -0.5 if scale is None else scale, h, cu, normalize)


NAMES = ["q", "k", "v", "beta", "g", "initial_state"]


def check_against_naive(name, kind, B, T, H, K, V, dtype, seed, normalize, cu=None, grads=True, **extra):
    q, k, v, beta, g, h = make_inputs(kind, B, T, H, K, V, seed, normalize)
    if cu is not None:
        h = torch.randn(len(cu) - 1, H, K, V, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    leaves = [None if x is None else x.to(dtype).requires_grad_() for x in (q, k, v, beta, g, h)]
    o, S = call(name, *leaves, cu=cu, use_qk_l2norm_in_kernel=normalize, **extra)
    leaves64 = [None if x is None else x.detach().double().requires_grad_() for x in leaves]
    o_ref, S_ref = reference(kind, *leaves64, cu=cu, normalize=normalize)
    assert_outputs_and_gradients(name, (o, S), (o_ref, S_ref), leaves, leaves64, NAMES, dtype, seed, grads)


# ----------------------------------------------------------------------------------------------
# Every function against the naive recurrence: forward, final state, every gradient.


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("T,K,V,normalize", [(1, 16, 24, True), (65, 16, 24, False), (97, 16, 24, True),
                                             (70, 7, 5, True)], ids=["T1", "T65", "T97-l2", "K7V5-l2"])
@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_matches_naive(name, kind, T, K, V, normalize, dtype):
    check_against_naive(name, kind, 2, T, 2, K, V, dtype, seed=T + K, normalize=normalize)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_cu_seqlens_matches_naive(name, kind, dtype):
    check_against_naive(name, kind, 1, 97, 2, 16, 8, dtype, seed=5, normalize=True, cu=[0, 30, 31, 95, 97])


@pytest.mark.parametrize("name,kind", [c for c in CASES if c[0].startswith("chunk")], ids=lambda c: str(c))
def test_chunk_sizes(name, kind):
    """fla's chunk_size choices all give the naive result (chunks of 16 over 70 tokens: a partial last one)."""
    for chunk_size in (32, 16) if name != "chunk_kda" else (32,):
        check_against_naive(name, kind, 1, 70, 2, 8, 8, torch.float32, seed=3, normalize=True, chunk_size=chunk_size)


@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_cu_seqlens_no_leakage(name, kind):
    """Packed sequences give what each gives alone, forward and gradients (fp32)."""
    cu = [0, 40, 41, 105, 130]
    q, k, v, beta, g, _ = (None if x is None else x.float() for x in make_inputs(kind, 1, 130, 2, 8, 8, 11, True))
    leaves = [None if x is None else x.clone().requires_grad_() for x in (q, k, v, beta, g)]
    o, S = call(name, *leaves, None, cu=cu, use_qk_l2norm_in_kernel=True)
    (o.sum() + S.sum()).backward()
    for n in range(len(cu) - 1):
        sl = slice(cu[n], cu[n + 1])
        alone = [None if x is None else x[:, sl].clone().requires_grad_() for x in (q, k, v, beta, g)]
        o1, S1 = call(name, *alone, None, use_qk_l2norm_in_kernel=True)
        (o1.sum() + S1.sum()).backward()
        assert_close(o[:, sl], o1, 1e-5, f"{name} o of sequence {n}")
        assert_close(S[n:n + 1], S1, 1e-5, f"{name} final_state of sequence {n}")
        for a, b, what in zip(leaves, alone, NAMES):
            if a is not None:
                assert_close(a.grad[:, sl], b.grad, 1e-5, f"{name} d{what} of sequence {n}")


# ----------------------------------------------------------------------------------------------
# flash-linear-attention's further arguments that linattn computes in torch ops.


@pytest.mark.parametrize("name,kind", [("chunk_gated_delta_rule", "token"), ("fused_recurrent_kda", "key")])
@pytest.mark.parametrize("neg", [False, True], ids=["sigmoid", "2sigmoid"])
def test_beta_sigmoid(name, kind, neg):
    """use_beta_sigmoid_in_kernel: beta is a logit; allow_neg_eigval doubles it (β ∈ (0, 2))."""
    q, k, v, logit, g, h = make_inputs(kind, 1, 40, 2, 8, 8, 21, True)
    leaves = [x.float().requires_grad_() for x in (q, k, v, logit, g, h)]
    o, S = call(name, *leaves, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                allow_neg_eigval=neg)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    beta = leaves64[3].sigmoid() * (2 if neg else 1)
    o_ref, S_ref = reference(kind, leaves64[0], leaves64[1], leaves64[2], beta, leaves64[4], leaves64[5],
                             normalize=True)
    assert_close(o, o_ref, 2e-4, "o")
    assert_close(S, S_ref, 2e-4, "final_state")
    (o.sum() + S.sum()).backward()
    (o_ref.sum() + S_ref.sum()).backward()
    assert_close(leaves[3].grad, leaves64[3].grad, 2e-4, "dbeta (the logit's)")


@pytest.mark.parametrize("name,kind", [("chunk_gated_delta_rule", "token"), ("chunk_kda", "key"),
                                       ("fused_recurrent_delta_rule", None)])
def test_grouped_value_heads(name, kind):
    """v with HV = 2·H heads: value head i reads query and key head i // 2 (flash-linear-attention's GVA)."""
    B, T, H, HV, K, V = 1, 33, 2, 4, 8, 8
    q, k, v, beta, g, h = make_inputs(kind, B, T, H, K, V, 17, True, HV=HV)
    leaves = [None if x is None else x.float().requires_grad_() for x in (q, k, v, beta, g, h)]
    o, S = call(name, *leaves, use_qk_l2norm_in_kernel=True)
    assert o.shape == (B, T, HV, V) and S.shape == (B, HV, K, V)
    leaves64 = [None if x is None else x.detach().double().requires_grad_() for x in leaves]
    q2, k2 = (x.repeat_interleave(2, dim=2) for x in leaves64[:2])
    o_ref, S_ref = reference(kind, q2, k2, *leaves64[2:], normalize=True)
    assert_close(o, o_ref, 2e-4, "o")
    assert_close(S, S_ref, 2e-4, "final_state")
    (o.sum() + S.sum()).backward()
    (o_ref.sum() + S_ref.sum()).backward()
    for a, b, what in zip(leaves, leaves64, NAMES):
        if a is not None:
            assert_close(a.grad, b.grad, 2e-4, f"d{what}")


def test_fused_recurrent_g_and_gk():
    """fused_recurrent_gated_delta_rule with both g and gk decays by exp(g_t)·diag(exp gk_t)."""
    q, k, v, beta, gk, h = make_inputs("key", 2, 20, 2, 8, 4, 23, True)
    g = F.logsigmoid(torch.randn(2, 20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 2)
    o, S = fla.fused_recurrent_gated_delta_rule(q.float(), k.float(), v.float(), g=g.float(), gk=gk.float(),
                                                beta=beta.float(), initial_state=h.float(), output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
    o_ref, S_ref = naive(q, k, v, beta, gk + g[..., None], 8 ** -0.5, h, normalize=True)
    assert_close(o, o_ref, 2e-4, "o")
    assert_close(S, S_ref, 2e-4, "final_state")


def test_scale_and_defaults():
    q, k, v, beta, g, _ = (x.float() for x in make_inputs("token", 1, 10, 2, 4, 3, 2, True) if x is not None)
    o, ht = fla.chunk_gated_delta_rule(q, k, v, g, beta)
    assert ht is None and o.shape == (1, 10, 2, 3)
    o2, _ = fla.chunk_gated_delta_rule(q, k, v, g, beta, scale=0.5)
    assert_close(o2, o * (0.5 / 4 ** -0.5), 1e-6, "scale")
    # fused_recurrent_delta_rule's beta defaults to ones.
    o3, _ = fla.fused_recurrent_delta_rule(q, k, v)
    o4, _ = fla.fused_recurrent_delta_rule(q, k, v, torch.ones_like(beta))
    assert torch.equal(o3, o4)
    assert fla.chunk_gdn is fla.chunk_gated_delta_rule and fla.fused_recurrent_gdn is fla.fused_recurrent_gated_delta_rule


@pytest.mark.parametrize("chunk,recurrent,kind", [("chunk_delta_rule", "fused_recurrent_delta_rule", None),
                                                  ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule",
                                                   "token"),
                                                  ("chunk_kda", "fused_recurrent_kda", "key")])
def test_chunk_and_recurrent_agree_fp32(chunk, recurrent, kind):
    q, k, v, beta, g, h = (None if x is None else x.float() for x in make_inputs(kind, 2, 150, 2, 16, 8, 12, True))
    o1, s1 = call(chunk, q, k, v, beta, g, h, use_qk_l2norm_in_kernel=True)
    o2, s2 = call(recurrent, q, k, v, beta, g, h, use_qk_l2norm_in_kernel=True)
    assert_close(o1, o2, 1e-4, "o")
    assert_close(s1, s2, 1e-4, "final_state")


def test_decode_step_by_step():
    """fused_recurrent one token at a time, threading final_state, equals the whole sequence."""
    q, k, v, beta, g, _ = (None if x is None else x.float() for x in make_inputs("key", 1, 12, 2, 4, 4, 13, True))
    o_all, s_all = fla.fused_recurrent_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    state, outs = None, []
    for t in range(12):
        sl = slice(t, t + 1)
        o, state = fla.fused_recurrent_kda(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], initial_state=state,
                                           output_final_state=True, use_qk_l2norm_in_kernel=True)
        outs.append(o)
    assert_close(torch.cat(outs, 1), o_all, 1e-6, "o")
    assert_close(state, s_all, 1e-6, "final_state")


def test_strided_inputs():
    """Tensors that are views (heads-major storage transposed, every other token) give the contiguous result,
    and so do numpy arrays with negative strides at the binding."""
    q, k, v, beta, g, h = (x.float() for x in make_inputs("key", 2, 60, 3, 8, 5, 31, True))
    want, want_S = fla.chunk_kda(q, k, v, g, beta, initial_state=h, output_final_state=True)
    views = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v, g)]
    b_view = beta.transpose(1, 2).contiguous().transpose(1, 2)
    assert not views[0].is_contiguous()
    got, got_S = fla.chunk_kda(*views[:3], views[3], b_view, initial_state=h, output_final_state=True)
    assert torch.equal(got, want) and torch.equal(got_S, want_S)
    spread = [torch.repeat_interleave(x, 2, dim=1)[:, ::2] for x in (q, k, v, g, beta)]
    assert not spread[0].is_contiguous()
    got2, _ = fla.chunk_kda(*spread[:4], spread[4], initial_state=h)
    assert torch.equal(got2, want)
    # Reversed in time as numpy views (negative strides: copied by the binding), against the flipped result.
    arrays = [x.numpy()[:, ::-1] for x in (q, k, v, beta, g)]
    o_rev, _ = linattn._linattn.delta_rule(*arrays, gate="kda")
    flipped = [np.ascontiguousarray(a) for a in arrays]
    o_flip, _ = linattn._linattn.delta_rule(*flipped, gate="kda")
    np.testing.assert_array_equal(o_rev, o_flip)


def test_initial_state_not_modified():
    q, k, v, beta, g, h = (x.float() for x in make_inputs("token", 1, 9, 1, 4, 4, 14, True))
    before = h.clone()
    fla.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h, output_final_state=True)
    fla.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h, output_final_state=True)
    assert torch.equal(h, before)


def test_only_final_state_gradient():
    """A loss on the final state alone: the backward gets no output gradient."""
    q, k, v, beta, g, h = (x.float().requires_grad_() for x in make_inputs("key", 1, 30, 2, 4, 4, 15, True))
    _, S = fla.chunk_kda(q, k, v, g, beta, initial_state=h, output_final_state=True)
    S.sum().backward()
    assert q.grad.abs().max() == 0  # o alone depends on q
    assert k.grad.abs().sum() > 0 and h.grad.abs().sum() > 0


# ----------------------------------------------------------------------------------------------
# gradcheck through the fp64 oracle.


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "l2norm"])
@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_gradcheck(name, kind, normalize):
    tensors = [x.clone().requires_grad_() for x in make_inputs(kind, 1, 5, 2, 3, 2, 1, normalize) if x is not None]

    def fn(*xs):
        q_, k_, v_, b_ = xs[:4]
        g_ = xs[4] if kind is not None else None
        return call(name, q_, k_, v_, b_, g_, xs[-1], use_qk_l2norm_in_kernel=normalize)

    assert torch.autograd.gradcheck(fn, tensors, eps=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------------------------
# Errors that name the argument.


def small(dtype=torch.float32, B=1, T=6, H=2, K=4, V=3):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, d, generator=gen).to(dtype) for d in (K, K, V))
    return q, k, v, torch.rand(B, T, H, generator=gen).to(dtype)


def test_error_types_and_shapes():
    q, k, v, beta = small()
    with pytest.raises(TypeError, match="q: expected a CPU tensor"):
        fla.chunk_delta_rule(q.to("meta"), k, v, beta)
    with pytest.raises(TypeError, match="q: expected float32"):
        fla.chunk_delta_rule(q.to(torch.int16), k, v, beta)  # half precision runs (test_fla_half.py)
    with pytest.raises(TypeError, match="beta: expected torch.float32"):
        fla.chunk_delta_rule(q, k, v, beta.double())
    with pytest.raises(TypeError, match="beta: expected a torch.Tensor"):
        fla.chunk_delta_rule(q, k, v, [0.5])
    with pytest.raises(ValueError, match="q: expected 4 dims"):
        fla.chunk_delta_rule(q[0], k, v, beta)
    with pytest.raises(ValueError, match=r"beta: expected shape \[B, T, HV\] = \[1, 6, 2\], got \[1, 6\]"):
        fla.chunk_delta_rule(q, k, v, beta[..., 0])
    with pytest.raises(ValueError, match=r"beta: expected shape"):
        fla.chunk_delta_rule(q, k, v, beta[..., None])
    with pytest.raises(ValueError, match=r"g: expected shape \[B, T, HV\]"):
        fla.chunk_gated_delta_rule(q, k, v, torch.zeros(1, 6, 2, 4), beta)
    with pytest.raises(ValueError, match=r"g: expected shape \[B, T, HV, K\]"):
        fla.chunk_kda(q, k, v, torch.zeros(1, 6, 2), beta)
    with pytest.raises(ValueError, match="g: chunk_kda needs"):
        fla.chunk_kda(q, k, v, None, beta)
    with pytest.raises(ValueError, match=r"v\.extent\[1\]|v's|v:"):
        fla.chunk_delta_rule(q, k, v[:, :5], beta)
    with pytest.raises(ValueError, match=r"k\.extent\[3\]|k's|k:"):
        fla.fused_recurrent_delta_rule(q, k[..., :3], v, beta)
    with pytest.raises(ValueError, match="v: expected a multiple of q's 2 heads"):
        fla.chunk_delta_rule(q, k, torch.zeros(1, 6, 3, 3), torch.zeros(1, 6, 3))
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        fla.chunk_delta_rule(q, k, v, beta, initial_state=torch.zeros(1, 2, 3, 3))


def test_error_cu_seqlens():
    q, k, v, beta = small(B=2)
    with pytest.raises(ValueError, match="batch size is expected to be 1 rather than 2"):
        fla.chunk_delta_rule(q, k, v, beta, cu_seqlens=torch.tensor([0, 3, 6]))
    q, k, v, beta = small()
    with pytest.raises(ValueError, match="number of initial states.*2 rather than 1"):
        fla.fused_recurrent_delta_rule(q, k, v, beta, initial_state=torch.zeros(1, 2, 4, 3),
                                       cu_seqlens=torch.tensor([0, 3, 6]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        fla.chunk_delta_rule(q, k, v, beta, cu_seqlens=torch.tensor([0, 4, 3, 6]))
    with pytest.raises(TypeError, match="cu_seqlens: expected integers"):
        fla.chunk_delta_rule(q, k, v, beta, cu_seqlens=torch.tensor([0.0, 6.0]))


def test_error_unsupported_arguments():
    q, k, v, beta = small()
    g, gk = torch.zeros(1, 6, 2), torch.zeros_like(q)
    with pytest.raises(ValueError, match="use_gate_in_kernel=True needs A_log"):
        fla.chunk_gated_delta_rule(q, k, v, g, beta, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="A_log: expected 2 elements"):
        fla.chunk_kda(q, k, v, gk, beta, use_gate_in_kernel=True, A_log=torch.zeros(3))
    with pytest.raises(ValueError, match="dt_bias: expected 8 elements"):
        fla.fused_recurrent_kda(q, k, v, gk, beta, use_gate_in_kernel=True, A_log=torch.zeros(2),
                                dt_bias=torch.zeros(2))
    with pytest.raises(ValueError, match="safe_gate=True requires lower_bound"):
        fla.chunk_kda(q, k, v, gk, beta, safe_gate=True)
    with pytest.raises(NotImplementedError, match="gv"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, g=g, gv=torch.zeros_like(v), beta=beta)
    with pytest.raises(NotImplementedError, match="beta: a beta per value dimension"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=torch.rand(1, 6, 2, 3))
    with pytest.raises(NotImplementedError, match="return_intermediate_states"):
        fla.chunk_kda(q, k, v, gk, beta, return_intermediate_states=True)
    with pytest.raises(NotImplementedError, match="cp_context"):
        fla.chunk_gated_delta_rule(q, k, v, g, beta, cp_context=object())
    with pytest.raises(ValueError, match="Cannot pass both"):
        fla.fused_recurrent_kda(q, k, v, gk, beta, state_v_first=True, transpose_state_layout=True)
    with pytest.raises(ValueError, match="allow_neg_eigval=True` requires"):
        fla.chunk_kda(q, k, v, gk, beta, allow_neg_eigval=True)
    with pytest.raises(ValueError, match="`chunk_size` must be 32 or 64"):
        fla.chunk_kda(q, k, v, gk, beta, chunk_size=16)
    with pytest.raises(ValueError, match="`chunk_size` must be 16, 32 or 64"):
        fla.chunk_delta_rule(q, k, v, beta, chunk_size=48)
    with pytest.raises(DeprecationWarning, match="head_first"):
        fla.chunk_delta_rule(q, k, v, beta, head_first=False)
    with pytest.raises(TypeError, match="not_an_argument"):  # no **kwargs here, in fla either
        fla.fused_recurrent_delta_rule(q, k, v, beta, not_an_argument=1)


@pytest.mark.parametrize("name", ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_kda",
                                  "fused_recurrent_kda"])
def test_state_v_first(name):
    """A state given and returned as [N, H, V, K] is the transpose of the [N, H, K, V] one."""
    q, k, v, beta, g, h = make_inputs("key" if "kda" in name else "token", 2, 9, 2, 4, 3, 7, False)
    q, k, v, beta, g, h = (x.float() for x in (q, k, v, beta, g, h))
    o, final = call(name, q, k, v, beta, g, h)
    o_t, final_t = call(name, q, k, v, beta, g, h.transpose(-1, -2).contiguous(), state_v_first=True)
    assert_close(o_t, o, 1e-6, "o with state_v_first")
    assert final_t.shape == (2, 2, 3, 4)
    assert_close(final_t.transpose(-1, -2), final, 1e-6, "final_state with state_v_first")
    if name.startswith("fused"):  # the fused_recurrent functions' deprecated name for it
        with pytest.warns(DeprecationWarning, match="transpose_state"):
            _, final_d = call(name, q, k, v, beta, g, h.transpose(-1, -2).contiguous(), transpose_state_layout=True)
        assert_close(final_d, final_t, 0, "final_state with transpose_state_layout")


def naive_gate(g, A_log, dt_bias, lower_bound=None):
    """flash-linear-attention's gate formulas, written here from its documentation."""
    shape = g.shape[2:]
    x = g + dt_bias.view(shape)
    rate = A_log.exp().view(-1, *([1] * (len(shape) - 1)))
    if lower_bound is not None:
        return lower_bound * torch.sigmoid(rate * x)
    return -rate * F.softplus(x)


@pytest.mark.parametrize("name,kind,lower_bound", [("chunk_gated_delta_rule", "token", None),
                                                   ("fused_recurrent_gated_delta_rule", "token", None),
                                                   ("chunk_kda", "key", None), ("chunk_kda", "key", -5.0),
                                                   ("fused_recurrent_kda", "key", -3.0)])
def test_gate_in_kernel(name, kind, lower_bound):
    """use_gate_in_kernel=True: g is the gate's raw input, the log decay computed from A_log and dt_bias,
    with gradients to all three."""
    q, k, v, beta, g, h = make_inputs(kind, 1, 7, 2, 3, 2, 11, False)
    gen = torch.Generator().manual_seed(3)
    raw = torch.randn(g.shape, generator=gen, dtype=torch.float64)
    A_log = torch.randn(2, generator=gen, dtype=torch.float64).requires_grad_()
    dt_bias = torch.randn(g[0, 0].numel(), generator=gen, dtype=torch.float64).requires_grad_()
    raw.requires_grad_()
    extra = dict(use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
    if lower_bound is not None:
        extra["lower_bound"] = lower_bound
    o, final = call(name, q, k, v, beta, raw, h, **extra)
    o_ref, final_ref = call(name, q, k, v, beta, naive_gate(raw, A_log, dt_bias, lower_bound), h)
    assert_close(o, o_ref, 1e-12, "o")
    assert_close(final, final_ref, 1e-12, "final_state")
    grads = torch.autograd.grad((o.sum() + final.sum()), (raw, A_log, dt_bias))
    grads_ref = torch.autograd.grad((o_ref.sum() + final_ref.sum()), (raw, A_log, dt_bias))
    for got, want, what in zip(grads, grads_ref, ("dg", "dA_log", "ddt_bias")):
        assert_close(got, want, 1e-10, what)


def test_error_bindings():
    q, k, v, beta = (x.numpy() for x in small())
    with pytest.raises(ValueError, match="gate: expected"):
        linattn._linattn.delta_rule(q, k, v, beta, gate="mamba")
    with pytest.raises(TypeError, match="beta: expected a float32 array"):
        linattn._linattn.delta_rule(q, k, v, None, gate="delta_rule")
    with pytest.raises(ValueError, match="beta"):
        linattn._linattn.delta_rule(q, k, v, np.zeros((1, 6, 2, 3), np.float32), gate="delta_rule")
    state = np.zeros((1, 2, 3, 4), dtype=np.float32).transpose(0, 1, 3, 2)  # [1, 2, 4, 3], not C order
    with pytest.raises(ValueError, match="state: expected a C-contiguous array"):
        linattn._linattn.delta_rule_recurrent(q, k, v, beta, None, state, gate="delta_rule")
    with pytest.raises(TypeError, match="q: expected float64"):
        linattn._linattn.reference.delta_rule(q, k, v, beta, gate="delta_rule")
