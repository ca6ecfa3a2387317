"""linattn.fla on bfloat16 and float16 tensors (what flash-linear-attention's models pass): o in q's dtype
within flash-attention's criterion (at most 2x the error, against an fp64 recurrence, of the naive
recurrence run in float32 on the same rounded inputs and rounded once at the end), final states in
float32, gradients in each input's dtype, float32 gates beside half-precision q, k, v, and other dtypes
refused by name."""

import pytest
import torch
import torch.nn.functional as F

from linattn import fla

HALF = [torch.bfloat16, torch.float16]


def naive_gated_delta(q, k, v, log_decay, beta, scale):
    """o [B, T, H, V] and S [B, H, K, V], token by token in q's dtype: S ← diag(exp g_t) S, then
    S ← S + β_t k_t (v_t − Sᵀk_t)ᵀ (the delta rule) or, with beta None, S ← S + k_t v_tᵀ; o_t = scale · Sᵀq_t."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    rows = []
    for t in range(T):
        S = log_decay[:, t].exp()[..., None] * S
        kt, vt = k[:, t], v[:, t]
        if beta is None:
            S = S + kt[..., None] * vt[..., None, :]
        else:
            u = vt - torch.einsum("bhk,bhkv->bhv", kt, S)
            S = S + beta[:, t, :, None, None] * kt[..., None] * u[..., None, :]
        rows.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(rows, 1), S


def inputs(dtype, T, K=16, V=7, B=2, H=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g).to(dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1).to(dtype)
    v = torch.randn(B, T, H, V, generator=g).to(dtype)
    gk = (-torch.rand(B, T, H, K, generator=g) * 0.5).to(dtype)
    beta = torch.rand(B, T, H, generator=g).to(dtype)
    return q, k, v, gk, beta


def criterion(o, o_naive32, o64, dtype):
    """flash-attention's: linattn's error at most 2x the naive float32 recurrence's (rounded to dtype)."""
    ours = (o.double() - o64).abs().max().item()
    naive = (o_naive32.to(dtype).double() - o64).abs().max().item()
    assert ours <= 2 * naive + 1e-6, f"error {ours:.3g} > 2 x the naive recurrence's {naive:.3g}"


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("T", [1, 63, 65])
def test_chunk_gla_half(dtype, T):
    q, k, v, gk, _ = inputs(dtype, T)
    scale = q.shape[-1] ** -0.5
    o, final = fla.chunk_gla(q, k, v, gk, output_final_state=True)
    assert o.dtype == dtype and final.dtype == torch.float32
    o64, s64 = naive_gated_delta(*[x.double() for x in (q, k, v, gk)], None, scale)
    o32, _ = naive_gated_delta(*[x.float() for x in (q, k, v, gk)], None, scale)
    criterion(o, o32, o64, dtype)
    torch.testing.assert_close(final.double(), s64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mode", ["chunk", "recurrent"])
def test_gated_delta_rule_half(dtype, mode):
    q, k, v, gk, beta = inputs(dtype, 65, seed=1)
    g = gk[..., 0].float()  # a float32 gate beside half-precision q, k, v, as flash-linear-attention allows
    op = fla.chunk_gated_delta_rule if mode == "chunk" else fla.fused_recurrent_gated_delta_rule
    h0 = torch.randn(2, 3, 16, 7) * 0.1
    o, final = op(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True)
    assert o.dtype == dtype and final.dtype == torch.float32
    scale = q.shape[-1] ** -0.5
    log_decay = g[..., None].expand_as(gk)

    def naive(dt):
        out, S = naive_gated_delta(*[x.to(dt) for x in (q, k, v, log_decay)], beta.to(dt), scale)
        return out, S

    # With the initial state: against linattn's fp64 oracle. From zero: the criterion against the naive recurrence.
    o64, _ = fla.chunk_gated_delta_rule(*[x.double() for x in (q, k, v)], g=g.double(), beta=beta.double(),
                                        initial_state=h0.double())
    o64_zero, _ = naive(torch.float64)
    o32_zero, _ = naive(torch.float32)
    o_zero, _ = op(q, k, v, g=g, beta=beta)
    criterion(o_zero, o32_zero, o64_zero, dtype)
    assert (o.double() - o64).abs().max().item() < (0.02 if dtype == torch.bfloat16 else 0.003)


@pytest.mark.parametrize("dtype", HALF)
def test_gradients_come_back_in_each_inputs_dtype(dtype):
    q, k, v, gk, _ = inputs(dtype, 33, seed=2)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    g32 = gk.float().requires_grad_()
    o, _ = fla.chunk_gla(q, k, v, g32)
    (o.float() * torch.linspace(-1, 1, o.shape[-1])).sum().backward()
    assert (q.grad.dtype, k.grad.dtype, v.grad.dtype, g32.grad.dtype) == (dtype, dtype, dtype, torch.float32)
    # Against the same loss through float32 inputs: the gradients agree to half precision.
    qf, kf, vf, gf = (x.detach().float().requires_grad_() for x in (q, k, v, g32))
    of, _ = fla.chunk_gla(qf, kf, vf, gf)
    (of.to(dtype).float() * torch.linspace(-1, 1, of.shape[-1])).sum().backward()
    tol = 3e-2 if dtype == torch.bfloat16 else 4e-3
    for half_grad, ref in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad), (g32.grad, gf.grad)):
        torch.testing.assert_close(half_grad.float(), ref.to(half_grad.dtype).float(), rtol=tol, atol=tol)


def test_linear_attn_and_kda_half_shapes():
    q, k, v, gk, beta = inputs(torch.bfloat16, 9, seed=3)
    o, (S, z) = fla.chunk_linear_attn(q, k, v, output_final_state=True)
    assert o.dtype == torch.bfloat16 and S.dtype == z.dtype == torch.float32
    o, S = fla.chunk_kda(q, k, v, gk, beta, output_final_state=True)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32 and S.shape == (2, 3, 16, 7)


def test_other_dtypes_beside_half_are_refused_by_name():
    q, k, v, gk, _ = inputs(torch.bfloat16, 5)
    with pytest.raises(TypeError, match="k: expected torch.bfloat16"):
        fla.chunk_gla(q, k.double(), v, gk)
    with pytest.raises(TypeError, match="g: expected torch.bfloat16 .q's dtype. or float32"):
        fla.chunk_gla(q, k, v, gk.to(torch.float16))
    with pytest.raises(TypeError, match="q: expected float32"):
        fla.chunk_gla(q.to(torch.int32), k, v, gk)
