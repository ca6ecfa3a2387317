"""linattn: exact softmax attention and linear attention over long sequences.

Functions take float32 numpy arrays q [B, Nq, H, D], k [B, Nk, H, D], v [B, Nk, H, E] in any strides
(read without a copy) and return a fresh float32 array [B, Nq, H, E]; see docs/python.md.

- softmax_attention(q, k, v, *, causal=False, key_lengths=None, scale=None)
- linear_attention(q, k, v, *, feature_map="elu", causal=False, key_lengths=None, eps=1e-6,
  n_features=None, seed=0)
- softmax_attention_backward / linear_attention_backward(q, k, v, dout, *, same options) -> (dq, dk, dv)
- RecurrentState(batch, heads, dim, value_dim, feature_map="elu"): .step(q, k, v), .save, .load
- reference: the same functions in fp64 on float64 arrays (the slow oracle the tests trust)
- linattn.torch: autograd functions and nn.Module layers (imported on demand: it imports torch)
- linattn.fla: flash-linear-attention's decayed linear attention (fla.ops names and layout; imports torch)
"""

from ._linattn import (
    __version__,
    RecurrentState,
    has_favor,
    linear_attention,
    linear_attention_backward,
    num_threads,
    reference,
    set_num_threads,
    softmax_attention,
    softmax_attention_backward,
)

__all__ = [
    "__version__",
    "RecurrentState",
    "has_favor",
    "linear_attention",
    "linear_attention_backward",
    "num_threads",
    "reference",
    "set_num_threads",
    "softmax_attention",
    "softmax_attention_backward",
]

# Linformer is bound when the build had include/linattn/linformer.hpp.
from . import _linattn

for _name in ("linformer_attention", "linformer_attention_backward"):
    if hasattr(_linattn, _name):
        globals()[_name] = getattr(_linattn, _name)
        __all__.append(_name)
del _name
