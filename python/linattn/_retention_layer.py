"""fla.layers.MultiScaleRetention on the CPU (linattn.fla's retention underneath), with fla's rotary
position embedding of q and k."""

import torch
from torch import nn

from . import fla
from ._gla_layer import ProjectedGatedLayer
from ._layer_parts import heads, recurrence, update_layer_cache


class RotaryEmbedding(nn.Module):
    """fla.modules.RotaryEmbedding as MultiScaleRetention uses it (GPT-NeoX halves, no XPos scale):
    channel i < dim/2 of a head pairs with channel i + dim/2 and both turn by the angle
    position·base^(−2i/dim). The angles are computed in float32, rounded to x's dtype like fla's
    tables, and the turn is done in float32. inv_freq is not part of the state dict, as in fla."""

    def __init__(self, dim, base=10000.0):
        super().__init__()
        if dim % 2:
            raise ValueError(f"dim: the rotary dimension must be even, got {dim}")
        self.dim, self.base = dim, float(base)
        inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _turn(self, x, positions):
        """x [B, T, H, D], positions [B or 1, T] -> x turned; zeros at a negative position, as fla's kernel
        leaves them (a padding offset larger than the cache's count)."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq.to(torch.float32)
        cos, sin = (f(angles).to(x.dtype).to(torch.float32)[:, :, None] for f in (torch.cos, torch.sin))
        x0, x1 = x.to(torch.float32).chunk(2, dim=-1)
        turned = torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        return (turned * (positions >= 0)[:, :, None, None]).to(x.dtype)

    def forward(self, q, k, seqlen_offset=0, cu_seqlens=None, **kwargs):
        """q, k [B, T, H, D] turned by their positions: the index within each sequence (cu_seqlens packs
        them in B = 1) plus seqlen_offset, an int or one per sequence [N]."""
        return self._turn(q, positions(q, seqlen_offset, cu_seqlens)), self._turn(k, positions(k, seqlen_offset,
                                                                                             cu_seqlens))


def positions(x, seqlen_offset, cu_seqlens):
    """The position of each token of x [B, T, ...]: [B, T], or [1, T] when packed (cu_seqlens)."""
    T = x.shape[1]
    index = torch.arange(T)
    if cu_seqlens is None:
        offset = torch.as_tensor(seqlen_offset).reshape(-1, 1)  # [1, 1] or [B, 1]
        return index[None] + offset
    cu = torch.as_tensor(cu_seqlens, dtype=torch.long)
    lengths = cu[1:] - cu[:-1]
    sequence = torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # each token's sequence
    offset = torch.as_tensor(seqlen_offset).reshape(-1).expand(len(lengths))
    return (index - cu[:-1][sequence] + offset[sequence])[None]


class MultiScaleRetention(ProjectedGatedLayer):
    """fla.layers.MultiScaleRetention (RetNet, Sun et al. 2023): q, k, v projections (optionally through
    short convolutions and a feature map), q and k turned by the rotary embedding at their positions
    (continuing from the cache's), retention S_t = γ_h S_{t−1} + k_t v_tᵀ with γ_h = 1 − 2^(−5−h) per
    head, o_t = K^−1/2 S_tᵀ q_t, an RMS norm per head with the output gate, the output projection.
    T ≤ 64, or mode="fused_recurrent", runs token by token; "chunk", "fused_chunk" and "parallel" run
    the chunked form (the same outputs; unlike fla's "parallel", it also returns the state the cache
    needs). The cache's recurrent state is [B, H, K, V]."""

    def __init__(self, mode="chunk", hidden_size=1024, expand_k=1.0, expand_v=2.0, num_heads=8, num_kv_heads=None,
                 feature_map=None, use_short_conv=False, conv_size=4, conv_bias=False, use_output_gate=True,
                 gate_fn="swish", elementwise_affine=True, norm_eps=1e-5, fuse_norm=True, layer_idx=None, **kwargs):
        super().__init__()
        self._build(("chunk", "fused_chunk", "parallel", "fused_recurrent"), mode, hidden_size, expand_k, expand_v,
                    num_heads, num_kv_heads, feature_map, use_short_conv, conv_size, conv_bias, use_output_gate,
                    gate_fn, elementwise_affine, norm_eps, fuse_norm, layer_idx)
        if self.head_k_dim % 2:
            raise ValueError(f"expand_k: the key head dim {self.head_k_dim} (hidden_size·expand_k/num_heads) must be "
                             "even for the rotary embedding")
        self.rotary = RotaryEmbedding(self.head_k_dim)

    def _offsets(self, past_key_values, attention_mask, q_len):
        """Where this call's positions start: the tokens the cache has seen; with padding, each row's real
        tokens before this call (fla's layer counts them from the mask of every token so far)."""
        if past_key_values is None:
            return 0
        seen = past_key_values.get_seq_length(self.layer_idx)
        if attention_mask is not None and seen > 0:
            return seen + attention_mask.sum(-1) - attention_mask.shape[-1]
        return seen

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        mode, hidden_states, indices, cu_seqlens, last, q, k, v, conv_state = self._begin(
            hidden_states, attention_mask, past_key_values, use_cache, kwargs.get("cu_seqlens"))
        q, k = heads(q, self.head_k_dim), heads(k, self.head_k_dim)
        if self.feature_map_fn is not None:
            q, k = self.feature_map_fn(q), self.feature_map_fn(k)
        q, k = self.rotary(q, k, self._offsets(past_key_values, attention_mask, q_len), cu_seqlens)
        k = k.repeat_interleave(self.num_kv_groups, dim=-2) if self.num_kv_groups > 1 else k
        v = heads(v, self.head_v_dim)
        v = v.repeat_interleave(self.num_kv_groups, dim=-2) if self.num_kv_groups > 1 else v
        run = fla.fused_recurrent_retention if mode == "fused_recurrent" else fla.chunk_retention
        o, state = recurrence(run, q, k, v, initial_state=last["recurrent_state"] if last is not None else None,
                              output_final_state=use_cache, cu_seqlens=cu_seqlens,
                              state_shapes=(self.num_heads, self.head_k_dim, self.head_v_dim))
        update_layer_cache(self, past_key_values, recurrent_state=state, conv_state=conv_state, offset=q_len)
        return self._end(o, hidden_states, indices, batch_size, q_len), None, past_key_values
