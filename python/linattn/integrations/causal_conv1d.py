"""The short causal convolution of the linear-attention models, with the causal-conv1d package's two
functions and their semantics, on the CPU, keeping packed sequences apart.

- causal_conv1d_fn(x [B, D, T], weight [D, W], bias [D] or None, seq_idx [B, T] or None,
  initial_states [B, D, W − 1] or None, return_final_states=False, final_states_out=None,
  activation=None | "silu" | "swish" | a function, cu_seqlens=None): y_t = act(bias + Σ_j weight[:, j]·x_{t−W+1+j}),
  the taps before a sequence's first token reading zeros (or initial_states). A token whose seq_idx
  differs from the tap's, or (cu_seqlens, B = 1) a tap before its sequence's start, reads zero: packed
  sequences never mix. Returns y, or (y, final_states [B, D, W − 1]) with return_final_states.
- causal_conv1d_update(x [B, D] or [B, D, T], conv_state [B, D, S], weight, bias, activation): decoding;
  each new token sees the last W − 1 columns of conv_state before it, and conv_state (S ≥ W − 1
  columns, the newest last) is shifted in place to hold the last S inputs.

This is torch arithmetic (a depthwise F.conv1d): the operation is tiny beside the attention, and the
point is its semantics (packing, the cache), which transformers' CPU fallback does not keep."""

import torch
import torch.nn.functional as F

__all__ = ["causal_conv1d_fn", "causal_conv1d_update"]


def _activate(y, activation):
    if activation is None:
        return y
    if activation in ("silu", "swish"):
        return F.silu(y)
    if callable(activation):  # another activation a model asks for (transformers' callers pass any of theirs)
        return activation(y)
    raise ValueError(f"activation: expected None, 'silu', 'swish' (what causal-conv1d computes) or a function, got "
                     f"{activation!r}")


def _check_weight(x, weight, name="x"):
    if weight.dim() != 2 or weight.shape[0] != x.shape[1]:
        raise ValueError(f"weight: expected [D, W] with D = {name}'s {x.shape[1]} channels, got {list(weight.shape)}")


def _segment_ids(x, seq_idx, cu_seqlens):
    """One integer per (batch row, token) naming its sequence, or None when the rows are single sequences."""
    if seq_idx is not None and cu_seqlens is not None:
        raise ValueError("seq_idx and cu_seqlens: give one of them, not both")
    B, _, T = x.shape
    if seq_idx is not None:
        if tuple(seq_idx.shape) != (B, T):
            raise ValueError(f"seq_idx: expected [B, T] = {[B, T]}, got {list(seq_idx.shape)}")
        return seq_idx.to(device=x.device, dtype=torch.long)
    if cu_seqlens is None:
        return None
    cu = torch.as_tensor(cu_seqlens, device=x.device).to(torch.long)
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"cu_seqlens: expected [N + 1] offsets with N ≥ 1, got shape {list(cu.shape)}")
    if B != 1 or int(cu[0]) != 0 or int(cu[-1]) != T or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"cu_seqlens: expected non-decreasing offsets from 0 to T = {T} over one batch row, got "
                         f"{cu.tolist()} with batch {B}")
    ids = torch.bucketize(torch.arange(T, device=x.device), cu[1:], right=True)
    return ids.unsqueeze(0)


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None, cu_seqlens=None):
    if x.dim() != 3:
        raise ValueError(f"x: expected [B, D, T], got shape {list(x.shape)}")
    _check_weight(x, weight)
    B, D, T = x.shape
    W = weight.shape[1]
    ids = _segment_ids(x, seq_idx, cu_seqlens)
    if initial_states is not None and ids is not None:
        raise ValueError("initial_states: not supported with packed sequences (seq_idx or cu_seqlens)")
    xw = x.to(weight.dtype)
    if initial_states is None:
        left = xw.new_zeros(B, D, W - 1)
    else:
        if tuple(initial_states.shape) != (B, D, W - 1):
            raise ValueError(f"initial_states: expected [B, D, W - 1] = {[B, D, W - 1]}, got "
                             f"{list(initial_states.shape)}")
        left = initial_states.to(xw.dtype)
    padded = torch.cat([left, xw], dim=-1)  # [B, D, W - 1 + T]
    if T == 0:  # no token (an empty packed sequence): conv1d would refuse an input shorter than its kernel
        y = padded[..., :0]
    elif ids is None:
        y = F.conv1d(padded, weight.unsqueeze(1), bias, groups=D)
    else:
        # Tap j of token t reads token t − (W − 1 − j); it counts only inside t's own sequence.
        y = 0 if bias is None else bias.to(xw.dtype).view(1, D, 1)
        for j in range(W):
            shift = W - 1 - j
            tap = padded[..., j:j + T]
            if shift:
                same = torch.zeros_like(ids, dtype=torch.bool)
                same[:, shift:] = ids[:, shift:] == ids[:, :-shift]
                tap = tap * same.unsqueeze(1).to(tap.dtype)
            y = y + weight[:, j].view(1, D, 1) * tap
    y = _activate(y, activation).to(x.dtype)
    if not return_final_states:
        return y
    final = padded[..., -(W - 1):] if W > 1 else padded[..., :0]
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return y, final.to(x.dtype)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    if cache_seqlens is not None or conv_state_indices is not None:
        raise NotImplementedError("cache_seqlens / conv_state_indices: the circular and indexed conv states are not "
                                  "supported by linattn (give conv_state [B, D, S] with the newest input last)")
    one_token = x.dim() == 2
    xs = x.unsqueeze(-1) if one_token else x
    if xs.dim() != 3:
        raise ValueError(f"x: expected [B, D] or [B, D, T], got shape {list(x.shape)}")
    _check_weight(xs, weight)
    B, D, T = xs.shape
    W = weight.shape[1]
    if conv_state.dim() != 3 or tuple(conv_state.shape[:2]) != (B, D) or conv_state.shape[2] < W - 1:
        raise ValueError(f"conv_state: expected [B, D, S] = [{B}, {D}, S ≥ {W - 1}], got {list(conv_state.shape)}")
    whole = torch.cat([conv_state.to(weight.dtype), xs.to(weight.dtype)], dim=-1)
    y = F.conv1d(whole[..., -(W - 1 + T):], weight.unsqueeze(1), bias, groups=D)
    conv_state.copy_(whole[..., -conv_state.shape[2]:])
    y = _activate(y, activation).to(x.dtype)
    return y.squeeze(-1) if one_token else y


# ------------------------------------------------------------------------------------------------
# flash-linear-attention's forms (fla.modules.causal_conv1d: what its ShortConvolution and layers call):
# x [B, T, D], weight [D, W], a cache of the last W inputs [N, D, W] (N sequences: B, or those of cu_seqlens).


def fla_causal_conv1d(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                      activation=None, backend="triton", cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                      cp_context=None, **kwargs):
    """fla's causal_conv1d: y = act(conv(x)) (+ residual) [B, T, D], each sequence (a batch row, or with
    cu_seqlens and B = 1 a packed one) continuing from its initial_state [N, D, W] (zeros when None), and
    (y, final_state [N, D, W] or None): the last W inputs of each sequence, its initial state before them."""
    if cp_context is not None:
        raise NotImplementedError("cp_context: fla's context parallelism is not supported by linattn")
    if x.dim() != 3 or weight is None:
        raise ValueError(f"x, weight: expected x [B, T, D] and weight [D, W], got {list(x.shape)} and "
                         f"{None if weight is None else list(weight.shape)}")
    W = weight.shape[1]
    if cu_seqlens is None:
        bounds, rows = [(0, x.shape[1])] * x.shape[0], range(x.shape[0])
    else:
        if x.shape[0] != 1:
            raise ValueError(f"x: the batch size must be 1 with cu_seqlens, got {x.shape[0]}")
        cu = torch.as_tensor(cu_seqlens).tolist()
        bounds, rows = list(zip(cu[:-1], cu[1:])), [0] * (len(cu) - 1)
    ys, finals = [], []
    for n, ((a, b), row) in enumerate(zip(bounds, rows)):
        part = x[row:row + 1, a:b].transpose(1, 2)  # [1, D, T_n]
        state = x.new_zeros(1, x.shape[2], W) if initial_state is None else initial_state[n:n + 1].to(x.dtype)
        y, _ = causal_conv1d_fn(part, weight, bias, initial_states=state[..., 1:], return_final_states=True,
                                activation=activation)
        ys.append(y.transpose(1, 2))
        finals.append(torch.cat([state, part], dim=-1)[..., -W:])
    y = torch.cat(ys, dim=1) if cu_seqlens is not None else torch.cat(ys, dim=0)
    if residual is not None:
        y = y + residual
    return y, (torch.cat(finals, dim=0) if output_final_state else None)


def fla_causal_conv1d_update(x, cache, residual=None, weight=None, bias=None, activation=None, **kwargs):
    """fla's causal_conv1d_update: one token per sequence, x [B, 1, D] (or [1, N, D] packed) against cache
    [N, D, W], shifted in place to end with the token; returns (y shaped like x, cache)."""
    y = causal_conv1d_update(x.reshape(cache.shape[0], cache.shape[1]), cache, weight, bias, activation)
    y = y.view(x.shape)
    return (y if residual is None else y + residual), cache
