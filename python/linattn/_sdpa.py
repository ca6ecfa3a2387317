"""torch.nn.functional.scaled_dot_product_attention's drop-in, and its linear-attention counterpart.

Shapes are torch's: query [..., Hq, L, E], key [..., H, S, E], value [..., H, S, Ev] -> [..., Hq, L, Ev].
is_causal is torch's top-left alignment: query i sees keys j ≤ i, whatever L and S. linattn's
operators align causal masks bottom-right (j ≤ i + S − L), so a top-left causal call is cut into
pieces on which the two agree:
  L ≤ S: keys S ≥ L are seen by no query; the square L × L problem is causal either way.
  L > S: queries i < S form a causal square with all S keys; queries i ≥ S see every key (no mask).
The linattn kernel runs for float32/float64 4-d (or 3-d) inputs with no attn_mask and no dropout;
otherwise the softmax is computed by torch from the formula (the same arithmetic as torch's math
backend), with torch's autograd.
"""

import math

import torch

from . import torch as _lt


def _check(query, key, value, enable_gqa):
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name}: expected at least 2 dims [..., N, D], got shape {list(x.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"value: expected {key.shape[-2]} keys (key's size at dim -2), got shape {list(value.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"key: expected last dim {query.shape[-1]} (query's), got shape {list(key.shape)}")
    if query.dim() >= 3 and key.dim() >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq != hk and not (enable_gqa and hk > 0 and hq % hk == 0):
            want = f"a divisor of {hq} (enable_gqa=True)" if enable_gqa else f"{hq} (query's; enable_gqa=True for GQA)"
            raise ValueError(f"key: expected heads (dim -3) {want}, got shape {list(key.shape)}")


def _repeat_heads(query, key, value, enable_gqa):
    """GQA for the formula: each of the key/value heads serves query.shape[-3] / key.shape[-3] consecutive
    query heads. linattn's kernels take the grouped heads as they are (linattn._query_groups: no copy)."""
    if not enable_gqa or query.dim() < 3 or key.shape[-3] == query.shape[-3]:
        return key, value
    groups = query.shape[-3] // key.shape[-3]
    return key.repeat_interleave(groups, dim=-3), value.repeat_interleave(groups, dim=-3)


def _top_left_causal(run, query, key, value):
    """run(q, k, v, causal) on [B, N, H, D] tensors, bottom-right causal, made top-left causal."""
    L, S = query.shape[1], key.shape[1]
    if L <= S:
        return run(query, key[:, :L], value[:, :L], True)
    square = run(query[:, :S], key, value, True)
    rest = run(query[:, S:], key, value, False)
    return torch.cat((square, rest), dim=1)


def _kernel_ok(query, key, value, attn_mask=None, dropout_p=0.0):
    same = query.dtype == key.dtype == value.dtype and query.dtype in (torch.float32, torch.float64)
    cpu = query.device.type == key.device.type == value.device.type == "cpu"
    dims = query.dim() == key.dim() == value.dim() and query.dim() in (3, 4)
    sizes = min(query.shape[-2], key.shape[-2], query.shape[-1]) > 0
    return same and cpu and dims and sizes and attn_mask is None and dropout_p == 0.0


def _run_bhnd(run, query, key, value, is_causal):
    """run over torch's [B, H, N, D] (or [H, N, D]) tensors, through [B, N, H, D] views."""
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    out = _top_left_causal(run, q, k, v) if is_causal else run(q, k, v, False)
    out = out.transpose(1, 2)
    return out.squeeze(0) if squeeze else out


def _math(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """The formula, as torch's math backend computes it."""
    L, S = query.shape[-2], key.shape[-2]
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    # A row that sees no key has weights 0 (torch 2.5 and later), not NaN: its scores are set to 0 before
    # the softmax so that no NaN reaches the backward either.
    unseen = (scores == float("-inf")).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(unseen, 0.0), dim=-1).masked_fill(unseen, 0.0)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, True)
    return weights @ value


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention, on the CPU: query [..., Hq, L, E],
    key [..., H, S, E], value [..., H, S, Ev] -> [..., Hq, L, Ev].

    attn_mask: bool (True: the key takes part) or float (added to the scores), broadcast to
    [..., Hq, L, S]; is_causal: query i sees keys j ≤ i (top-left; not with attn_mask); scale:
    1/√E by default; dropout_p: dropout of the attention weights (always applied when > 0, as
    torch's); enable_gqa: Hq a multiple of H, each key/value head serving Hq/H consecutive query heads.
    linattn's kernel (with its C++ backward) runs when there is no mask and no dropout, on float32 or
    float64 tensors; other calls are computed from the formula by torch.
    """
    _check(query, key, value, enable_gqa)
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: attn_mask: expected None when is_causal=True, got a mask")
    if attn_mask is not None and attn_mask.dim() < 2:  # as torch: a mask has its [L, S] dims
        raise ValueError(f"attn_mask: expected at least 2 dims [..., L, S], got shape {list(attn_mask.shape)}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p: expected a probability in [0, 1], got {dropout_p}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if not _kernel_ok(query, key, value, attn_mask, dropout_p):
        key, value = _repeat_heads(query, key, value, enable_gqa)
        return _math(query, key, value, attn_mask, dropout_p, is_causal, scale)

    def run(q, k, v, causal):
        return _lt._softmax_bnhd(q, k, v, causal, None, scale)

    return _run_bhnd(run, query, key, value, is_causal)


def linear_dot_product_attention(query, key, value, is_causal=False, enable_gqa=False, *, feature_map="elu",
                                 eps=1e-6, n_features=None, seed=0):
    """Linear attention in scaled_dot_product_attention's layout and causal alignment:
    out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps), the sums over every key, or over
    j ≤ i when is_causal (top-left, as torch's is_causal). query [..., Hq, L, E], key [..., H, S, E],
    value [..., H, S, Ev] with 3 or 4 dims, float32 or float64; enable_gqa as in
    scaled_dot_product_attention. feature_map, eps, n_features, seed: as linattn.torch.linear_attention.
    """
    _check(query, key, value, enable_gqa)
    if not (query.dim() == key.dim() == value.dim() and query.dim() in (3, 4)):
        raise ValueError(f"query: expected 3 or 4 dims [B, H, N, D], got shape {list(query.shape)}")

    def run(q, k, v, causal):
        return _lt._linear_bnhd(q, k, v, causal, None, feature_map, eps, n_features, seed)

    return _run_bhnd(run, query, key, value, is_causal)
