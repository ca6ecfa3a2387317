"""numpy float16 arrays through linattn's bf16/f16 operators (_linattn.half): the arrays are viewed as
uint16 bits (no copy) and the results viewed back as float16. numpy has no bfloat16; torch tensors of
torch.bfloat16 take the same path from _torch_ops.py."""

import numpy as np

from . import _linattn

_TENSORS = ("q", "k", "v", "dout")
NAMES = {"softmax_attention", "softmax_attention_backward", "linear_attention", "linear_attention_backward",
         "linformer_attention", "linformer_attention_backward"}
# The ones linattn.torch's autograd.Function (torch without custom_op) also runs in half: Linformer's
# float32 projection gradients do not fit its half results, so half Linformer needs torch ≥ 2.4.
FUNCTION_NAMES = NAMES - {"linformer_attention", "linformer_attention_backward"}


def is_half(kwargs):
    """Whether the call's q is a numpy float16 array (then every tensor argument must be)."""
    q = kwargs.get("q")
    return isinstance(q, np.ndarray) and q.dtype == np.float16


def _bits(name, x):
    if not isinstance(x, np.ndarray) or x.dtype != np.float16:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(f"{name}: expected float16 (q's dtype), got {got}")
    return x.view(np.uint16)


def run(name, kwargs):
    """linattn.<name>(**kwargs) on float16 arrays, results in float16."""
    half = _linattn.half
    kw = dict(kwargs, dtype="f16")
    for key in set(_TENSORS) & kw.keys():
        kw[key] = _bits(key, kw[key])
    if name == "linear_attention":
        return half.linear_attention(**kw).view(np.float16)
    if name == "linear_attention_backward":
        return tuple(g.view(np.float16) for g in half.linear_attention_backward(**kw))
    dout = kw.pop("dout", None)
    if name.startswith("linformer"):  # E and F stay float32, as do their gradients
        out, lse = half._linformer_attention_saving(**kw)
        if name == "linformer_attention":
            return out.view(np.float16)
        q, k, v, E, F = (kw.pop(key, None) for key in ("q", "k", "v", "E", "F"))
        dq, dk, dv, dE, dF = half._linformer_attention_backward_saved(q, k, v, E, F, out, lse, dout, **kw)
        return dq.view(np.float16), dk.view(np.float16), dv.view(np.float16), dE, dF
    out, lse = half._softmax_attention_saving(**kw)
    if name == "softmax_attention":
        return out.view(np.float16)
    q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
    grads = half._softmax_attention_backward_saved(q, k, v, out, lse, dout, **kw)
    return tuple(g.view(np.float16) for g in grads)


def step(name):
    """linattn.<name> (decayed_step, delta_rule_step): float32 arrays run _linattn.<name>; float16 ones (q's
    dtype: every tensor but the float32 state, which is advanced in place either way) run
    _linattn.half.<name> on their bits, and o comes back float16."""
    fast, half = getattr(_linattn, name), getattr(_linattn.half, name)
    tensors = _STEP_TENSORS[name]
    positional = (*tensors, "state")

    def call(q, *args, **kwargs):
        if not (isinstance(q, np.ndarray) and q.dtype == np.float16):
            return fast(q, *args, **kwargs)
        if len(args) > len(positional):
            raise TypeError(f"{name}: expected at most {len(positional) + 1} positional arguments, got {len(args) + 1}")
        kwargs.update(zip(positional, args))
        for key in tensors:
            if kwargs.get(key) is not None:
                kwargs[key] = _bits(key, kwargs[key])
        return half(q=q.view(np.uint16), dtype="f16", **kwargs).view(np.float16)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{fast.__doc__}\n\nfloat16 arrays (numpy's half; every tensor but the state) run in half precision."
    return call


# The tensors after q that a step takes (positionally, before its state).
_STEP_TENSORS = {"decayed_step": ("k", "v", "g"), "delta_rule_step": ("k", "v", "beta", "g")}


class TorchBackend:
    """What linattn.torch's autograd Function calls for torch.float16 / torch.bfloat16 tensors (torch
    without torch.library.custom_op): the half operators on the tensors' bits, results handed back as
    int16 arrays (torch.from_numpy takes those) and viewed as the tensors' dtype by wrap()."""

    def __init__(self, torch_dtype, dtype):
        self.torch_dtype, self.dtype = torch_dtype, dtype

    def wrap(self, array):
        import torch

        return torch.from_numpy(array.view(np.int16)).view(self.torch_dtype)

    def _softmax_attention_saving(self, q, k, v, **options):
        out, lse = _linattn.half._softmax_attention_saving(q, k, v, dtype=self.dtype, **options)
        return out.view(np.int16), lse

    def _softmax_attention_backward_saved(self, q, k, v, out, lse, dout, **options):
        grads = _linattn.half._softmax_attention_backward_saved(q, k, v, out.view(np.uint16), lse, dout,
                                                                dtype=self.dtype, **options)
        return tuple(g.view(np.int16) for g in grads)

    def linear_attention(self, q, k, v, **options):
        return _linattn.half.linear_attention(q, k, v, dtype=self.dtype, **options).view(np.int16)

    def linear_attention_backward(self, q, k, v, dout, **options):
        grads = _linattn.half.linear_attention_backward(q, k, v, dout, dtype=self.dtype, **options)
        return tuple(g.view(np.int16) for g in grads)
