"""flash-linear-attention's decayed linear attention and delta rule (``fla.ops``) on the CPU, computed
by linattn.

The names, arguments, defaults and layout are flash-linear-attention's, so that a model ports by
changing one import: q, k [B, T, H, K], v [B, T, HV, V], g [B, T, HV] (simple GLA, gated delta rule)
or [B, T, HV, K] (GLA, KDA), log-space; g_gamma [HV]; beta [B, T, HV]; states [N, HV, K, V] (N = B, or the
number of sequences packed with cu_seqlens). HV is v's number of heads, H or a multiple of it (grouped
value attention: value head j reads q/k head j // (HV / H), without a copy of q and k). Each function
returns (o [B, T, HV, V], final_state), final_state None unless output_final_state.

Query heads may also be a multiple R of the key/value heads (ONNX LinearAttention's grouped-query attention,
opset 27): q [B, T, R·H, K] over k [B, T, H, K] and v [B, T, H, V], query head i reading key/value head
i // R and its state; o [B, T, R·H, V], and g, g_gamma, beta, a, b, gk and the states have the H key/value
heads. Every function here takes them, forward and backward, chunked, token by token and in the decode
step, without a copy: the decayed family and the delta rule's forwards read the R query heads against one
state pass; the delta rule where a graph is recorded, normalize=True and the DPLR rule run R calls over
strided views of q (R times the state work). Query groups and grouped value heads together are refused.

- chunk_linear_attn, chunk_retention, chunk_simple_gla, chunk_gla, chunk_lightning_attn: the chunked
  engine (training); fused_chunk_linear_attn, fused_chunk_retention, fused_chunk_simple_gla,
  fused_chunk_gla: flash-linear-attention's fused chunked forms, the same recurrences.
- fused_recurrent_linear_attn, fused_recurrent_retention, fused_recurrent_simple_gla,
  fused_recurrent_gla, fused_recurrent_lightning_attn: token by token (decoding); reverse=True scans
  each sequence backwards.
- parallel_simple_gla, parallel_retention: the outputs without states, returned as (o, scores), the
  scores [B, H, T, T] only with output_attentions=True.
- chunk_delta_rule (fused_chunk_delta_rule), chunk_gated_delta_rule (chunk_gdn), chunk_kda and
  fused_recurrent_delta_rule, fused_recurrent_gated_delta_rule (fused_recurrent_gdn),
  fused_recurrent_kda: the delta rule (DeltaNet, Gated DeltaNet, Kimi Delta Attention), chunked and token
  by token.
- chunk_dplr_delta_rule, fused_recurrent_dplr_delta_rule, chunk_rwkv7, fused_recurrent_rwkv7,
  fused_mul_recurrent_rwkv7: the generalized (diagonal-plus-low-rank) delta rule of RWKV-7 (linattn._dplr,
  docs/rwkv7.md; token by token under the chunk_* names too, for now).

Keywords: where flash-linear-attention's function takes **kwargs, keywords it does not read are
accepted and ignored here too (transformers passes model-level ones such as use_cache or
output_router_logits along); where it does not, an unknown keyword is a TypeError, as in Python.

Tensors must be on the CPU. float32 runs linattn's fast operators (read in place, no copy); float64
runs the fp64 oracle (token by token, slow) so that gradcheck works at fp64 tolerances. bfloat16 and
float16 inputs (as flash-linear-attention's models give them) are read in place by linattn's half-precision
chunked operators where the call is chunked and q, k, v and beta share q's dtype (g may be float32, as the
models pass it); other half calls are widened to float32 on entry and run by the float32 operators. Either
way o and the gradients are the float32 results rounded once to their inputs' dtypes, and final_state stays
float32, as in flash-linear-attention. g, beta and initial_state may be float32 beside half-precision q, k,
v. Autograd
reaches q, k, v, g, beta and initial_state (not g_gamma), and A_log and dt_bias. state_v_first=True
takes and returns states as [N, H, V, K]. use_gate_in_kernel=True computes the log decay from g's raw
input as flash-linear-attention does (−exp(A_log)·softplus(g + dt_bias), or with lower_bound
lower_bound·sigmoid(exp(A_log)·(g + dt_bias))). Not supported, and refused by name:
fused_recurrent_gla's and fused_recurrent_gated_delta_rule's gv, a beta per value dimension, context
parallelism (cp_context), return_intermediate_states, output_attentions with cu_seqlens, integer or complex
dtypes, tensors on another device. Empty heads or dimensions (H, K or V of 0), a scale that is not a
number, an initial state of the wrong shape and cu_seqlens with fewer than two offsets are refused by the
argument's name.
"""

import functools
import warnings

import numpy as np
import torch
from . import _fla_ops
from ._query_groups import by_query_groups as _by_query_groups

__all__ = [
    "chunk_linear_attn",
    "chunk_retention",
    "chunk_simple_gla",
    "chunk_gla",
    "chunk_lightning_attn",
    "fused_chunk_linear_attn",
    "fused_chunk_retention",
    "fused_chunk_simple_gla",
    "fused_chunk_gla",
    "fused_recurrent_linear_attn",
    "fused_recurrent_retention",
    "fused_recurrent_simple_gla",
    "fused_recurrent_gla",
    "fused_recurrent_lightning_attn",
    "parallel_simple_gla",
    "parallel_retention",
    "chunk_delta_rule",
    "fused_chunk_delta_rule",
    "chunk_gated_delta_rule",
    "chunk_gdn",
    "chunk_kda",
    "fused_recurrent_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gdn",
    "fused_recurrent_kda",
    "chunk_dplr_delta_rule",
    "fused_recurrent_dplr_delta_rule",
    "chunk_rwkv7",
    "fused_recurrent_rwkv7",
    "fused_mul_recurrent_rwkv7",
]

# Added to the normaliser q·z of chunk_linear_attn(normalize=True), as flash-linear-attention does.
_NORMALIZE_EPS = 1e-10


def _check_tensor(name, x, dtype=None):
    # Called for every tensor of every call: is_cpu and the constant tuple below cost less than x.device.type
    # and building the tuple each time (a decode step's overhead is these checks and conversions).
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_cpu:
        raise TypeError(f"{name}: expected a CPU tensor (linattn runs on the CPU), got device {x.device}")
    if dtype is None:
        if x.dtype not in _FLOATS:
            raise TypeError(f"{name}: expected float32 (float64 runs the fp64 oracle; bfloat16 and float16 run in "
                            f"float32), got {x.dtype}")
    elif x.dtype != dtype and not (dtype in _HALF and x.dtype == torch.float32):
        raise TypeError(f"{name}: expected {dtype} (q's dtype), got {x.dtype}")


_HALF = (torch.bfloat16, torch.float16)
_FLOATS = (torch.float32, torch.float64) + _HALF


def _widen(name, x, half):
    """x for the float32 operators beside half-precision q: tensors of q's dtype or float32 (and tuples of
    them, chunk_linear_attn's (state, z)) as float32, anything else unchanged."""
    if isinstance(x, tuple):
        return tuple(_widen(f"{name}[{i}]", y, half) for i, y in enumerate(x))
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return x
    if x.dtype not in (half, torch.float32):
        raise TypeError(f"{name}: expected {half} (q's dtype) or float32, got {x.dtype}")
    return x.float()


def _native_half(mode, half, tensors, options):
    """Whether a half-precision call runs on linattn's half operators as it is: chunked, every tensor of q's
    type but g (q's type or float32) and the states (any: they become float32), and nothing computed in torch
    on the way (normalize's denominator, the in-kernel sigmoid of beta, g_gamma folded into g), which float32
    would compute more exactly."""
    if mode != "chunk" or options.get("normalize") or options.get("use_beta_sigmoid_in_kernel"):
        return False
    if any(isinstance(x, torch.Tensor) and x.dtype != half for x in tensors):  # beta
        return False
    g = options.get("g")
    if g is None:
        return True
    return isinstance(g, torch.Tensor) and g.dtype in (half, torch.float32) and options.get("g_gamma") is None


def _half_through_float32(entry):
    """bfloat16/float16 calls of an entry point (op, mode, kind, q, k, v, *tensors, **options): chunked ones
    whose tensors are q's type (g may be float32) run natively on the half operators (_native_half), the rest
    in float32 on widened copies. Either way every input is rounded to half precision once, products and
    states accumulate in float32, o and the gradients are rounded to their input's dtype once and the final
    state stays float32: the native calls give the widened ones' results bit for bit (with grouped value
    heads, dq and dk are summed over a group in float32 before their one rounding on both paths)."""

    @functools.wraps(entry)
    def run(op, mode, kind, q, k, v, *tensors, **options):
        if not isinstance(q, torch.Tensor) or q.dtype not in _HALF:
            return entry(op, mode, kind, q, k, v, *tensors, **options)
        half = q.dtype
        for name, x in (("k", k), ("v", v)):
            _check_tensor(name, x, half)
        if k.dtype == half and v.dtype == half and _native_half(mode, half, tensors, options):
            return entry(op, mode, kind, q, k, v, *tensors, **options)
        wide = [_widen(name, x, half) for name, x in zip(("beta",), tensors)]  # _delta's beta
        wide_options = {name: _widen(name, x, half) for name, x in options.items()}
        o, final = entry(op, mode, kind, q.float(), k.float(), v.float(), *wide, **wide_options)
        return o.to(half), final

    return run


def _check_dims(name, x, dims, shape):
    if x.dim() != dims:
        raise ValueError(f"{name}: expected {dims} dims {shape}, got {x.dim()} (shape {list(x.shape)})")


def _cu_seqlens(cu_seqlens):
    """cu_seqlens as a 1-d int64 numpy array of N + 1 ≥ 2 offsets, or None."""
    if cu_seqlens is None:
        return None
    dtype = None
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.device.type != "cpu":
            raise TypeError(f"cu_seqlens: expected a CPU tensor, got device {cu_seqlens.device}")
        dtype = cu_seqlens.dtype
        cu_seqlens = cu_seqlens.detach().float().numpy() if dtype == torch.bfloat16 else cu_seqlens.detach().numpy()
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1:
        raise ValueError(f"cu_seqlens: expected 1 dim [N + 1], got {cu.ndim}")
    if cu.size < 2:  # [] or [0]: no sequence at all, which is neither an unpacked batch nor a packed one
        raise ValueError(f"cu_seqlens: expected N + 1 ≥ 2 offsets (0, then the end of each of the N packed "
                         f"sequences), got {cu.size}; give cu_seqlens=None for an unpacked batch")
    if cu.dtype.kind not in "iu":
        raise TypeError(f"cu_seqlens: expected integers, got {dtype if dtype is not None else cu.dtype}")
    return cu.astype(np.int64)


def _extents(q, v):
    """(B, T, H, K) of q, refusing no heads or an empty key or value dimension by name (scale = K^-1/2 and
    the grouped value heads HV / H need them)."""
    B, T, H, K = q.shape
    for name, x, what, n in (("q", q, "the number of heads H", H), ("q", q, "the key dimension K", K),
                             ("v", v, "the number of heads", v.shape[2]),
                             ("v", v, "the value dimension V", v.shape[3])):
        if n == 0:
            raise ValueError(f"{name}: {what} is 0 (shape {list(x.shape)}); expected at least 1")
    return B, T, H, K


def _value_heads(q, k, v):
    """HV, v's number of heads: k has q's H heads and HV is a multiple of H (grouped value attention,
    value head j reading q/k head j // (HV / H)), or k and v have HV heads of which q's are a multiple
    (query groups, which linattn._query_groups has checked), or the call is refused naming the argument."""
    H, HV = q.shape[2], v.shape[2]
    if k.shape[2] == HV and HV > 0 and H % HV == 0:
        return HV
    if k.shape[2] != H:
        raise ValueError(f"k: expected q's {H} heads, got {k.shape[2]} (shape {list(k.shape)}); or a divisor of "
                         "them equal to v's heads (query heads grouped over key/value heads)")
    if HV % H != 0:
        raise ValueError(f"v: expected a multiple of q's {H} heads (grouped value attention), got {HV} "
                         f"(shape {list(v.shape)})")
    return HV


def _scale(scale, K):
    """scale as a float: K^-1/2 when None."""
    if scale is None:
        return K ** -0.5
    try:
        return float(scale)
    except (TypeError, ValueError) as e:
        raise type(e)(f"scale: expected a number (or None for K^-1/2), got {scale!r}") from None


def _sequences_and_state(q, heads, V, initial_state, cu_seqlens, state_v_first):
    """(cu, initial_state): cu_seqlens checked, and the initial state (already [N, H, K, V]) checked against
    the N sequences and heads, named "initial_state" as the caller gave it, and converted to q's dtype."""
    cu = _cu_seqlens(cu_seqlens)
    B, K = q.shape[0], q.shape[3]
    if cu is not None:
        if B != 1:
            raise ValueError(f"The batch size is expected to be 1 rather than {B} when using `cu_seqlens`. "
                             "Please flatten variable-length inputs before processing.")
        if initial_state is not None and initial_state.shape[0] != len(cu) - 1:
            raise ValueError("The number of initial states is expected to be equal to the number of input "
                             f"sequences, i.e., {len(cu) - 1} rather than {initial_state.shape[0]}.")
    if initial_state is None:
        return cu, None
    _check_tensor("initial_state", initial_state)
    N = B if cu is None else len(cu) - 1
    if tuple(initial_state.shape) != (N, heads, K, V):
        layout, want, got = "[N, H, K, V]", [N, heads, K, V], list(initial_state.shape)
        if state_v_first:
            layout, want, got = "[N, H, V, K]", [N, heads, V, K], got[:-2] + got[:-3:-1]
        raise ValueError(f"initial_state: expected shape {layout} = {want}, got {got}")
    # flash-linear-attention keeps float32 states (linattn's half operators too); .to is a call even where the
    # dtype is already the one wanted
    dtype = _fla_ops.state_dtype(q)
    return cu, initial_state if initial_state.dtype == dtype else initial_state.to(dtype)


def _cu_tensor(cu):
    """cu_seqlens for the operators: an int64 tensor, or None."""
    return None if cu is None else torch.from_numpy(cu)


def _segments(B, T, cu):
    """(batch row, begin, end) of each sequence, in state order."""
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    return [(0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]


def _reverse_index(T, cu):
    """The permutation of the time axis that reverses each sequence (its own inverse)."""
    if cu is None:
        return torch.arange(T - 1, -1, -1)
    parts = [torch.arange(int(cu[i + 1]) - 1, int(cu[i]) - 1, -1) for i in range(len(cu) - 1)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def _normalize(o, q, k, scale, z_init, B, T, cu):
    """chunk_linear_attn's normalize=True, in torch ops (autograd covers it): o_t / (scale·q_t·z_t + 1e-10)
    with z_t = z_init + Σ_{s ≤ t} k_s within each sequence; value heads HV = G·H share their q/k head's
    denominator. Returns (o, z_state [N, 1, H, K])."""
    if cu is None:
        k_cum = k.cumsum(1)
        if z_init is not None:
            k_cum = k_cum + z_init
        z_state = k_cum[:, -1:]
    else:
        parts, ends = [], []
        for n, (_, begin, end) in enumerate(_segments(B, T, cu)):
            part = k[:, begin:end].cumsum(1)
            z0 = z_init[n:n + 1] if z_init is not None else None
            if z0 is not None:
                part = part + z0
            parts.append(part)
            # An empty sequence ends where it began: z_init, or zero.
            ends.append(part[:, -1:] if end > begin else (z0 if z0 is not None else k.new_zeros(1, 1, *k.shape[2:])))
        k_cum = torch.cat(parts, 1)
        z_state = torch.cat(ends, 0)
    denom = (q * scale * k_cum).sum(-1, keepdim=True) + _NORMALIZE_EPS  # [B, T, H, 1]
    return (o.unflatten(2, (q.shape[2], -1)) / denom.unsqueeze(3)).flatten(2, 3), z_state


@_half_through_float32
@functools.partial(_by_query_groups, native=lambda args, options: not options.get("normalize"))
def _decayed(op, mode, decay, q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
             output_final_state=False, reverse=False, cu_seqlens=None, chunk_size=None, normalize=False,
             state_v_first=False):
    """The one entry point of the decayed functions: checks, then the recurrence, in the layout of fla.ops
    (states [N, HV, K, V], or [N, HV, V, K] with state_v_first). With v's heads HV a multiple of q's H
    (grouped value attention), value head j reads query and key head j // (HV / H), and g, g_gamma and the
    states have HV heads; q and k go to the operators as they are (no copy), and the backward returns dq,
    dk of H heads, summed over each group."""
    initial_state = _k_first(initial_state, state_v_first)
    _check_tensor("q", q)
    for name, x in (("k", k), ("v", v), ("g", g)):
        if x is not None:
            _check_tensor(name, x, q.dtype)
    _check_dims("q", q, 4, "[B, T, H, K]")
    _check_dims("k", k, 4, "[B, T, H, K]")
    _check_dims("v", v, 4, "[B, T, HV, V]")
    B, T, H, K = _extents(q, v)
    HV = _value_heads(q, k, v)
    if decay == "simple_gla" and g is not None:
        _check_dims("g", g, 3, "[B, T, HV] (one log decay per head and token)")
        if g.shape != (B, T, HV):
            raise ValueError(f"g: expected shape [B, T, HV] = {[B, T, HV]} (one log decay per head and token), "
                             f"got {list(g.shape)}")
    if decay == "gla":
        if g is None:
            raise ValueError(f"g: {op} needs the log decay g [B, T, HV, K]")
        if g.shape != (B, T, HV, K):
            raise ValueError(f"g: expected q's shape with v's heads, [B, T, HV, K] = {[B, T, HV, K]}, got "
                             f"{list(g.shape)}")
    z_init = None
    if normalize and isinstance(initial_state, tuple):
        initial_state, z_init = initial_state
    cu, initial_state = _sequences_and_state(q, HV, v.shape[3], initial_state, cu_seqlens, state_v_first)
    if z_init is not None:
        _check_tensor("initial_state[1] (z)", z_init)
        z_init = z_init.to(q.dtype)
    scale = _scale(scale, K)
    if chunk_size is None:
        chunk_size = 64

    fp64 = q.dtype == torch.float64
    gamma = None
    if g_gamma is not None:
        if not isinstance(g_gamma, torch.Tensor):
            g_gamma = torch.as_tensor(g_gamma)
        if g_gamma.device.type != "cpu":
            raise TypeError(f"g_gamma: expected a CPU tensor, got device {g_gamma.device}")
        gamma = g_gamma.detach()  # a fixed decay: no gradient, as in flash-linear-attention
        if gamma.shape != (HV,):
            raise ValueError(f"g_gamma: expected shape [HV] = [{HV}] (one decay per value head), got "
                             f"{list(gamma.shape)}")
        if g is not None or fp64:
            # Folded into a per-token g: with g both decays apply; in fp64 this keeps it out of float32.
            per_token = gamma.to(q.dtype).view(1, 1, HV).expand(B, T, HV)
            g, gamma, decay = (per_token if g is None else g + per_token), None, "simple_gla"
        else:
            decay = "lightning"
            gamma = gamma.to(torch.float32).contiguous()

    q_raw = q
    perm = _reverse_index(T, cu) if reverse else None
    if perm is not None:
        q_raw, k, v = q.index_select(1, perm), k.index_select(1, perm), v.index_select(1, perm)
        g = None if g is None else g.index_select(1, perm)
    if fp64:
        # The oracle takes scale as a float; applied to q here it stays in fp64 (o is linear in q).
        q_in, op_scale = q_raw * scale, 1.0
    else:
        q_in, op_scale = q_raw, scale
    want_state = bool(output_final_state)
    o, final = _fla_ops.decayed_forward(q_in, k, v, g, initial_state, gamma, _cu_tensor(cu), decay,
                                        mode == "recurrent", float(op_scale), int(chunk_size), want_state)
    final = final if want_state else None
    if normalize:
        o, z_state = _normalize(o, q_raw, k, scale, z_init, B, T, cu)
        final = (final, z_state) if want_state else None
    if perm is not None:
        o = o.index_select(1, perm)
    return o, _k_first(final, state_v_first)


def _no_head_first(kwargs):
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")


def _chunk_size(kwargs):
    chunk_size = kwargs.pop("chunk_size", None)
    if chunk_size is not None and (chunk_size < 1 or chunk_size != 2 ** (int(chunk_size).bit_length() - 1)):
        raise ValueError(f"`chunk_size` must be a power of 2, got {chunk_size}.")
    return chunk_size


def _state_v_first(state_v_first, kwargs):
    """state_v_first, or fused_recurrent_*'s deprecated name for it, transpose_state_layout."""
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
        warnings.warn("`transpose_state_layout` is deprecated and renamed to `state_v_first`.", DeprecationWarning,
                      stacklevel=3)
        state_v_first = kwargs.pop("transpose_state_layout")
    return bool(state_v_first)


def _k_first(state, state_v_first):
    """A state given as [N, H, V, K] (state_v_first=True) seen as [N, H, K, V], and back: the transpose
    is its own inverse."""
    return state.transpose(-1, -2).contiguous() if state_v_first and state is not None else state


def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                      cu_seqlens=None):
    """S_t = S_{t−1} + k_t v_tᵀ, o_t = scale·S_tᵀ q_t; normalize divides o_t by scale·q_t·z_t + 1e-10,
    z_t the running sum of the keys. With normalize, initial_state may be a tuple (S [N, H, K, V],
    z [N, 1, H, K]), and final_state is such a tuple."""
    return _decayed("chunk_linear_attn", "chunk", "linear", q, k, v, scale=scale, initial_state=initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens, normalize=normalize)


def chunk_retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None, **kwargs):
    """RetNet's retention: S_t = γ_h S_{t−1} + k_t v_tᵀ with γ_h = 1 − 2^(−5−h) for head h."""
    _no_head_first(kwargs)
    chunk_size = _chunk_size(kwargs)
    return _decayed("chunk_retention", "chunk", "retention", q, k, v, scale=scale, initial_state=initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens, chunk_size=chunk_size)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                     state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """S_t = exp(g_t) S_{t−1} + k_t v_tᵀ, g [B, T, HV] a log decay per head and token, or g_gamma [HV] a
    constant one per head (lightning attention); neither: no decay. cu_seqlens_cpu is accepted and
    unused (cu_seqlens is on the CPU already)."""
    _no_head_first(kwargs)
    chunk_size = _chunk_size(kwargs)
    state_v_first = _state_v_first(state_v_first, {})
    decay = "linear" if g is None else "simple_gla"
    return _decayed("chunk_simple_gla", "chunk", decay, q, k, v, g=g, g_gamma=g_gamma, scale=scale,
                    initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                    chunk_size=chunk_size, state_v_first=state_v_first)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
              cu_seqlens=None, cu_seqlens_cpu=None):
    """GLA: S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ, g [B, T, HV, K] a log decay per key dimension."""
    state_v_first = _state_v_first(state_v_first, {})
    return _decayed("chunk_gla", "chunk", "gla", q, k, v, g=g, scale=scale, initial_state=initial_state,
                    output_final_state=output_final_state, cu_seqlens=cu_seqlens, state_v_first=state_v_first)


def fused_recurrent_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, reverse=False,
                                normalize=False, cu_seqlens=None):
    """chunk_linear_attn token by token (normalize defaults to False here, as in flash-linear-attention)."""
    return _decayed("fused_recurrent_linear_attn", "recurrent", "linear", q, k, v, scale=scale,
                    initial_state=initial_state, output_final_state=output_final_state, reverse=reverse,
                    cu_seqlens=cu_seqlens, normalize=normalize)


def fused_recurrent_retention(q, k, v, scale=None, initial_state=None, output_final_state=False, reverse=False,
                              state_v_first=False, cu_seqlens=None, **kwargs):
    """chunk_retention token by token."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    return _decayed("fused_recurrent_retention", "recurrent", "retention", q, k, v, scale=scale,
                    initial_state=initial_state, output_final_state=output_final_state, reverse=reverse,
                    cu_seqlens=cu_seqlens, state_v_first=state_v_first)


def fused_recurrent_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                               output_final_state=False, reverse=False, state_v_first=False, cu_seqlens=None,
                               **kwargs):
    """chunk_simple_gla token by token."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    decay = "linear" if g is None else "simple_gla"
    return _decayed("fused_recurrent_simple_gla", "recurrent", decay, q, k, v, g=g, g_gamma=g_gamma, scale=scale,
                    initial_state=initial_state, output_final_state=output_final_state, reverse=reverse,
                    cu_seqlens=cu_seqlens, state_v_first=state_v_first)


def fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None, output_final_state=False,
                        reverse=False, state_v_first=False, cu_seqlens=None, **kwargs):
    """chunk_gla token by token; gk [B, T, HV, K] (None: no decay). gv, a decay per value dimension, is
    not supported."""
    if gv is not None:
        raise NotImplementedError("gv: a log decay per value dimension is not supported by linattn (give gk only)")
    state_v_first = _state_v_first(state_v_first, kwargs)
    decay = "linear" if gk is None else "gla"
    return _decayed("fused_recurrent_gla", "recurrent", decay, q, k, v, g=gk, scale=scale,
                    initial_state=initial_state, output_final_state=output_final_state, reverse=reverse,
                    cu_seqlens=cu_seqlens, state_v_first=state_v_first)


# flash-linear-attention's other forms of the same recurrences: its fused chunked kernels (one pass over
# the chunks) compute what its chunked ones compute, and so does linattn's chunked engine; the parallel
# forms compute the outputs of a whole sequence without a state (and, if asked, the attention scores);
# lightning attention is simple GLA with a constant decay per head set by the layer's depth.


def fused_chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                            cu_seqlens=None):
    """chunk_linear_attn (flash-linear-attention's fused chunked kernel of the same recurrence)."""
    return chunk_linear_attn(q, k, v, scale, initial_state, output_final_state, normalize, cu_seqlens)


def fused_chunk_retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                          **kwargs):
    """chunk_retention (flash-linear-attention's fused chunked kernel of the same recurrence)."""
    _no_head_first(kwargs)
    return chunk_retention(q, k, v, scale, initial_state, output_final_state, cu_seqlens)


def fused_chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None):
    """chunk_simple_gla (flash-linear-attention's fused chunked kernel of the same recurrence)."""
    return chunk_simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens)


def fused_chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None, **kwargs):
    """chunk_gla. flash-linear-attention deprecated its fused chunked GLA kernel (the function now raises
    and points to chunk_gla) while its GLA layer still calls it in mode "fused_chunk"; here it computes
    what it always computed, chunk_gla's recurrence, so that mode runs."""
    _no_head_first(kwargs)
    return chunk_gla(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens)


def _attention_scores(q, k, g, scale, heads):
    """The parallel forms' scores [B, HV, T, T] in q's dtype: scale·q_i·k_j·exp(Σ_{j<s≤i} g_s) for j ≤ i,
    zero above the diagonal (one sequence per batch row); g [B, T, HV] log decays, or None. HV = heads, a
    multiple of q's H: value head j scores with q/k head j // (HV / H) (the call with q and k repeated); or,
    with q's heads R times k's (query groups), HV = q's heads, query head i scoring with key head i // R and
    its decays."""
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, T, H = q.shape[:3]
    R = H // k.shape[2]  # query heads per key head (query groups), 1 otherwise
    scores = torch.einsum("bihrk,bjhk->bhrij", q.to(wide).unflatten(2, (H // R, R)), k.to(wide)) * scale
    scores = scores.reshape(B, H, T, T)
    if heads != H:  # each q/k head's products computed once, shared by its group's value heads
        scores = scores.unsqueeze(2).expand(B, H, heads // H, T, T).reshape(B, heads, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if g is not None:
        G = g.to(wide).cumsum(1).transpose(1, 2)  # [B, HV, T]
        # Above the diagonal the exponent would grow with the distance: masked before exp, not after.
        decay = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()
        if R > 1:  # a key/value head's decays, shared by its query heads
            decay = decay.unsqueeze(2).expand(B, H // R, R, T, T).reshape(B, H, T, T)
        scores = scores * decay
    return scores.masked_fill(~causal, 0).to(q.dtype)


def _parallel(op, q, k, v, g, scale, output_attentions, cu_seqlens, forward):
    """(o, scores or None): o from forward(), which also checks the arguments (grouped value heads
    included); the scores have v's heads. g: the log decays [B, T, HV], None, or a function making them
    (called after forward's checks, so that it may read the shapes)."""
    if output_attentions and cu_seqlens is not None:
        raise ValueError(f"output_attentions: {op} returns the attention scores only without cu_seqlens (one "
                         "sequence per batch row), as flash-linear-attention does")
    o, _ = forward()
    if not output_attentions:
        return o, None
    return o, _attention_scores(q, k, g() if callable(g) else g, _scale(scale, q.shape[-1]),
                                max(q.shape[2], v.shape[2]))


def parallel_simple_gla(q, k, v, g=None, scale=None, output_attentions=False, cu_seqlens=None, cu_seqlens_cpu=None,
                        **kwargs):
    """chunk_simple_gla's outputs without states, and with output_attentions the scores [B, HV, T, T]
    scale·q_i·k_j·exp(g_{j+1} + … + g_i) for j ≤ i (zero above the diagonal). q, k [B, T, H, K], v
    [B, T, HV, V] and g [B, T, HV] with HV a multiple of H (grouped value heads, as chunk_simple_gla).
    Returns (o, scores or None)."""
    _no_head_first(kwargs)
    return _parallel("parallel_simple_gla", q, k, v, g, scale, output_attentions, cu_seqlens,
                     lambda: chunk_simple_gla(q, k, v, g=g, scale=scale, cu_seqlens=cu_seqlens))


def _retention_log_decays(B, T, HV):
    """log γ_h = log(1 − 2^(−5−h)) of RetNet's value heads, [B, T, HV] (float64, rounded to q's dtype by the
    user)."""
    heads = torch.arange(HV, dtype=torch.float64)
    return torch.log1p(-torch.exp2(-5.0 - heads)).view(1, 1, -1).expand(B, T, -1)


def parallel_retention(q, k, v, scale=None, output_attentions=False, cu_seqlens=None, **kwargs):
    """chunk_retention's outputs without states, and with output_attentions the scores [B, HV, T, T]
    scale·q_i·k_j·γ_h^(i−j) for j ≤ i, γ_h that of value head h (grouped value heads: v's HV a multiple of
    q's H, as chunk_retention). Returns (o, scores or None)."""
    _no_head_first(kwargs)

    def decays():  # made after the forward's checks, which the shapes read here need
        return _retention_log_decays(q.shape[0], q.shape[1], v.shape[2])

    return _parallel("parallel_retention", q, k, v, decays, scale, output_attentions, cu_seqlens,
                     lambda: chunk_retention(q, k, v, scale=scale, cu_seqlens=cu_seqlens))


def _lightning_decays(q, v, layer_idx, num_layers):
    """Lightning attention's constant log decay per value head, flash-linear-attention's rule:
    −8/HV · (1 − layer_idx / num_layers) · h for head h (float32 [HV]); with grouped value heads, what
    the call with q and k repeated to HV heads has."""
    _check_tensor("q", q)
    _check_tensor("v", v)
    _check_dims("q", q, 4, "[B, T, H, K]")
    _check_dims("v", v, 4, "[B, T, HV, V]")
    for name, x in (("layer_idx", layer_idx), ("num_layers", num_layers)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{name}: expected an integer, got {x!r}")
    if num_layers < 1:
        raise ValueError(f"num_layers: expected at least 1 (the model's number of layers), got {num_layers}")
    _extents(q, v)  # no heads refused by name
    HV = v.shape[2]
    return -(8 / HV * (1 - layer_idx / num_layers)) * torch.arange(HV, dtype=torch.float32)


def chunk_lightning_attn(q, k, v, layer_idx, num_layers, scale=None, initial_state=None, output_final_state=False,
                         cu_seqlens=None, **kwargs):
    """Lightning attention: chunk_simple_gla with g_gamma the constant decays of layer layer_idx of num_layers."""
    _no_head_first(kwargs)
    return chunk_simple_gla(q, k, v, g_gamma=_lightning_decays(q, v, layer_idx, num_layers), scale=scale,
                            initial_state=initial_state, output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                            chunk_size=_chunk_size(kwargs))


def fused_recurrent_lightning_attn(q, k, v, layer_idx, num_layers, scale=None, initial_state=None,
                                   output_final_state=False, reverse=False, cu_seqlens=None, **kwargs):
    """chunk_lightning_attn token by token; reverse=True scans each sequence backwards."""
    _no_head_first(kwargs)
    return fused_recurrent_simple_gla(q, k, v, g_gamma=_lightning_decays(q, v, layer_idx, num_layers), scale=scale,
                                      initial_state=initial_state, output_final_state=output_final_state,
                                      reverse=reverse, cu_seqlens=cu_seqlens)


# ----------------------------------------------------------------------------------------------
# The delta rule: P_t = D_t S_{t−1}, S_t = P_t + β_t k_t (v_t − P_tᵀ k_t)ᵀ, o_t = scale · S_tᵀ q_t, with
# D_t = I (delta_rule), exp(g_t) I (gated_delta_rule) or diag(exp g_t) (kda).


# The delta rule's chunked backward does not take query groups: a call that records a graph runs R passes, a
# forward alone runs them natively.
@_half_through_float32
@functools.partial(_by_query_groups,
                   native=lambda args, options: not _fla_ops.records_graph((*args[3:], *options.values())))
def _delta(op, mode, gate, q, k, v, beta, g=None, scale=None, initial_state=None, output_final_state=False,
           use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=None, use_beta_sigmoid_in_kernel=False,
           allow_neg_eigval=False, state_v_first=False):
    """The one entry point of the delta-rule functions: checks, then the recurrence. gate: "delta_rule"
    (g None), "gated_delta_rule" (g [B, T, HV]) or "kda" (g [B, T, HV, K]). With v's heads HV a
    multiple of q's H (grouped value attention), value head i reads query and key head i // (HV / H)."""
    initial_state = _k_first(initial_state, state_v_first)
    _check_tensor("q", q)
    for name, x in (("k", k), ("v", v), ("beta", beta), ("g", g)):
        if x is not None:
            _check_tensor(name, x, q.dtype)
    _check_dims("q", q, 4, "[B, T, H, K]")
    _check_dims("k", k, 4, "[B, T, H, K]")
    _check_dims("v", v, 4, "[B, T, HV, V]")
    B, T, H, K = _extents(q, v)
    HV = _value_heads(q, k, v)
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    if beta is None:
        beta = q.new_ones(B, T, HV)  # flash-linear-attention's default: a full correction per token
    if beta.dim() == 4 and beta.shape[-1] == v.shape[-1] and beta.shape[-1] != 1:
        raise NotImplementedError("beta: a beta per value dimension [B, T, HV, V] is not supported by linattn "
                                  "(give one per head and token, [B, T, HV])")
    if beta.shape != (B, T, HV):
        raise ValueError(f"beta: expected shape [B, T, HV] = {[B, T, HV]}, got {list(beta.shape)}")
    if gate == "gated_delta_rule":
        if g is None:
            raise ValueError(f"g: {op} needs the log decay g [B, T, HV]")
        if g.shape != (B, T, HV):
            raise ValueError(f"g: expected shape [B, T, HV] = {[B, T, HV]} (one log decay per head and token), "
                             f"got {list(g.shape)}")
    elif gate == "kda":
        if g is None:
            raise ValueError(f"g: {op} needs the log decay g [B, T, HV, K]")
        if g.shape != (B, T, HV, K):
            raise ValueError(f"g: expected shape [B, T, HV, K] = {[B, T, HV, K]}, got {list(g.shape)}")
    cu, initial_state = _sequences_and_state(q, HV, v.shape[3], initial_state, cu_seqlens, state_v_first)
    scale = _scale(scale, K)
    if use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    # Grouped value heads (HV > H) go to the operators as they are: no copy of q and k, and the backward
    # returns dq, dk of H heads, summed over each group.
    fp64 = q.dtype == torch.float64
    # The oracle takes scale as a float; applied to o here it stays in fp64 (o is linear in scale, also
    # after the l2norm of q).
    o, final = _fla_ops.delta_forward(q, k, v, beta, g, initial_state, _cu_tensor(cu), gate, mode == "recurrent",
                                      1.0 if fp64 else scale, bool(use_qk_l2norm_in_kernel), int(chunk_size or 64),
                                      bool(output_final_state))
    if fp64:
        o = o * scale
    return o, (_k_first(final, state_v_first) if output_final_state else None)


def _delta_chunk_size(kwargs, allowed):
    chunk_size = kwargs.pop("chunk_size", 64)
    if chunk_size not in allowed:
        names = ", ".join(str(c) for c in allowed[:-1]) + f" or {allowed[-1]}"
        raise ValueError(f"`chunk_size` must be {names}, got {chunk_size}.")
    return chunk_size


def _gate_in_kernel(op, g, use_gate_in_kernel=False, A_log=None, dt_bias=None, lower_bound=None,
                    safe_gate=False, per_key=False):
    """The log decay g, computed from its raw input as flash-linear-attention's kernels do when
    use_gate_in_kernel=True (in torch, so autograd reaches g, A_log and dt_bias):
    g ← −exp(A_log)·softplus(g + dt_bias), A_log one per head ([HV]); dt_bias [HV], or [HV·K] when g
    has a key dimension (KDA). With lower_bound (KDA): g ← lower_bound·sigmoid(exp(A_log)·(g + dt_bias)),
    in [lower_bound, 0); A_log None there means exp(A_log) = 1. safe_gate needs lower_bound and changes
    nothing else on the CPU (on GPUs it selects a faster kernel for the clamped range)."""
    if safe_gate and lower_bound is None:
        raise ValueError(f"{op}: safe_gate=True requires lower_bound to be set (e.g. lower_bound=-5.0)")
    if not use_gate_in_kernel:
        return g
    if g is None:
        raise ValueError(f"{op}: use_gate_in_kernel=True needs g, the gate's raw input")
    H = g.shape[2]
    if A_log is None and lower_bound is None:
        raise ValueError(f"{op}: use_gate_in_kernel=True needs A_log [{H}] (one per head), got None")
    if A_log is not None and A_log.numel() != H:
        raise ValueError(f"A_log: expected {H} elements (one per head of g), got shape {list(A_log.shape)}")
    shape = (H, g.shape[3]) if per_key else (H,)
    x = g.to(torch.float32) if g.dtype != torch.float64 else g
    if dt_bias is not None:
        if dt_bias.numel() != x[0, 0].numel():
            raise ValueError(f"dt_bias: expected {x[0, 0].numel()} elements (the gate's {list(shape)}), got shape "
                             f"{list(dt_bias.shape)}")
        x = x + dt_bias.to(x.dtype).view(shape)
    rate = None if A_log is None else A_log.to(x.dtype).exp().view((H, 1) if per_key else (H,))
    if lower_bound is not None:
        return float(lower_bound) * torch.sigmoid(x if rate is None else rate * x)
    return -rate * torch.nn.functional.softplus(x)


def _no_context_parallel(cp_context):
    if cp_context is not None:
        raise NotImplementedError("cp_context: context parallelism is not supported by linattn (one process, CPU)")


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """DeltaNet: S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ, o_t = scale·S_tᵀ q_t; beta [B, T, H]. With
    use_qk_l2norm_in_kernel q and k are divided by sqrt(Σx² + 1e-6) per token and head first."""
    _no_head_first(kwargs)
    chunk_size = _delta_chunk_size(kwargs, (16, 32, 64))
    return _delta("chunk_delta_rule", "chunk", "delta_rule", q, k, v, beta, scale=scale, initial_state=initial_state,
                  output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                  cu_seqlens=cu_seqlens, chunk_size=chunk_size)


def fused_chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                           **kwargs):
    """chunk_delta_rule. flash-linear-attention deprecated its fused chunked DeltaNet kernel (the function
    now raises and points to chunk_delta_rule); here it computes what it always computed."""
    _no_head_first(kwargs)
    return chunk_delta_rule(q, k, v, beta, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, **kwargs):
    """Gated DeltaNet: S_t = exp(g_t) S_{t−1}, then the delta update; g [B, T, HV] log decays. v may have
    HV = G·H heads (grouped value attention). use_beta_sigmoid_in_kernel: beta is a logit,
    sigmoid(beta) (2·sigmoid(beta) with allow_neg_eigval) is used. chunk_indices and cu_seqlens_cpu are
    accepted and unused (derived from cu_seqlens)."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    _no_head_first(kwargs)
    chunk_size = _delta_chunk_size(kwargs, (16, 32, 64))
    g = _gate_in_kernel("chunk_gated_delta_rule", g, kwargs.pop("use_gate_in_kernel", False), kwargs.pop("A_log", None),
                        kwargs.pop("dt_bias", None))
    _no_context_parallel(cp_context)
    return _delta("chunk_gated_delta_rule", "chunk", "gated_delta_rule", q, k, v, beta, g=g, scale=scale,
                  initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  state_v_first=state_v_first)


chunk_gdn = chunk_gated_delta_rule


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False,
              return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, use_graph=False, max_num_seqs=None, **kwargs):
    """Kimi Delta Attention: S_t = diag(exp g_t) S_{t−1}, then the delta update; g [B, T, HV, K] log
    decays. disable_recompute (a memory/speed trade on GPUs) and use_graph / max_num_seqs (CUDA-graph
    capture of the GPU kernels, and the sequence count they are captured for) are accepted and change
    nothing here: there is no graph to capture on the CPU."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    chunk_size = _delta_chunk_size(kwargs, (32, 64))
    g = _gate_in_kernel("chunk_kda", g, use_gate_in_kernel, kwargs.pop("A_log", None), kwargs.pop("dt_bias", None),
                        lower_bound, safe_gate, per_key=True)
    if return_intermediate_states:
        raise NotImplementedError("return_intermediate_states=True: the chunk states are not returned by linattn")
    _no_context_parallel(cp_context)
    return _delta("chunk_kda", "chunk", "kda", q, k, v, beta, g=g, scale=scale, initial_state=initial_state,
                  output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                  cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  state_v_first=state_v_first)


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """chunk_delta_rule token by token; beta None: ones."""
    return _delta("fused_recurrent_delta_rule", "recurrent", "delta_rule", q, k, v, beta, scale=scale,
                  initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False,
                                     cu_seqlens=None, **kwargs):
    """chunk_gated_delta_rule token by token: g [B, T, HV] a log decay per head, gk [B, T, HV, K] one per
    key dimension (both: exp(g_t)·diag(exp gk_t)), neither: DeltaNet. gv, a decay per value
    dimension, is not supported. beta None: ones."""
    if gv is not None:
        raise NotImplementedError("gv: a log decay per value dimension is not supported by linattn (give g or gk)")
    state_v_first = _state_v_first(state_v_first, kwargs)
    if use_gate_in_kernel and gk is not None:
        raise NotImplementedError("use_gate_in_kernel with gk: the gate computed in the kernel is for g [B, T, HV]")
    g = _gate_in_kernel("fused_recurrent_gated_delta_rule", g, use_gate_in_kernel, A_log, dt_bias)
    if gk is not None:
        _check_tensor("q", q)
        _check_tensor("gk", gk, q.dtype)
        _check_dims("gk", gk, 4, "[B, T, HV, K]")
        if g is not None:
            _check_tensor("g", g, q.dtype)
            if g.dim() != 3:
                raise ValueError(f"g: expected 3 dims [B, T, HV], got {g.dim()} (shape {list(g.shape)})")
            gk = gk + g.unsqueeze(-1)  # exp(g)·diag(exp gk) = diag(exp(gk + g))
        gate, g = "kda", gk
    else:
        gate = "delta_rule" if g is None else "gated_delta_rule"
    return _delta("fused_recurrent_gated_delta_rule", "recurrent", gate, q, k, v, beta, g=g, scale=scale,
                  initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  state_v_first=state_v_first)


fused_recurrent_gdn = fused_recurrent_gated_delta_rule


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                        output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                        state_v_first=False, cu_seqlens=None, **kwargs):
    """chunk_kda token by token."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    g = _gate_in_kernel("fused_recurrent_kda", g, use_gate_in_kernel, A_log, dt_bias, lower_bound, per_key=True)
    return _delta("fused_recurrent_kda", "recurrent", "kda", q, k, v, beta, g=g, scale=scale,
                  initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  state_v_first=state_v_first)


# RWKV-7's generalized delta rule lives in its own module (it imports this one's helpers on first call).
from ._dplr import (chunk_dplr_delta_rule, chunk_rwkv7, fused_mul_recurrent_rwkv7,  # noqa: E402
                    fused_recurrent_dplr_delta_rule, fused_recurrent_rwkv7)
