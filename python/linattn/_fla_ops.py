"""linattn.fla's two recurrences as torch operators: the decayed family (linear, retention, lightning,
simple GLA, GLA) and the delta rule (DeltaNet, Gated DeltaNet, KDA), each a forward and a backward.

Where torch has torch.library.custom_op (2.4 and later) they are registered as linattn::decayed_forward
/ decayed_backward and linattn::delta_forward / delta_backward, with fake implementations (shapes
only) and autograd wired forward → backward, so torch.compile(fullgraph=True) traces fla's functions
and layers without a graph break and torch.export keeps them. On older torch the same computations
run inside a torch.autograd.Function.

Tensors: q, k [B, T, H, K], v [B, T, HV, V], g None, [B, T, HV] or [B, T, HV, K], beta [B, T, HV],
states [N, HV, K, V], o [B, T, HV, V]; HV = H but for the delta rule's grouped value heads (HV a multiple
of H). float32 runs linattn's fast operators, float64 the fp64 oracle, bfloat16 and float16 the chunked
half-precision operators on the tensors' own memory (_linattn.half: q, k, v, beta and o in q's type, g in q's
type or float32 with dg in g's, the states float32). An absent optional result (no final state, no g, no
initial state) is an empty tensor: an operator returns tensors only.
"""

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from . import _linattn
from ._tensor_arrays import array as _array, backend as _backend
from ._torch_threads import torch_threads

_HAS_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")


def _states(q, cu_seqlens):
    """N: the batch, or the number of sequences packed with cu_seqlens."""
    return q.shape[0] if cu_seqlens is None else max(cu_seqlens.shape[0] - 1, 0)


_HALF_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def state_dtype(q):
    """The states' dtype: float32 beside half-precision q (as flash-linear-attention keeps them), else q's."""
    return torch.float32 if q.dtype in _HALF_NAMES else q.dtype


def _bits(x):
    """x for the operators: a half tensor's memory as its uint16 bits (no copy), others as _array gives them."""
    if x is None or x.dtype not in _HALF_NAMES:
        return _array(x)
    return x.detach().view(torch.int16).numpy().view(np.uint16)


def _module(q):
    """(the module for q's dtype, its dtype keyword): _linattn.half with "bf16" or "f16" for half q."""
    if q.dtype in _HALF_NAMES:
        return _linattn.half, {"dtype": _HALF_NAMES[q.dtype]}
    return _backend(q), {}


def _tensor_or_empty(x, like):
    """An operator's result as a tensor (uint16 bits as like's half dtype), or an empty one of like's dtype."""
    if x is None:
        return like.new_empty(0)
    if x.dtype == np.uint16:
        return torch.from_numpy(x.view(np.int16)).view(like.dtype)
    return torch.from_numpy(x)


def _state_or_empty(x, q):
    return _tensor_or_empty(x, q.new_empty(0, dtype=state_dtype(q)))


def _none_if_empty(x):
    return None if x is None or x.numel() == 0 else x


# ---- the computations (shared by both wirings) -----------------------------------------------------


def _decayed_forward(q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale, chunk_size,
                     want_final):
    options = dict(decay=decay, g_gamma=_array(g_gamma), scale=scale, cu_seqlens=_array(cu_seqlens))
    arrays = [_bits(x) for x in (q, k, v, g)]
    module, dtype = _module(q)
    with torch_threads():
        if recurrent and q.dtype == torch.float32:  # the caller's initial_state is read, never written
            o, final = _linattn.decayed_recurrent_forward(*arrays, initial_state=_array(initial_state),
                                                          output_final_state=want_final, **options)
        else:
            o, final = module.decayed_attention(*arrays, initial_state=_array(initial_state),
                                                output_final_state=want_final, chunk_size=chunk_size, **options,
                                                **dtype)
    return _tensor_or_empty(o, q), _state_or_empty(final, q)


def _decayed_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens, do, dfinal, decay, scale, chunk_size):
    options = dict(decay=decay, g_gamma=_array(g_gamma), scale=scale, cu_seqlens=_array(cu_seqlens))
    module, dtype = _module(q)
    with torch_threads():
        grads = module.decayed_attention_backward(
            *[_bits(x) for x in (q, k, v, g)], _bits(do.to(q.dtype)),
            _array(None if dfinal is None else dfinal.to(state_dtype(q))), initial_state=_array(initial_state),
            chunk_size=chunk_size, **options, **dtype)
    return _gradients(grads, (q, k, v, g, initial_state))


def _delta_forward(q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm, chunk_size,
                   want_final):
    options = dict(gate=gate, scale=scale, use_qk_l2norm=l2norm, cu_seqlens=_array(cu_seqlens))
    arrays = [_bits(x) for x in (q, k, v, beta, g)]
    module, dtype = _module(q)
    with torch_threads():
        if recurrent and q.dtype == torch.float32:  # the caller's initial_state is read, never written
            o, final = _linattn.delta_rule_recurrent_forward(*arrays, initial_state=_array(initial_state),
                                                             output_final_state=want_final, **options)
        else:
            o, final = module.delta_rule(*arrays, initial_state=_array(initial_state), output_final_state=want_final,
                                         chunk_size=chunk_size, **options, **dtype)
    return _tensor_or_empty(o, q), _state_or_empty(final, q)


def _delta_backward(q, k, v, beta, g, initial_state, cu_seqlens, do, dfinal, gate, scale, l2norm, chunk_size):
    options = dict(gate=gate, scale=scale, use_qk_l2norm=l2norm, cu_seqlens=_array(cu_seqlens))
    module, dtype = _module(q)
    with torch_threads():
        grads = module.delta_rule_backward(
            *[_bits(x) for x in (q, k, v, beta, g)], _bits(do.to(q.dtype)),
            _array(None if dfinal is None else dfinal.to(state_dtype(q))), initial_state=_array(initial_state),
            chunk_size=chunk_size, **options, **dtype)
    return _gradients(grads, (q, k, v, beta, g, initial_state))


def _gradients(grads, inputs):
    """The backward's arrays as tensors, each in its input's dtype (None: empty)."""
    return tuple(_tensor_or_empty(d, x if x is not None else inputs[0]) for d, x in zip(grads, inputs))


def _final(q, v, cu_seqlens, want_final):
    """The fake final state: [N, HV, K, V] in the states' dtype, or empty."""
    shape = (_states(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3]) if want_final else (0,)
    return q.new_empty(shape, dtype=state_dtype(q))


def _out_shape(q, v):
    """[B, T, HV, V], or [B, T, R·H, V] with query groups (q's heads a multiple of v's)."""
    return (*q.shape[:2], max(q.shape[2], v.shape[2]), v.shape[3])


def _outputs_grads(q, v, do, dfinal, want_final):
    """do (zeros when o was not used) and dfinal (None when there is no final state or no gradient)."""
    if do is None:
        do = q.new_zeros(_out_shape(q, v))
    dfinal = _none_if_empty(dfinal) if want_final else None
    return do.contiguous(), (None if dfinal is None else dfinal.contiguous())


# ---- the wiring: torch.library operators, or autograd Functions on older torch ----------------------

if _HAS_CUSTOM_OP:

    @torch.library.custom_op("linattn::decayed_forward", mutates_args=())
    def decayed_forward(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], initial_state: Optional[Tensor],
                        g_gamma: Optional[Tensor], cu_seqlens: Optional[Tensor], decay: str, recurrent: bool,
                        scale: float, chunk_size: int, want_final: bool) -> tuple[Tensor, Tensor]:
        return _decayed_forward(q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale, chunk_size,
                                want_final)

    @decayed_forward.register_fake
    def _(q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale, chunk_size, want_final):
        return q.new_empty(_out_shape(q, v)), _final(q, v, cu_seqlens, want_final)

    @torch.library.custom_op("linattn::decayed_backward", mutates_args=())
    def decayed_backward(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], initial_state: Optional[Tensor],
                         g_gamma: Optional[Tensor], cu_seqlens: Optional[Tensor], do: Tensor, dfinal: Optional[Tensor],
                         decay: str, scale: float, chunk_size: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return _decayed_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens, do, dfinal, decay, scale, chunk_size)

    @decayed_backward.register_fake
    def _(q, k, v, g, initial_state, g_gamma, cu_seqlens, do, dfinal, decay, scale, chunk_size):
        return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
                q.new_empty(0) if g is None else g.new_empty(g.shape),
                q.new_empty(0) if initial_state is None else initial_state.new_empty(initial_state.shape))

    def _decayed_setup(ctx, inputs, output):
        q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale, chunk_size, want_final = inputs
        ctx.save_for_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens)
        ctx.options = (decay, scale, chunk_size, want_final)

    def _decayed_grad(ctx, do, dfinal):
        q, k, v, g, initial_state, g_gamma, cu_seqlens = ctx.saved_tensors
        decay, scale, chunk_size, want_final = ctx.options
        do, dfinal = _outputs_grads(q, v, do, dfinal, want_final)
        dq, dk, dv, dg, dinit = decayed_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens, do, dfinal, decay,
                                                 scale, chunk_size)
        return (dq, dk, dv, None if g is None else dg, None if initial_state is None else dinit, *[None] * 7)

    decayed_forward.register_autograd(_decayed_grad, setup_context=_decayed_setup)

    @torch.library.custom_op("linattn::delta_forward", mutates_args=())
    def delta_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor],
                      initial_state: Optional[Tensor], cu_seqlens: Optional[Tensor], gate: str, recurrent: bool,
                      scale: float, l2norm: bool, chunk_size: int, want_final: bool) -> tuple[Tensor, Tensor]:
        return _delta_forward(q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm, chunk_size,
                              want_final)

    @delta_forward.register_fake
    def _(q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm, chunk_size, want_final):
        return q.new_empty(_out_shape(q, v)), _final(q, v, cu_seqlens, want_final)

    @torch.library.custom_op("linattn::delta_backward", mutates_args=())
    def delta_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Optional[Tensor],
                       initial_state: Optional[Tensor], cu_seqlens: Optional[Tensor], do: Tensor,
                       dfinal: Optional[Tensor], gate: str, scale: float, l2norm: bool,
                       chunk_size: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        return _delta_backward(q, k, v, beta, g, initial_state, cu_seqlens, do, dfinal, gate, scale, l2norm,
                               chunk_size)

    @delta_backward.register_fake
    def _(q, k, v, beta, g, initial_state, cu_seqlens, do, dfinal, gate, scale, l2norm, chunk_size):
        return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), beta.new_empty(beta.shape),
                q.new_empty(0) if g is None else g.new_empty(g.shape),
                q.new_empty(0) if initial_state is None else initial_state.new_empty(initial_state.shape))

    def _delta_setup(ctx, inputs, output):
        q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm, chunk_size, want_final = inputs
        ctx.save_for_backward(q, k, v, beta, g, initial_state, cu_seqlens)
        ctx.options = (gate, scale, l2norm, chunk_size, want_final)

    def _delta_grad(ctx, do, dfinal):
        q, k, v, beta, g, initial_state, cu_seqlens = ctx.saved_tensors
        gate, scale, l2norm, chunk_size, want_final = ctx.options
        do, dfinal = _outputs_grads(q, v, do, dfinal, want_final)
        dq, dk, dv, dbeta, dg, dinit = delta_backward(q, k, v, beta, g, initial_state, cu_seqlens, do, dfinal, gate,
                                                      scale, l2norm, chunk_size)
        return (dq, dk, dv, dbeta, None if g is None else dg, None if initial_state is None else dinit, *[None] * 7)

    delta_forward.register_autograd(_delta_grad, setup_context=_delta_setup)

else:

    class _Decayed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale, chunk_size,
                    want_final):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens)
            ctx.options = (decay, scale, chunk_size, want_final)
            return _decayed_forward(q, k, v, g, initial_state, g_gamma, cu_seqlens, decay, recurrent, scale,
                                    chunk_size, want_final)

        @staticmethod
        def backward(ctx, do, dfinal):
            q, k, v, g, initial_state, g_gamma, cu_seqlens = ctx.saved_tensors
            decay, scale, chunk_size, want_final = ctx.options
            do, dfinal = _outputs_grads(q, v, do, dfinal, want_final)
            dq, dk, dv, dg, dinit = _decayed_backward(q, k, v, g, initial_state, g_gamma, cu_seqlens, do, dfinal,
                                                      decay, scale, chunk_size)
            return (dq, dk, dv, None if g is None else dg, None if initial_state is None else dinit, *[None] * 7)

    class _Delta(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm, chunk_size,
                    want_final):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(q, k, v, beta, g, initial_state, cu_seqlens)
            ctx.options = (gate, scale, l2norm, chunk_size, want_final)
            return _delta_forward(q, k, v, beta, g, initial_state, cu_seqlens, gate, recurrent, scale, l2norm,
                                  chunk_size, want_final)

        @staticmethod
        def backward(ctx, do, dfinal):
            q, k, v, beta, g, initial_state, cu_seqlens = ctx.saved_tensors
            gate, scale, l2norm, chunk_size, want_final = ctx.options
            do, dfinal = _outputs_grads(q, v, do, dfinal, want_final)
            dq, dk, dv, dbeta, dg, dinit = _delta_backward(q, k, v, beta, g, initial_state, cu_seqlens, do, dfinal,
                                                           gate, scale, l2norm, chunk_size)
            return (dq, dk, dv, dbeta, None if g is None else dg, None if initial_state is None else dinit,
                    *[None] * 7)

    decayed_forward = _Decayed.apply
    delta_forward = _Delta.apply


# ---- inference: the computations without the operator's dispatch -----------------------------------


# Looked up once: a decode step asks on every call.
_compiler_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)


def _is_compiling():
    return bool(_compiler_is_compiling is not None and _compiler_is_compiling())


def records_graph(args):
    """Whether a call on these arguments records a graph: a tensor among them needs a gradient, or a compiler
    traces (the arguments that are not tensors are passed over, without building a list: a decode step asks)."""
    return _is_compiling() or (torch.is_grad_enabled() and any(isinstance(x, Tensor) and x.requires_grad
                                                                for x in args))


def _graph_free(graph_op, compute):
    """graph_op (the torch operator, or the autograd Function) wherever a graph may be recorded: an input
    that needs a gradient, or a compiler tracing; elsewhere compute itself. A decode step (no_grad,
    inference_mode, or inputs without requires_grad) then skips the operator's dispatch and autograd
    wrapping, which cost more than the step's arithmetic at small states (the same numbers either way)."""

    def run(*args):
        if records_graph(args):
            return graph_op(*args)
        return compute(*args)

    run.graph_op = graph_op
    return run


decayed_forward = _graph_free(decayed_forward, _decayed_forward)
delta_forward = _graph_free(delta_forward, _delta_forward)
