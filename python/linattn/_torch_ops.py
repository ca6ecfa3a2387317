"""linattn's softmax, linear and Linformer attention as torch.library operators (torch >= 2.4).

Registered as linattn::softmax_forward / softmax_backward, linattn::linear_forward /
linear_backward and linattn::linformer_forward / linformer_backward, each with a fake (meta) implementation that gives the output shapes without
computing, and with autograd wired forward → backward (_wire: one wiring for every pair). So torch.compile(fullgraph=True) traces them
as single nodes (no graph break) and torch.export keeps them in the exported program.

Tensors are [B, N, H, D] (linattn's own layout, any strides); linattn.torch transposes views in
front of them. float32 runs the fast operators, float64 the fp64 oracle (for gradcheck), float16 and
bfloat16 the half-precision operators (_linattn.half, on the tensors' bits; outputs of the input
dtype, lse in float32).
"""

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from . import _linattn
from ._tensor_arrays import array as _array, backend as _backend
from ._torch_threads import torch_threads


def _lengths(key_lengths):
    return None if key_lengths is None else key_lengths.detach().numpy()


def _packing(cu_seqlens):
    """The cu_seqlens keyword where sequences are packed (none otherwise, so that the calls without
    it keep their exact keywords)."""
    return {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens.detach().numpy()}


_HALF = {torch.float16: "f16", torch.bfloat16: "bf16"}


def _bits(x):
    """A float16/bfloat16 tensor's memory as a uint16 numpy array (no copy)."""
    return x.detach().view(torch.int16).numpy().view(np.uint16)


def _from_bits(a, dtype):
    return torch.from_numpy(a.view(np.int16)).view(dtype)


def _out_shape(q, v):
    return (q.shape[0], q.shape[1], q.shape[2], v.shape[3])


def _saving_fake(q, v):
    """The fake (out [B, Nq, H, E], lse [B, H, Nq]) of a forward that saves its log-sum-exp: float32 and the
    half dtypes save it, the float64 oracle does not (an empty lse)."""
    saves = q.dtype == torch.float32 or q.dtype in _HALF
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32) if saves else q.new_empty(0)
    return q.new_empty(_out_shape(q, v)), lse


def _wire(forward, backward, tensors, saves_outputs):
    """Registers backward's fake (the gradients of forward's first `tensors` inputs, shaped like them) and
    forward's autograd: the backward op called as backward(those inputs, forward's outputs where
    saves_outputs, dout, the remaining inputs (options)), their gradients None."""
    backward.register_fake(lambda *args, **kwargs: tuple(x.new_empty(x.shape) for x in args[:tensors]))

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:tensors], *(output if saves_outputs else ()))
        ctx.options = inputs[tensors:]

    def grad(ctx, dout, *_):  # the gradient of a saved lse is not used: lse is not differentiable here
        grads = backward(*ctx.saved_tensors, dout.contiguous(), *ctx.options)
        return *grads, *([None] * len(ctx.options))

    forward.register_autograd(grad, setup_context=setup)


@torch.library.custom_op("linattn::softmax_forward", mutates_args=())
def softmax_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float],
                    key_lengths: Optional[Tensor], cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """(out [B, Nq, H, E], lse [B, H, Nq]); lse is empty for float64 (the oracle's backward recomputes)."""
    options = dict(causal=causal, key_lengths=_lengths(key_lengths), scale=scale, **_packing(cu_seqlens))
    with torch_threads():
        if q.dtype in _HALF:
            out, lse = _linattn.half._softmax_attention_saving(_bits(q), _bits(k), _bits(v), dtype=_HALF[q.dtype],
                                                               **options)
            return _from_bits(out, q.dtype), torch.from_numpy(lse)
        if q.dtype == torch.float32:
            out, lse = _linattn._softmax_attention_saving(_array(q), _array(k), _array(v), **options)
            return torch.from_numpy(out), torch.from_numpy(lse)
        out = _linattn.reference.softmax_attention(_array(q), _array(k), _array(v), **options)
    return torch.from_numpy(out), q.new_empty(0)


@softmax_forward.register_fake
def _(q, k, v, causal, scale, key_lengths, cu_seqlens=None):
    return _saving_fake(q, v)


@torch.library.custom_op("linattn::softmax_backward", mutates_args=())
def softmax_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dout: Tensor, causal: bool,
                     scale: Optional[float], key_lengths: Optional[Tensor],
                     cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    options = dict(causal=causal, key_lengths=_lengths(key_lengths), scale=scale, **_packing(cu_seqlens))
    with torch_threads():
        if q.dtype in _HALF:
            grads = _linattn.half._softmax_attention_backward_saved(
                _bits(q), _bits(k), _bits(v), _bits(out), _array(lse), _bits(dout.to(q.dtype)), dtype=_HALF[q.dtype],
                **options)
            return tuple(_from_bits(g, q.dtype) for g in grads)
    arrays = [_array(q), _array(k), _array(v)]
    with torch_threads():
        if q.dtype == torch.float32:
            grads = _linattn._softmax_attention_backward_saved(*arrays, _array(out), _array(lse),
                                                                _array(dout.to(q.dtype)), **options)
        else:
            grads = _linattn.reference.softmax_attention_backward(*arrays, _array(dout.to(q.dtype)), **options)
    return tuple(torch.from_numpy(g) for g in grads)


_wire(softmax_forward, softmax_backward, 3, saves_outputs=True)


@torch.library.custom_op("linattn::linear_forward", mutates_args=())
def linear_forward(q: Tensor, k: Tensor, v: Tensor, feature_map: str, causal: bool, eps: float,
                   n_features: Optional[int], seed: int, key_lengths: Optional[Tensor],
                   cu_seqlens: Optional[Tensor] = None) -> Tensor:
    options = dict(feature_map=feature_map, causal=causal, key_lengths=_lengths(key_lengths), eps=eps,
                   n_features=n_features, seed=seed, **_packing(cu_seqlens))
    with torch_threads():
        if q.dtype in _HALF:
            out = _linattn.half.linear_attention(_bits(q), _bits(k), _bits(v), dtype=_HALF[q.dtype], **options)
            return _from_bits(out, q.dtype)
        return torch.from_numpy(_backend(q).linear_attention(_array(q), _array(k), _array(v), **options))


@linear_forward.register_fake
def _(q, k, v, feature_map, causal, eps, n_features, seed, key_lengths, cu_seqlens=None):
    return q.new_empty(_out_shape(q, v))


@torch.library.custom_op("linattn::linear_backward", mutates_args=())
def linear_backward(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, feature_map: str, causal: bool, eps: float,
                    n_features: Optional[int], seed: int, key_lengths: Optional[Tensor],
                    cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    options = dict(feature_map=feature_map, causal=causal, key_lengths=_lengths(key_lengths), eps=eps,
                   n_features=n_features, seed=seed, **_packing(cu_seqlens))
    with torch_threads():
        if q.dtype in _HALF:
            grads = _linattn.half.linear_attention_backward(_bits(q), _bits(k), _bits(v), _bits(dout.to(q.dtype)),
                                                            dtype=_HALF[q.dtype], **options)
            return tuple(_from_bits(g, q.dtype) for g in grads)
        grads = _backend(q).linear_attention_backward(_array(q), _array(k), _array(v), _array(dout.to(q.dtype)),
                                                      **options)
    return tuple(torch.from_numpy(g) for g in grads)


_wire(linear_forward, linear_backward, 3, saves_outputs=False)


@torch.library.custom_op("linattn::linformer_forward", mutates_args=())
def linformer_forward(q: Tensor, k: Tensor, v: Tensor, E: Tensor, F: Tensor, scale: Optional[float],
                      key_lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    """(out [B, Nq, H, E_v], lse [B, H, Nq]); F is E itself where the values share the key projection
    (autograd then adds both gradients into E). lse is empty for float64 (the oracle recomputes)."""
    options = dict(key_lengths=_lengths(key_lengths), scale=scale)
    if q.dtype in _HALF:  # E, F float32
        with torch_threads():
            out, lse = _linattn.half._linformer_attention_saving(_bits(q), _bits(k), _bits(v), _array(E), _array(F),
                                                                 dtype=_HALF[q.dtype], **options)
        return _from_bits(out, q.dtype), torch.from_numpy(lse)
    arrays = [_array(x) for x in (q, k, v, E, F)]
    with torch_threads():
        if q.dtype == torch.float32:
            out, lse = _linattn._linformer_attention_saving(*arrays, **options)
            return torch.from_numpy(out), torch.from_numpy(lse)
        out = _linattn.reference.linformer_attention(*arrays, **options)
    return torch.from_numpy(out), q.new_empty(0)


@linformer_forward.register_fake
def _(q, k, v, E, F, scale, key_lengths):
    return _saving_fake(q, v)


@torch.library.custom_op("linattn::linformer_backward", mutates_args=())
def linformer_backward(q: Tensor, k: Tensor, v: Tensor, E: Tensor, F: Tensor, out: Tensor, lse: Tensor, dout: Tensor,
                       scale: Optional[float],
                       key_lengths: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    options = dict(key_lengths=_lengths(key_lengths), scale=scale)
    if q.dtype in _HALF:
        with torch_threads():
            dq, dk, dv, dE, dF = _linattn.half._linformer_attention_backward_saved(
                _bits(q), _bits(k), _bits(v), _array(E), _array(F), _bits(out), _array(lse), _bits(dout.to(q.dtype)),
                dtype=_HALF[q.dtype], **options)
        return (*(_from_bits(g, q.dtype) for g in (dq, dk, dv)), torch.from_numpy(dE), torch.from_numpy(dF))
    arrays = [_array(x) for x in (q, k, v, E, F)]
    with torch_threads():
        if q.dtype == torch.float32:
            grads = _linattn._linformer_attention_backward_saved(*arrays, _array(out), _array(lse),
                                                                  _array(dout.to(q.dtype)), **options)
        else:
            grads = _linattn.reference.linformer_attention_backward(*arrays, _array(dout.to(q.dtype)), **options)
    return tuple(torch.from_numpy(g) for g in grads)


_wire(linformer_forward, linformer_backward, 5, saves_outputs=True)
