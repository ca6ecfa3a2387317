"""linattn: exact softmax attention and linear attention over long sequences.

Functions take float32 numpy arrays q [B, Nq, H, D], k [B, Nk, H, D], v [B, Nk, H, E] in any strides
(read without a copy) and return a fresh float32 array [B, Nq, H, E]; layout="bhnd" takes and returns
torch's [B, H, N, D] order instead (see docs/python.md, docs/pytorch.md).

- softmax_attention(q, k, v, *, causal=False, key_lengths=None, scale=None, cu_seqlens=None)
- linear_attention(q, k, v, *, feature_map="elu", causal=False, key_lengths=None, eps=1e-6,
  n_features=None, seed=0, cu_seqlens=None)
- softmax_attention_backward / linear_attention_backward(q, k, v, dout, *, same options) -> (dq, dk, dv)
  (cu_seqlens [N + 1]: sequences packed along the time axis of batch row 0, each attending to itself)
- decayed_step(q, k, v, g, state, *, decay, ...) / delta_rule_step(q, k, v, beta, g, state, *, gate, ...):
  one decoding token [B, H, K] (float32, or numpy float16) against a float32 state [B, H, K, V] advanced in place
- RecurrentState(batch, heads, dim, value_dim, feature_map="elu"): .step(q, k, v), .save, .load
- info(): the CPU's features, the SIMD targets compiled in and the one dispatch chose (a dict)
- reference: the same functions in fp64 on float64 arrays (the slow oracle the tests trust)
- linattn.torch: autograd functions and nn.Module layers (imported on demand: it imports torch)
- linattn.fla: flash-linear-attention's ops on the CPU (fla.ops names and layout: the decayed family, the
  delta rule, RWKV-7's generalized delta rule; imports torch)
- linattn.layers: fla.layers' LinearAttention, GatedLinearAttention, SimpleGatedLinearAttention, DeltaNet,
  GatedDeltaNet, KimiDeltaAttention, MultiScaleRetention and Mamba2, with a constant-memory Cache
- linattn.mamba: mamba_ssm's mamba_chunk_scan_combined and selective_state_update (docs/mamba.md)
- linattn.integrations.transformers / .fla: enable() / disable() put linattn under transformers' models
  and flash-linear-attention's ops on CPU tensors (docs/models.md)
"""

import os

# Threads that wait for work sleep instead of spinning, unless the environment says otherwise: on a
# machine whose cores are busy (or shared with torch's own threads) spinning OpenMP threads steal the
# cores the working ones need (docs/pytorch.md "Threads"). The OpenMP runtime reads this when it is
# loaded, which is the next line unless torch (or another OpenMP user) was imported first.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import _half, _linattn  # noqa: E402
from ._layout import LAYOUTS, check_layout, from_bnhd, to_bnhd
from ._linattn import (
    __version__,
    RecurrentState,
    has_favor,
    info,
    num_threads,
    reference,
)
from ._threads import set_num_threads

__all__ = [
    "__version__",
    "LAYOUTS",
    "RecurrentState",
    "decayed_step",
    "delta_rule_step",
    "has_favor",
    "info",
    "linear_attention",
    "linear_attention_backward",
    "num_threads",
    "reference",
    "set_num_threads",
    "softmax_attention",
    "softmax_attention_backward",
]


_ATTENTION_TENSORS = {"q", "k", "v", "dout"}  # the 4-d ones; Linformer's E and F are not


def _with_layout(name, positional):
    """The C++ function `name` with a layout= keyword: q, k, v (and dout) are taken in that layout and
    the 4-d results (out, or dq, dk, dv) returned in it, as views (no copy either way)."""
    run = getattr(_linattn, name)

    def call(*args, layout="bnhd", **kwargs):
        check_layout(layout, name)
        if len(args) > len(positional):
            raise TypeError(f"{name}: expected at most {len(positional)} positional arguments, got {len(args)}")
        kwargs.update(zip(positional, args))
        for key in _ATTENTION_TENSORS & kwargs.keys():
            kwargs[key] = to_bnhd(kwargs[key], layout)
        result = _half.run(name, kwargs) if name in _half.NAMES and _half.is_half(kwargs) else run(**kwargs)
        if isinstance(result, tuple):  # (dq, dk, dv[, dE, dF]): the projections' gradients are not 4-d
            return tuple(from_bnhd(r, layout) if i < 3 else r for i, r in enumerate(result))
        return from_bnhd(result, layout)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = (f"{run.__doc__}\n\nlayout: \"bnhd\" (the default: q [B, Nq, H, D], k [B, Nk, H, D], v and the "
                    f"output [B, ·, H, E]) or \"bhnd\" (torch's [B, H, N, D]; read through a transposed view, "
                    f"no copy, and the result returned as a [B, H, N, E] view).")
    return call


decayed_step = _half.step("decayed_step")
delta_rule_step = _half.step("delta_rule_step")
softmax_attention = _with_layout("softmax_attention", ("q", "k", "v"))
softmax_attention_backward = _with_layout("softmax_attention_backward", ("q", "k", "v", "dout"))
linear_attention = _with_layout("linear_attention", ("q", "k", "v"))
linear_attention_backward = _with_layout("linear_attention_backward", ("q", "k", "v", "dout"))

# Linformer is bound when the build had include/linattn/linformer.hpp.
for _name in ("linformer_attention", "linformer_attention_backward"):
    if hasattr(_linattn, _name):
        globals()[_name] = _with_layout(_name, ("q", "k", "v", "E", "F", "dout")[:6 if "backward" in _name else 5])
        __all__.append(_name)
del _name
