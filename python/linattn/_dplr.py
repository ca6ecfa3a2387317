"""flash-linear-attention's generalized delta rule, diagonal plus low rank (``fla.ops.generalized_delta_rule``),
and RWKV-7's operators (``fla.ops.rwkv7``) on the CPU, computed by linattn (include/linattn/dplr.hpp).

The recurrence, per sequence and head, on a state S [K, V] (flash-linear-attention writes it on the
transposed [V, K] state as S_t = S_{t-1} (diag(exp(gk_t)) + a_t b_tᵀ) + v_t k_tᵀ):

    S_t = (diag(exp(gk_t)) + b_t a_tᵀ) S_{t-1} + k_t v_tᵀ,    o_t = scale · S_tᵀ q_t

q, k, a, b, gk [B, T, H, K] (gk a log decay), v [B, T, H, V], states [N, H, K, V] (N = B, or the number of
sequences packed with cu_seqlens). RWKV-7's r is q and its w the log decay gk (w = −exp(·) in the model,
so exp(w) ∈ (0, 1)); chunk_rwkv7's and fused_mul_recurrent_rwkv7's scale defaults to 1.0, the others' to K^-1/2,
as in flash-linear-attention; fused_mul_recurrent_rwkv7 takes kk and a and forms a = −kk, b = kk ⊙ a.

Every function runs the token-by-token operator, forward and backward: the chunked (WY) form of the
generalized delta rule is later work, so chunk_dplr_delta_rule and chunk_rwkv7 take the same path as the
fused_recurrent_* ones. Autograd reaches q, k, v, a, b, gk and initial_state (fused_recurrent_* included,
which flash-linear-attention leaves without a backward). float32 runs linattn's fp32 operator, float64 the
fp64 oracle (gradcheck), bfloat16 and float16 run in float32 (o rounded back to q's dtype, the final state
float32). Tensors on the CPU only; context parallelism (cp_context) is refused by name.
"""

import torch

from ._query_groups import by_query_groups
from ._tensor_arrays import array as _array, backend as _backend
from ._torch_threads import torch_threads

__all__ = [
    "chunk_dplr_delta_rule",
    "fused_recurrent_dplr_delta_rule",
    "chunk_rwkv7",
    "fused_recurrent_rwkv7",
    "fused_mul_recurrent_rwkv7",
]


def _fla():
    """linattn.fla, for the argument checks its functions share; imported at call time, as linattn.fla
    re-exports this module's names."""
    from . import fla

    return fla


class _Dplr(torch.autograd.Function):
    """The recurrence on float32 (linattn's operator) or float64 (the oracle) tensors; cu: an int64 numpy
    array or None. Returns (o, final_state or None)."""

    @staticmethod
    def forward(ctx, q, k, v, a, b, gk, initial_state, cu, scale, want_final):
        with torch_threads():
            o, final = _backend(q).dplr_delta_rule(*[_array(x) for x in (q, k, v, a, b, gk)], scale=scale,
                                                   initial_state=_array(initial_state),
                                                   output_final_state=want_final, cu_seqlens=cu)
        ctx.save_for_backward(q, k, v, a, b, gk, initial_state)
        ctx.options = (cu, scale)
        return torch.from_numpy(o), (torch.from_numpy(final) if want_final else None)

    @staticmethod
    def backward(ctx, do, dfinal):
        q, k, v, a, b, gk, initial_state = ctx.saved_tensors
        cu, scale = ctx.options
        if do is None:
            do = q.new_zeros((*q.shape[:3], v.shape[3]))
        with torch_threads():
            grads = _backend(q).dplr_delta_rule_backward(
                *[_array(x) for x in (q, k, v, a, b, gk)], _array(do.to(q.dtype)),
                None if dfinal is None else _array(dfinal.to(q.dtype).contiguous()), scale=scale,
                initial_state=_array(initial_state), cu_seqlens=cu)
        dq, dk, dv, da, db, dgk, dinit = [None if x is None else torch.from_numpy(x) for x in grads]
        return dq, dk, dv, da, db, dgk, dinit, None, None, None


def _dplr(q, k, v, a, b, gk, *, scale, initial_state, output_final_state, reverse, cu_seqlens):
    """The one entry point: query groups (q's heads R times k's: linattn._query_groups), then
    flash-linear-attention's checks and the recurrence (each sequence walked backwards with reverse)."""
    return by_query_groups(_dplr_heads, q_at=0)(q, k, v, a, b, gk, scale=scale, initial_state=initial_state,
                                                        output_final_state=output_final_state, reverse=reverse,
                                                        cu_seqlens=cu_seqlens)


def _dplr_heads(q, k, v, a, b, gk, *, scale, initial_state, output_final_state, reverse, cu_seqlens):
    """_dplr with k, a, b and gk of q's shape."""
    fla = _fla()
    fla._check_tensor("q", q)
    wide = q.dtype in fla._HALF
    for name, x in (("k", k), ("v", v), ("a", a), ("b", b), ("gk", gk)):
        fla._check_tensor(name, x, q.dtype)
    fla._check_dims("q", q, 4, "[B, T, H, K]")
    fla._check_dims("v", v, 4, "[B, T, H, V]")
    for name, x in (("k", k), ("a", a), ("b", b), ("gk", gk)):
        if x.shape != q.shape:
            raise ValueError(f"{name}: expected q's shape [B, T, H, K] = {list(q.shape)}, got {list(x.shape)}")
    B, T, H, K = fla._extents(q, v)
    half = q.dtype if wide else None
    if wide:  # float32 arithmetic on the half-precision inputs, rounded once each
        q, k, v, a, b, gk = (x.float() for x in (q, k, v, a, b, gk))
    cu, initial_state = fla._sequences_and_state(q, H, v.shape[3], initial_state, cu_seqlens, False)
    scale = fla._scale(scale, K)
    perm = fla._reverse_index(T, cu) if reverse else None
    if perm is not None:
        q, k, v, a, b, gk = (x.index_select(1, perm) for x in (q, k, v, a, b, gk))
    op_scale = scale
    if q.dtype == torch.float64:
        # The oracle takes scale as a float32; applied to q here it stays in fp64 (o is linear in q).
        q, op_scale = q * scale, 1.0
    o, final = _Dplr.apply(q, k, v, a, b, gk, initial_state, cu, float(op_scale), bool(output_final_state))
    if perm is not None:
        o = o.index_select(1, perm)
    return (o.to(half) if half is not None else o), final


def _context_parallel_and_bound(cp_context, lower_bound):
    _fla()._no_context_parallel(cp_context)
    if lower_bound is not None and lower_bound >= 0:
        raise ValueError(f"`lower_bound` must be negative (gk is a log-decay < 0), got {lower_bound}.")


def fused_recurrent_dplr_delta_rule(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=False,
                                    reverse=False, cu_seqlens=None):
    """S_t = (diag(exp(gk_t)) + b_t a_tᵀ) S_{t-1} + k_t v_tᵀ (S [K, V]), o_t = scale · S_tᵀ q_t, token by
    token. q, k, a, b, gk [B, T, H, K] (gk the log decay), v [B, T, H, V]; scale default K^-1/2;
    initial_state [N, H, K, V]; reverse=True walks each sequence from its end. Returns (o [B, T, H, V],
    final_state [N, H, K, V] or None). Differentiable (flash-linear-attention's is inference only)."""
    return _dplr(q, k, v, a, b, gk, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                 reverse=reverse, cu_seqlens=cu_seqlens)


def chunk_dplr_delta_rule(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=False,
                          cu_seqlens=None, cu_seqlens_cpu=None, safe_gate=False, chunk_size=None,
                          disable_recompute=False, cp_context=None, lower_bound=None, **kwargs):
    """flash-linear-attention's chunk_dplr_delta_rule (the training path), the same recurrence as
    fused_recurrent_dplr_delta_rule. linattn runs it token by token for now, forward and backward (the
    backward replays the states from checkpoints every ⌈√T⌉ tokens): the chunked WY form is later work, so
    chunk_size, safe_gate, disable_recompute and cu_seqlens_cpu change nothing; lower_bound must be
    negative when given. Returns (o [B, T, H, V], final_state [N, H, K, V] or None)."""
    _fla()._no_head_first(kwargs)
    _context_parallel_and_bound(cp_context, lower_bound)
    return _dplr(q, k, v, a, b, gk, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                 reverse=False, cu_seqlens=cu_seqlens)


def chunk_rwkv7(r, w, k, v, a, b, scale=1.0, initial_state=None, output_final_state=False, cu_seqlens=None,
                cu_seqlens_cpu=None, safe_gate=False, chunk_size=None, disable_recompute=False, cp_context=None,
                lower_bound=None, **kwargs):
    """RWKV-7's time mixing: chunk_dplr_delta_rule with q = r and gk = w (the log decay), scale 1.0 by
    default. Token by token for now (see chunk_dplr_delta_rule)."""
    _fla()._no_head_first(kwargs)
    return chunk_dplr_delta_rule(r, k, v, a, b, w, scale=scale, initial_state=initial_state,
                                 output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                                 cu_seqlens_cpu=cu_seqlens_cpu, safe_gate=safe_gate, chunk_size=chunk_size,
                                 disable_recompute=disable_recompute, cp_context=cp_context, lower_bound=lower_bound)


def fused_recurrent_rwkv7(r, w, k, v, a, b, scale=None, initial_state=None, output_final_state=True,
                          cu_seqlens=None, **kwargs):
    """RWKV-7 token by token (decoding): fused_recurrent_dplr_delta_rule with q = r and gk = w (the log
    decay); scale default K^-1/2 and the final state returned by default, as in flash-linear-attention."""
    _fla()._no_head_first(kwargs)
    return fused_recurrent_dplr_delta_rule(r, k, v, a, b, w, scale=scale, initial_state=initial_state,
                                           output_final_state=output_final_state, cu_seqlens=cu_seqlens)


def fused_mul_recurrent_rwkv7(r, w, k, v, kk, a, scale=1.0, initial_state=None, output_final_state=False,
                              reverse=False, cu_seqlens=None, **kwargs):
    """RWKV-7 decoding as flash-linear-attention's RWKV7 layer calls it: fused_recurrent_dplr_delta_rule with
    q = r, gk = w, a = −kk and b = kk ⊙ a (formed in float32 for half-precision inputs, as its kernel does);
    scale 1.0 by default."""
    _fla()._no_head_first(kwargs)
    for name, x in (("kk", kk), ("a", a)):
        _fla()._check_tensor(name, x, r.dtype if isinstance(r, torch.Tensor) else None)
    if kk.dtype in _fla()._HALF or a.dtype in _fla()._HALF:
        kk, a = kk.float(), a.float()
    return fused_recurrent_dplr_delta_rule(r, k, v, -kk, kk * a, w, scale=scale, initial_state=initial_state,
                                           output_final_state=output_final_state, reverse=reverse,
                                           cu_seqlens=cu_seqlens)
