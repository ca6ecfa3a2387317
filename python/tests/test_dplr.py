"""flash-linear-attention's generalized delta rule and RWKV-7 (linattn._dplr, re-exported by linattn.fla) against
a naive recurrence written here from the math,
    S_t = diag(exp(gk_t)) S_{t−1} + b_t (a_tᵀ S_{t−1}) + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t   (S [K, V]),
token by token in float64, its gradients by torch.autograd through the loop; against flash-linear-attention's own
naive.py where that package is installed; gradcheck of the float64 path; bfloat16; reverse; packed sequences
with an empty one; and the checks of the arguments."""

import pytest
import torch

from linattn._dplr import (chunk_dplr_delta_rule, chunk_rwkv7, fused_mul_recurrent_rwkv7, fused_recurrent_dplr_delta_rule,
                           fused_recurrent_rwkv7)


def segments_of(B, T, cu):
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


def naive(q, k, v, a, b, gk, scale, h0=None, cu=None):
    """o [B, T, H, V] and the final states [N, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    rows, finals = {}, []
    for n, (bi, begin, end) in enumerate(segments_of(B, T, cu)):
        S = q.new_zeros(H, K, V) if h0 is None else h0[n]
        for t in range(begin, end):
            s = torch.einsum("hk,hkv->hv", a[bi, t], S)
            S = gk[bi, t].exp()[:, :, None] * S + b[bi, t][:, :, None] * s[:, None, :] \
                + k[bi, t][:, :, None] * v[bi, t][:, None, :]
            rows[(bi, t)] = scale * torch.einsum("hk,hkv->hv", q[bi, t], S)
        finals.append(S)
    o = torch.stack([torch.stack([rows[(bi, t)] for t in range(T)]) for bi in range(B)])
    return o, torch.stack(finals)


def inputs(B, T, H, K, V, seed=0, dtype=torch.float64, ab=0.5, gk_lo=-0.7, N=None):
    """q, k, v, a, b, gk and an initial state for N sequences (N = B by default)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, lo=-1.0, hi=1.0: (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    q, k, a, b = r(B, T, H, K), r(B, T, H, K), r(B, T, H, K, lo=-ab, hi=ab), r(B, T, H, K, lo=-ab, hi=ab)
    v, gk = r(B, T, H, V), r(B, T, H, K, lo=gk_lo, hi=0.0)
    h0 = r(B if N is None else N, H, K, V)
    return [x.to(dtype) for x in (q, k, v, a, b, gk, h0)]


def relative(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


FUNCTIONS = [fused_recurrent_dplr_delta_rule, chunk_dplr_delta_rule]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("T", [1, 63, 65, 97])
def test_float32_forward_and_gradients_match_the_naive_recurrence(fn, T):
    B, H, K, V = 2, 2, 7, 5
    x64 = [x.requires_grad_() for x in inputs(B, T, H, K, V, seed=T)]
    o_ref, final_ref = naive(*x64[:6], K ** -0.5, h0=x64[6])
    do, dfinal = torch.randn_like(o_ref), torch.randn_like(final_ref)
    want = torch.autograd.grad((o_ref * do).sum() + (final_ref * dfinal).sum(), x64)
    x32 = [x.detach().float().requires_grad_() for x in x64]
    o, final = fn(*x32[:6], initial_state=x32[6], output_final_state=True)
    assert o.dtype == torch.float32 and final.dtype == torch.float32
    assert relative(o, o_ref) < 2e-5 and relative(final, final_ref) < 2e-5
    got = torch.autograd.grad((o * do.float()).sum() + (final * dfinal.float()).sum(), x32)
    for name, g, w in zip(("q", "k", "v", "a", "b", "gk", "initial_state"), got, want):
        assert relative(g, w) < 5e-5, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_packed_sequences_with_an_empty_one_and_reverse(dtype):
    cu = [0, 20, 20, 21, 50]
    H, K, V = 2, 6, 3
    q, k, v, a, b, gk, h0 = inputs(1, 50, H, K, V, seed=3, N=4)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    o_ref, final_ref = naive(q, k, v, a, b, gk, 0.7, h0=h0, cu=cu)
    args = [x.to(dtype) for x in (q, k, v, a, b, gk)]
    o, final = chunk_dplr_delta_rule(*args, scale=0.7, initial_state=h0.to(dtype), output_final_state=True,
                                     cu_seqlens=torch.tensor(cu))
    assert relative(o, o_ref) < tol and relative(final, final_ref) < tol
    assert torch.equal(final[1], h0[1].to(dtype))  # the empty sequence keeps its state
    # reverse: each sequence walked from its end, o in the original order.
    flip = torch.cat([torch.arange(e - 1, s - 1, -1) for s, e in zip(cu[:-1], cu[1:])])
    o_rev_ref, final_rev_ref = naive(*[x.index_select(1, flip) for x in (q, k, v, a, b, gk)], 0.7, h0=h0, cu=cu)
    o, final = fused_recurrent_dplr_delta_rule(*args, scale=0.7, initial_state=h0.to(dtype), output_final_state=True,
                                               reverse=True, cu_seqlens=torch.tensor(cu))
    assert relative(o, o_rev_ref.index_select(1, flip)) < tol and relative(final, final_rev_ref) < tol


def test_rwkv7_names_map_r_to_q_and_w_to_the_log_decay():
    B, T, H, K, V = 1, 9, 2, 4, 4
    q, k, v, a, b, gk, h0 = inputs(B, T, H, K, V, seed=5, dtype=torch.float32)
    # chunk_rwkv7: scale 1.0 and no final state by default.
    o, final = chunk_rwkv7(q, gk, k, v, a, b)
    o_ref, _ = naive(*[x.double() for x in (q, k, v, a, b, gk)], 1.0)
    assert final is None and relative(o, o_ref) < 2e-5
    # fused_recurrent_rwkv7: scale K^-1/2 and the final state by default.
    o, final = fused_recurrent_rwkv7(q, gk, k, v, a, b, initial_state=h0)
    o_ref, final_ref = naive(*[x.double() for x in (q, k, v, a, b, gk)], K ** -0.5, h0=h0.double())
    assert relative(o, o_ref) < 2e-5 and relative(final, final_ref) < 2e-5


def test_fused_mul_recurrent_rwkv7_forms_a_and_b_from_kk():
    """a = −kk, b = kk ⊙ a, as flash-linear-attention's RWKV7 layer decodes; its gradients reach kk and a."""
    B, T, H, K, V = 1, 6, 2, 4, 3
    r, k, v, kk, alpha, w, h0 = [x.requires_grad_() for x in inputs(B, T, H, K, V, seed=8)]
    o, final = fused_mul_recurrent_rwkv7(r, w, k, v, kk, alpha, initial_state=h0, output_final_state=True)
    o_ref, final_ref = naive(r, k, v, -kk, kk * alpha, w, 1.0, h0=h0)
    assert relative(o, o_ref) < 1e-12 and relative(final, final_ref) < 1e-12
    got = torch.autograd.grad(o.sum() + final.sum(), (kk, alpha))
    want = torch.autograd.grad(o_ref.sum() + final_ref.sum(), (kk, alpha))
    for g, w_ in zip(got, want):
        assert relative(g, w_) < 1e-10
    o16, _ = fused_mul_recurrent_rwkv7(*[x.detach().bfloat16() for x in (r, w, k, v, kk, alpha)])
    assert o16.dtype == torch.bfloat16


def test_gradcheck_in_float64():
    x = [t.requires_grad_() for t in inputs(1, 4, 1, 3, 2, seed=11, ab=0.8)]

    def run(q, k, v, a, b, gk, h0):
        o, final = chunk_dplr_delta_rule(q, k, v, a, b, gk, initial_state=h0, output_final_state=True)
        return o, final

    assert torch.autograd.gradcheck(run, x)
    # and with the output alone (no final state), packed, in reverse.
    y = [t.requires_grad_() for t in inputs(1, 5, 2, 2, 3, seed=12, N=2)]
    cu = torch.tensor([0, 2, 5])
    assert torch.autograd.gradcheck(
        lambda q, k, v, a, b, gk, h0: fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk, initial_state=h0,
                                                                      reverse=True, cu_seqlens=cu)[0], y)


def test_a_transition_with_eigenvalues_outside_zero_one():
    """a = κ, b = 0.3 κ with κ one unit vector per head: an eigenvalue near exp(gk) + 0.3 > 1 every token, so
    the state grows about 1.3× a token along κ."""
    B, T, H, K, V = 1, 40, 2, 8, 4
    q, k, v, _, _, gk, h0 = inputs(B, T, H, K, V, seed=9, gk_lo=-0.01)
    kappa = torch.nn.functional.normalize(torch.randn(1, 1, H, K, generator=torch.Generator().manual_seed(1),
                                                      dtype=torch.float64), dim=-1).expand(B, T, H, K)
    a, b = kappa, 0.3 * kappa
    o_ref, final_ref = naive(q, k, v, a, b, gk, 1.0, h0=h0)
    assert final_ref.abs().max() > 100 * h0.abs().max()  # the state grows
    o, final = fused_recurrent_rwkv7(*[x.float() for x in (q, gk, k, v, a, b)], scale=1.0, initial_state=h0.float())
    assert relative(o, o_ref) < 1e-4 and relative(final, final_ref) < 1e-4


def test_bfloat16_runs_in_float32():
    q, k, v, a, b, gk, h0 = inputs(1, 17, 2, 4, 3, seed=2, dtype=torch.bfloat16)
    o, final = fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk, initial_state=h0.float(), output_final_state=True)
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32
    o_ref, final_ref = naive(*[x.double() for x in (q, k, v, a, b, gk)], 4 ** -0.5, h0=h0.double())
    assert relative(o, o_ref) < 1e-2 and relative(final, final_ref) < 1e-5


def test_flash_linear_attention_naive_recurrence():
    naive_fla = pytest.importorskip("fla.ops.generalized_delta_rule.dplr.naive",
                                    reason="flash-linear-attention is not installed")
    q, k, v, a, b, gk, h0 = inputs(2, 12, 2, 4, 3, seed=4, dtype=torch.float32)
    heads_first = [x.transpose(1, 2).contiguous() for x in (q, k, v, a, b, gk)]
    o_fla, final_fla = naive_fla.dplr_recurrence(*heads_first, initial_state=h0, output_final_state=True)
    o, final = chunk_dplr_delta_rule(q, k, v, a, b, gk, initial_state=h0, output_final_state=True)
    assert relative(o, o_fla.transpose(1, 2)) < 1e-5 and relative(final, final_fla) < 1e-5


def test_arguments_are_checked_by_name():
    q, k, v, a, b, gk, h0 = inputs(2, 5, 2, 4, 3, dtype=torch.float32)
    with pytest.raises(ValueError, match="^a: expected q's shape"):
        chunk_dplr_delta_rule(q, k, v, a[..., :3], b, gk)
    with pytest.raises(ValueError, match="^gk: expected q's shape"):
        fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk[:, :4])
    with pytest.raises(TypeError, match="^b: expected torch.float32"):
        chunk_dplr_delta_rule(q, k, v, a, b.double(), gk)
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        chunk_dplr_delta_rule(q, k, v, a, b, gk, cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="^initial_state: expected shape"):
        chunk_rwkv7(q, gk, k, v, a, b, initial_state=h0[:, :1])
    with pytest.raises(NotImplementedError, match="cp_context"):
        chunk_rwkv7(q, gk, k, v, a, b, cp_context=object())
    with pytest.raises(ValueError, match="lower_bound"):
        chunk_dplr_delta_rule(q, k, v, a, b, gk, lower_bound=0.5)
    with pytest.raises(DeprecationWarning, match="head_first"):
        fused_recurrent_rwkv7(q, gk, k, v, a, b, head_first=True)
    with pytest.raises(TypeError):
        fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk, chunk_size=16)  # not one of its keywords
    # Keywords flash-linear-attention's chunked functions read only on the GPU change nothing.
    o, _ = chunk_dplr_delta_rule(q, k, v, a, b, gk, safe_gate=True, chunk_size=32, disable_recompute=True,
                                 lower_bound=-5.0, use_cache=True)
    assert torch.equal(o, chunk_dplr_delta_rule(q, k, v, a, b, gk)[0])

