"""PyTorch autograd for linattn: functions whose backward is linattn's C++ backward, and layers.

- scaled_dot_product_attention: torch.nn.functional.scaled_dot_product_attention's drop-in (its
  [B, H, N, D] layout, top-left is_causal, masks, dropout, GQA), linattn's kernel where it applies;
  linear_dot_product_attention: linear attention with the same layout and causal alignment.
- softmax_attention, linear_attention, linformer_attention: linattn's operators, which take a
  layout= argument ("bhnd": torch's [B, H, N, D]; "bnhd": [B, N, H, D]) and never guess it.
- Attention, SoftmaxAttention, LinearAttention: nn.Module layers.

softmax and linear attention are torch.library operators (linattn::*, with fake tensors and autograd)
where torch has torch.library.custom_op (2.4 and later), so torch.compile(fullgraph=True) and
torch.export see them as single nodes. Called from torch, linattn runs torch.get_num_threads()
threads unless linattn.set_num_threads(n > 0) was called (docs/pytorch.md).

Tensors must be on the CPU. float32 tensors run linattn's fast operators, read in place through
`.detach().numpy()` (no copy, any strides). float64 tensors run the fp64 oracle (linattn.reference:
O(N²), slow) so that torch.autograd.gradcheck works at fp64 tolerances; they are never rounded to
float32. Other dtypes, or q, k, v of different dtypes, raise TypeError.
"""

import functools

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from . import _half, _linattn
from ._layout import check_layout, from_bnhd, to_bnhd
from ._query_groups import by_query_groups
from ._torch_threads import torch_threads

_OPS = None
if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    from . import _torch_ops as _OPS

__all__ = ["scaled_dot_product_attention", "linear_dot_product_attention", "softmax_attention", "linear_attention",
           "Attention", "SoftmaxAttention", "LinearAttention"]
if hasattr(_linattn, "linformer_attention"):
    __all__.append("linformer_attention")

_NAMES = ("q", "k", "v", "E", "F")  # the tensor arguments, in order, for messages


_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _backend(tensors, half=False):
    """The module that computes on these tensors: the fast one for float32, the oracle for float64.
    half: float16 and bfloat16 are accepted too (softmax and linear attention through the torch.library
    operators, which run linattn's half-precision path)."""
    q = tensors[0]
    for name, x in zip(_NAMES, tensors):
        if x is None:  # F, when values are projected by E
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.device.type != "cpu":
            raise TypeError(f"{name}: expected a CPU tensor, got device {x.device}")
        if x.dtype not in (torch.float32, torch.float64) and not (half and q.dtype in _HALF_DTYPES):
            also = " (or float64, run by the fp64 oracle" + ("; float16 and bfloat16 where q is" if half else "") + ")"
            raise TypeError(f"{name}: expected float32{also}, got {x.dtype}")
        if x.dtype != q.dtype:
            raise TypeError(f"{name}: expected {q.dtype} (q's dtype), got {x.dtype}")
    if q.dtype in _HALF_DTYPES:
        return _half.TorchBackend(q.dtype, "f16" if q.dtype == torch.float16 else "bf16")
    return _linattn if q.dtype == torch.float32 else _linattn.reference


def _array(x):
    """The tensor's memory as a numpy array, strides and all (no copy); None stays None. A float16 or
    bfloat16 tensor gives its bits as uint16 (numpy has no bfloat16)."""
    if x is not None and x.dtype in _HALF_DTYPES:
        return x.detach().view(torch.int16).numpy().view(np.uint16)
    return None if x is None else x.detach().resolve_conj().resolve_neg().numpy()


def _tensor(backend, array):
    """A result array as a tensor of the backend's dtype."""
    return backend.wrap(array) if hasattr(backend, "wrap") else torch.from_numpy(array)


def _key_lengths(key_lengths, name="key_lengths"):
    if key_lengths is None:
        return None
    if isinstance(key_lengths, torch.Tensor):
        if key_lengths.is_floating_point() or key_lengths.is_complex() or key_lengths.dtype == torch.bool:
            raise TypeError(f"{name}: expected integers, got {key_lengths.dtype}")
        key_lengths = key_lengths.detach().cpu().numpy()
    return np.asarray(key_lengths)


def _key_lengths_tensor(key_lengths, name="key_lengths"):
    """key_lengths (or cu_seqlens, `name`) for the torch.library operators: None or an int64 CPU tensor."""
    if key_lengths is None:
        return None
    if isinstance(key_lengths, torch.Tensor):
        if key_lengths.is_floating_point() or key_lengths.is_complex() or key_lengths.dtype == torch.bool:
            raise TypeError(f"{name}: expected integers, got {key_lengths.dtype}")
        return key_lengths.detach().to(device="cpu", dtype=torch.int64)
    array = np.asarray(key_lengths)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers, got {array.dtype}")
    return torch.from_numpy(array.astype(np.int64))


def _packing(cu_seqlens):
    """The cu_seqlens keyword of the autograd.Function path where sequences are packed (none otherwise)."""
    return {} if cu_seqlens is None else {"cu_seqlens": _key_lengths(cu_seqlens, "cu_seqlens")}


class _Operator(torch.autograd.Function):
    """out = linattn.<name>(*tensors, **options), with linattn.<name>_backward(*tensors, dout, **options)
    as its backward: one gradient per tensor (None for an absent F).

    Where the backend has the pair _<name>_saving / _<name>_backward_saved (softmax and Linformer in
    float32), the forward's out and lse go to the backward instead of being recomputed there."""

    @staticmethod
    def forward(ctx, name, options, *tensors):
        with torch_threads():
            return _Operator._forward(ctx, name, options, *tensors)

    @staticmethod
    def _forward(ctx, name, options, *tensors):
        ctx.backend, ctx.name, ctx.options = _backend(tensors, half=name in _half.FUNCTION_NAMES), name, options
        saving = getattr(ctx.backend, f"_{name}_saving", None)
        arrays = [_array(t) for t in tensors]
        if saving is None:
            out, ctx.lse = _tensor(ctx.backend, getattr(ctx.backend, name)(*arrays, **options)), None
            ctx.save_for_backward(*tensors)
        else:
            out, ctx.lse = saving(*arrays, **options)
            out = _tensor(ctx.backend, out)
            ctx.save_for_backward(*tensors, out)  # autograd notices if out is then changed in place
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        with torch_threads():
            return _Operator._backward(ctx, dout)

    @staticmethod
    def _backward(ctx, dout):
        saved = ctx.saved_tensors
        dout = _array(dout.to(saved[0].dtype))
        if ctx.lse is None:
            backward = getattr(ctx.backend, f"{ctx.name}_backward")
            grads = backward(*map(_array, saved), dout, **ctx.options)
        else:
            backward = getattr(ctx.backend, f"_{ctx.name}_backward_saved")
            grads = backward(*map(_array, saved), ctx.lse, dout, **ctx.options)
        return (None, None, *(None if g is None else _tensor(ctx.backend, g) for g in grads))


@functools.partial(by_query_groups, q_at=0)
def _softmax_bnhd(q, k, v, causal, key_lengths, scale, cu_seqlens=None):
    """softmax attention on [B, N, H, D] tensors (views of any strides), bottom-right causal; q may have R
    times k's and v's heads (query head i reading key/value head i // R)."""
    if _OPS is not None:
        _backend((q, k, v), half=True)
        out, _ = _OPS.softmax_forward(q, k, v, bool(causal), None if scale is None else float(scale),
                                      _key_lengths_tensor(key_lengths),
                                      _key_lengths_tensor(cu_seqlens, "cu_seqlens"))
        return out
    _backend((q, k, v), half=True)
    options = dict(causal=bool(causal), key_lengths=_key_lengths(key_lengths), scale=scale, **_packing(cu_seqlens))
    return _Operator.apply("softmax_attention", options, q, k, v)


@functools.partial(by_query_groups, q_at=0)
def _linear_bnhd(q, k, v, causal, key_lengths, feature_map, eps, n_features, seed, cu_seqlens=None):
    """linear attention on [B, N, H, D] tensors (views of any strides), bottom-right causal; q may have R
    times k's and v's heads (query head i reading key/value head i // R)."""
    if _OPS is not None:
        _backend((q, k, v), half=True)
        return _OPS.linear_forward(q, k, v, str(feature_map), bool(causal), float(eps), n_features, int(seed),
                                   _key_lengths_tensor(key_lengths), _key_lengths_tensor(cu_seqlens, "cu_seqlens"))
    _backend((q, k, v), half=True)
    options = dict(feature_map=feature_map, causal=bool(causal), key_lengths=_key_lengths(key_lengths),
                   eps=float(eps), n_features=n_features, seed=seed, **_packing(cu_seqlens))
    return _Operator.apply("linear_attention", options, q, k, v)


def softmax_attention(q, k, v, *, layout=None, causal=False, key_lengths=None, scale=None, cu_seqlens=None):
    """softmax(q kᵀ · scale) v; layout "bhnd": q [B, H, Nq, D], k [B, H, Nk, D], v [B, H, Nk, E] ->
    [B, H, Nq, E] (torch's order), or "bnhd": q [B, Nq, H, D], ... -> [B, Nq, H, E]. No default: a
    4-d shape does not say which (TypeError when not given).

    scale defaults to 1/√D; causal aligns bottom-right (query i sees keys j ≤ i + Nk − Nq; torch's
    is_causal is top-left: scaled_dot_product_attention has that); key_lengths [B]: batch b sees keys
    j < key_lengths[b]. A row that sees no key outputs 0. cu_seqlens [N + 1] (integers, 0 to T): N
    sequences packed along the time axis of batch row 0 (B = 1), each attending to itself only.
    """
    check_layout(layout, "softmax_attention")
    q, k, v = (to_bnhd(x, layout) for x in (q, k, v))
    return from_bnhd(_softmax_bnhd(q, k, v, causal, key_lengths, scale, cu_seqlens), layout)


def linear_attention(q, k, v, *, layout=None, feature_map="elu", causal=False, key_lengths=None, eps=1e-6,
                     n_features=None, seed=0, cu_seqlens=None):
    """φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps), the sums over j < key_lengths[b]
    (and j ≤ i + Nk − Nq when causal: bottom-right). layout: "bhnd" or "bnhd", as softmax_attention.

    feature_map: "elu" (elu + 1, the default), "relu", "identity", or "favor" (Performer random
    features with n_features and seed) where built in. cu_seqlens [N + 1]: packed sequences, as
    softmax_attention.
    """
    check_layout(layout, "linear_attention")
    q, k, v = (to_bnhd(x, layout) for x in (q, k, v))
    return from_bnhd(_linear_bnhd(q, k, v, causal, key_lengths, feature_map, eps, n_features, seed, cu_seqlens),
                     layout)


def _float32_projection(name, x):
    """Linformer's E or F beside half-precision q, k, v: any floating CPU tensor, used as float32."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.device.type != "cpu":
        got = f"{x.dtype} on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a floating-point CPU tensor (used as float32), got {got}")
    return x.float()


def linformer_attention(q, k, v, E, F=None, *, layout=None, key_lengths=None, scale=None):
    """Linformer: softmax(q (E k)ᵀ · scale) (F v), keys and values projected along the sequence;
    layout: "bhnd" or "bnhd", as softmax_attention (E and F are not 4-d).

    E, F: [P, N_max] (shared by the heads) or [H, P, N_max]; F None: values are projected by E too.
    A sequence of Nk ≤ N_max keys uses the leading Nk columns. Differentiable in q, k, v, E and F.
    q, k, v may be float16 or bfloat16 (torch ≥ 2.4): E and F are then used as float32 and out has q's dtype.
    """
    check_layout(layout, "linformer_attention")
    q, k, v = (to_bnhd(x, layout) for x in (q, k, v))
    if _OPS is not None:
        if q.dtype in _HALF_DTYPES:  # half q, k, v; the projections in float32 (cast, differentiably)
            _backend((q, k, v), half=True)
            E, F = (None if x is None else _float32_projection(name, x) for name, x in (("E", E), ("F", F)))
        else:
            _backend((q, k, v, E, F))
        out, _ = _OPS.linformer_forward(q, k, v, E, E if F is None else F, None if scale is None else float(scale),
                                        _key_lengths_tensor(key_lengths))
        return from_bnhd(out, layout)
    options = dict(key_lengths=_key_lengths(key_lengths), scale=scale)
    return from_bnhd(_Operator.apply("linformer_attention", options, q, k, v, E, F), layout)


class Attention(nn.Module):
    """Multi-head attention with linattn inside: x [B, Nq, d_model] (and context [B, Nk, d_model] for
    cross-attention, default x) -> [B, Nq, d_model].

    q, k, v are linear projections of d_model to n_heads × head_dim (head_dim = d_model / n_heads by
    default; value_dim likewise), then attention="linear" or "softmax" per head, then an output
    projection back to d_model. Keyword arguments of the attention (feature_map, eps, scale,
    n_features, seed) are passed through.
    """

    def __init__(self, d_model, n_heads, attention="linear", causal=False, *, head_dim=None, value_dim=None,
                 bias=True, feature_map="elu", eps=1e-6, scale=None, n_features=None, seed=0, device=None,
                 dtype=None):
        super().__init__()
        if attention not in ("linear", "softmax"):
            raise ValueError(f'attention: expected "linear" or "softmax", got {attention!r}')
        if head_dim is None or value_dim is None:
            if d_model % n_heads != 0:
                raise ValueError(f"d_model: {d_model} is not a multiple of n_heads ({n_heads}); give head_dim")
        self.d_model, self.n_heads, self.attention, self.causal = d_model, n_heads, attention, causal
        self.head_dim = head_dim or d_model // n_heads
        self.value_dim = value_dim or d_model // n_heads
        factory = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(d_model, n_heads * self.value_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(n_heads * self.value_dim, d_model, bias=bias, **factory)
        if attention == "linear":
            self.options = dict(feature_map=feature_map, eps=eps, n_features=n_features, seed=seed)
        else:
            self.options = dict(scale=scale)

    def forward(self, x, context=None, *, key_lengths=None):
        context = x if context is None else context
        B, Nq, _ = x.shape
        Nk = context.shape[1]
        H = self.n_heads
        q = self.q_proj(x).view(B, Nq, H, self.head_dim)
        k = self.k_proj(context).view(B, Nk, H, self.head_dim)
        v = self.v_proj(context).view(B, Nk, H, self.value_dim)
        attend = linear_attention if self.attention == "linear" else softmax_attention
        out = attend(q, k, v, layout="bnhd", causal=self.causal, key_lengths=key_lengths, **self.options)
        return self.out_proj(out.reshape(B, Nq, H * self.value_dim))

    def extra_repr(self):
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, attention={self.attention!r}, "
                f"causal={self.causal}, head_dim={self.head_dim}, value_dim={self.value_dim}")


class SoftmaxAttention(Attention):
    """Attention(d_model, n_heads, attention="softmax", ...)."""

    def __init__(self, d_model, n_heads, causal=False, **kwargs):
        super().__init__(d_model, n_heads, "softmax", causal, **kwargs)


class LinearAttention(Attention):
    """Attention(d_model, n_heads, attention="linear", ...)."""

    def __init__(self, d_model, n_heads, causal=False, **kwargs):
        super().__init__(d_model, n_heads, "linear", causal, **kwargs)



# torch's layout and is_causal alignment (top-left); at the end: _sdpa builds on _softmax_bnhd/_linear_bnhd.
from ._sdpa import linear_dot_product_attention, scaled_dot_product_attention  # noqa: E402
