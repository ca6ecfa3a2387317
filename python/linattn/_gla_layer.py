"""fla.layers.GatedLinearAttention on the CPU (linattn.fla's GLA underneath), and the frame it shares
with fla.layers.MultiScaleRetention: q, k, v projections with grouped kv heads, optional short
convolutions, a feature map, and the output's RMS norm with its gate."""

from torch import nn
from torch.nn import functional as F

from . import fla
from ._layer_parts import (FusedRMSNormGated, ShortConvolution, activation, heads, key_value_dims, layer_input,
                           recurrence, repad, repeat_heads, short_convolve, update_layer_cache)


class ProjectedGatedLayer(nn.Module):
    """What GLA and RetNet's layers in fla have in common (their arguments, submodule names and
    semantics): q_proj [hidden → key_dim], k_proj and v_proj [hidden → dim / num_kv_groups], g_proj
    (use_output_gate), q/k/v_conv1d (use_short_conv, silu), o_proj, and the output norm:
    g_norm_swish_gate (gate_fn "swish" with fuse_norm) or g_norm then gate_fn(g)."""

    def _build(self, modes, mode, hidden_size, expand_k, expand_v, num_heads, num_kv_heads, feature_map,
               use_short_conv, conv_size, conv_bias, use_output_gate, gate_fn, elementwise_affine, norm_eps,
               fuse_norm, layer_idx):
        if mode not in modes:
            raise ValueError(f"mode: expected one of {list(modes)}, got {mode!r}")
        self.mode, self.hidden_size, self.expand_k, self.expand_v = mode, hidden_size, expand_k, expand_v
        self.num_heads, self.layer_idx = num_heads, layer_idx
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: {self.num_kv_heads} does not divide num_heads ({num_heads})")
        self.num_kv_groups = num_heads // self.num_kv_heads
        self.feature_map_fn = activation(feature_map, "feature_map") if feature_map is not None else None
        self.use_short_conv, self.conv_size, self.conv_bias = use_short_conv, conv_size, conv_bias
        self.use_output_gate = use_output_gate
        self.key_dim, self.value_dim = key_value_dims(hidden_size, expand_k, expand_v, num_heads)
        self.key_dim_per_group = self.key_dim // self.num_kv_groups
        self.value_dim_per_group = self.value_dim // self.num_kv_groups
        self.head_k_dim, self.head_v_dim = self.key_dim // num_heads, self.value_dim // num_heads

        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim_per_group, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim_per_group, bias=False)
        if use_output_gate:
            self.g_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        if use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, conv_size, bias=conv_bias, activation="silu")
            self.k_conv1d = ShortConvolution(self.key_dim_per_group, conv_size, bias=conv_bias, activation="silu")
            self.v_conv1d = ShortConvolution(self.value_dim_per_group, conv_size, bias=conv_bias, activation="silu")
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)
        self.fuse_norm_and_gate = gate_fn == "swish" and fuse_norm and use_output_gate
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = FusedRMSNormGated(self.head_v_dim, elementwise_affine=elementwise_affine,
                                                       eps=norm_eps)
        else:
            self.g_norm = nn.RMSNorm(self.head_v_dim, eps=norm_eps, elementwise_affine=bool(elementwise_affine))
            self.gate_fn = activation(gate_fn, "gate_fn")

    def _begin(self, hidden_states, attention_mask, past_key_values, use_cache, cu_seqlens):
        """(the mode to run: token by token for T ≤ 64, hidden_states unpadded, indices, cu_seqlens, the
        layer's cache entry, q, k, v [.., n·d] after the short convolutions, their new windows)."""
        mode, last, hidden_states, indices, cu_seqlens = layer_input(self, hidden_states, attention_mask,
                                                                     past_key_values, cu_seqlens)
        q, k, v = self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
        conv_state = None
        if self.use_short_conv:
            q, k, v, conv_state = short_convolve(self, q, k, v, last, use_cache, cu_seqlens)
        return mode, hidden_states, indices, cu_seqlens, last, q, k, v, conv_state

    def _end(self, o, hidden_states, indices, batch_size, q_len):
        """o [.., H, V] -> the layer's output [B, T, hidden]: norm and gate, o_proj, padding put back."""
        if self.use_output_gate:
            g = self.g_proj(hidden_states)
            if self.fuse_norm_and_gate:
                o = self.g_norm_swish_gate(o, heads(g, self.head_v_dim)).flatten(-2)
            else:
                o = self.g_norm(o).flatten(-2) * self.gate_fn(g)
        else:
            o = self.g_norm(o).flatten(-2)
        return repad(self.o_proj(o), indices, batch_size, q_len)


class GatedLinearAttention(ProjectedGatedLayer):
    """fla.layers.GatedLinearAttention (Yang et al. 2023): q, k, v projections (optionally through short
    convolutions), a low-rank key gate gk = logsigmoid(·)/gate_logit_normalizer (at least clamp_min),
    GLA's recurrence S_t = diag(exp gk_t) S_{t−1} + k_t v_tᵀ (chunked, or token by token for T ≤ 64 or
    mode="fused_recurrent"), an RMS norm per head with the output gate, the output projection.
    The cache's recurrent state is [B, H, V, K], as fla's layer keeps it (state_v_first)."""

    def __init__(self, mode="chunk", hidden_size=1024, expand_k=0.5, expand_v=1.0, num_heads=4, num_kv_heads=None,
                 feature_map=None, use_short_conv=False, conv_size=4, conv_bias=False, use_output_gate=True,
                 gate_fn="swish", elementwise_affine=True, norm_eps=1e-5, gate_logit_normalizer=16,
                 gate_low_rank_dim=16, clamp_min=None, fuse_norm=True, layer_idx=None):
        super().__init__()
        self._build(("chunk", "fused_recurrent", "fused_chunk"), mode, hidden_size, expand_k, expand_v, num_heads,
                    num_kv_heads, feature_map, use_short_conv, conv_size, conv_bias, use_output_gate, gate_fn,
                    elementwise_affine, norm_eps, fuse_norm, layer_idx)
        self.gk_proj = nn.Sequential(nn.Linear(hidden_size, gate_low_rank_dim, bias=False),
                                     nn.Linear(gate_low_rank_dim, self.key_dim_per_group, bias=True))
        self.gate_logit_normalizer, self.clamp_min = gate_logit_normalizer, clamp_min

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        mode, hidden_states, indices, cu_seqlens, last, q, k, v, conv_state = self._begin(
            hidden_states, attention_mask, past_key_values, use_cache, kwargs.get("cu_seqlens"))
        gk = self.gk_proj(hidden_states)
        q = heads(q, self.head_k_dim)
        k, gk = (repeat_heads(x, self.head_k_dim, self.num_kv_groups) for x in (k, gk))
        v = repeat_heads(v, self.head_v_dim, self.num_kv_groups)
        gk = F.logsigmoid(gk) / self.gate_logit_normalizer
        if self.clamp_min is not None:
            gk = gk.clamp_min(self.clamp_min)
        if self.feature_map_fn is not None:
            q, k = self.feature_map_fn(q), self.feature_map_fn(k)
        state = last["recurrent_state"] if last is not None else None
        common = dict(initial_state=state, output_final_state=use_cache, state_v_first=True, cu_seqlens=cu_seqlens,
                      state_shapes=(self.num_heads, self.head_v_dim, self.head_k_dim))
        if mode == "fused_recurrent":
            o, state = recurrence(fla.fused_recurrent_gla, q, k, v, gk=gk, **common)
        else:  # "chunk" and "fused_chunk" are the same recurrence; linattn has one chunked engine
            o, state = recurrence(fla.chunk_gla, q, k, v, gk, **common)
        update_layer_cache(self, past_key_values, recurrent_state=state, conv_state=conv_state, offset=q_len)
        return self._end(o, hidden_states, indices, batch_size, q_len), None, past_key_values


class SimpleGatedLinearAttention(ProjectedGatedLayer):
    """fla.layers.SimpleGatedLinearAttention: GLA with one decay per head and token,
    gk = logsigmoid(gk_proj(x))/gate_logit_normalizer ([B, T, H]), S_t = exp(gk_t) S_{t−1} + k_t v_tᵀ,
    the output gate always on. fla masks padded steps in place (a zero value and a zero log decay) where
    the other layers unpad; here padding is removed as in the other layers, which gives the real tokens
    the same outputs and states (a masked step leaves the state as it was) and zeros at the padding. The
    cache's recurrent state is [B, H, V, K] (state_v_first)."""

    def __init__(self, mode="chunk", hidden_size=1024, expand_k=1.0, expand_v=1.0, num_heads=4, num_kv_heads=None,
                 feature_map=None, use_short_conv=True, conv_size=4, conv_bias=False, gate_fn="swish",
                 elementwise_affine=True, norm_eps=1e-5, gate_logit_normalizer=16, fuse_norm=True, layer_idx=None):
        super().__init__()
        self._build(("chunk", "fused_recurrent"), mode, hidden_size, expand_k, expand_v, num_heads, num_kv_heads,
                    feature_map, use_short_conv, conv_size, conv_bias, True, gate_fn, elementwise_affine, norm_eps,
                    fuse_norm, layer_idx)
        self.gk_proj = nn.Linear(hidden_size, num_heads)
        self.gate_logit_normalizer = gate_logit_normalizer

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        mode, hidden_states, indices, cu_seqlens, last, q, k, v, conv_state = self._begin(
            hidden_states, attention_mask, past_key_values, use_cache, kwargs.get("cu_seqlens"))
        if self.feature_map_fn is not None:
            q, k = self.feature_map_fn(q), self.feature_map_fn(k)
        q = heads(q, self.head_k_dim)
        k = repeat_heads(k, self.head_k_dim, self.num_kv_groups)
        v = repeat_heads(v, self.head_v_dim, self.num_kv_groups)
        gk = F.logsigmoid(self.gk_proj(hidden_states)) / self.gate_logit_normalizer
        run = fla.fused_recurrent_simple_gla if mode == "fused_recurrent" else fla.chunk_simple_gla
        o, state = recurrence(run, q, k, v, g=gk, initial_state=last["recurrent_state"] if last is not None else None,
                              output_final_state=use_cache, state_v_first=True, cu_seqlens=cu_seqlens,
                              state_shapes=(self.num_heads, self.head_v_dim, self.head_k_dim))
        update_layer_cache(self, past_key_values, recurrent_state=state, conv_state=conv_state, offset=q_len)
        return self._end(o, hidden_states, indices, batch_size, q_len), None, past_key_values
