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
    if ids is None:
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
