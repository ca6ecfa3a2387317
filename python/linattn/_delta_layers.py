"""fla.layers.DeltaNet and fla.layers.GatedDeltaNet on the CPU (linattn.fla's delta rule underneath)."""

import math
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from . import fla
from ._layer_parts import (FusedRMSNormGated, ShortConvolution, elu_plus_one, heads, layer_input, recurrence, repad,
                           short_convolve, sum_norm, update_layer_cache)


def short_convolutions(module, conv_size, conv_bias, qk_silu, warn=True):
    """The q, k, v short convolutions of the delta-rule layers (q, k activated by silu when qk_silu; v
    always), when module.use_short_conv; otherwise fla's warning (warn)."""
    if module.use_short_conv:
        qk_activation = "silu" if qk_silu else None
        module.q_conv1d = ShortConvolution(module.key_dim, conv_size, bias=conv_bias, activation=qk_activation)
        module.k_conv1d = ShortConvolution(module.key_dim, conv_size, bias=conv_bias, activation=qk_activation)
        module.v_conv1d = ShortConvolution(module.value_dim, conv_size, bias=conv_bias, activation="silu")
    elif warn:
        warnings.warn("ShortConvolution is crucial to the performance. Do not turn it off, i.e., setting "
                      "`use_short_conv=False` unless you know what you are doing.")


def _convolutions_and_output(module, conv_size, conv_bias, qk_silu, norm_eps, gate_activation="swish"):
    """DeltaNet's and GatedDeltaNet's short convolutions and their output: the gate projection and gated
    RMS norm (use_gate; the gate through gate_activation) or a plain RMS norm, then o_proj."""
    short_convolutions(module, conv_size, conv_bias, qk_silu)
    if module.use_gate:
        module.g_proj = nn.Linear(module.hidden_size, module.value_dim, bias=False)
        module.o_norm = FusedRMSNormGated(module.head_v_dim, eps=norm_eps, activation=gate_activation)
    else:
        module.o_norm = nn.RMSNorm(module.head_v_dim, eps=norm_eps)
    module.o_proj = nn.Linear(module.value_dim, module.hidden_size, bias=False)


def project_qkv(module, hidden_states, last, use_cache, cu_seqlens):
    """q, k, v [B, T, ·] after the projections and (with use_short_conv) the short convolutions, and the
    convolutions' new cache; without them q, k (when qk_activation is silu) and v go through silu."""
    q, k, v = module.q_proj(hidden_states), module.k_proj(hidden_states), module.v_proj(hidden_states)
    if not module.use_short_conv:
        if module.qk_activation == "silu":
            q, k = F.silu(q), F.silu(k)
        return q, k, F.silu(v), None
    return short_convolve(module, q, k, v, last, use_cache, cu_seqlens)


def _output(module, o, hidden_states, indices, batch_size, q_len):
    if module.use_gate:
        o = module.o_norm(o, heads(module.g_proj(hidden_states), module.head_v_dim))
    else:
        o = module.o_norm(o)
    return repad(module.o_proj(o.flatten(-2)), indices, batch_size, q_len)


class DeltaNet(nn.Module):
    """fla.layers.DeltaNet (Yang et al. 2024): q, k, v projections through short convolutions, q and k
    activated (silu) and L2-normalised, β = sigmoid(b_proj(x)) (×2 with allow_neg_eigval), the delta
    rule S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ (chunked, or token by token for T ≤ 64 or
    mode="fused_recurrent"), an RMS norm per head (gated with use_gate), the output projection. The
    cache's recurrent state is [B, H, K, V]."""

    def __init__(self, mode="chunk", d_model=None, hidden_size=1024, expand_k=1.0, expand_v=1.0, num_heads=4,
                 use_beta=True, use_gate=False, use_short_conv=True, conv_size=4, conv_bias=False,
                 allow_neg_eigval=False, layer_idx=None, qk_activation="silu", qk_norm="l2", norm_eps=1e-5, **kwargs):
        super().__init__()
        if qk_activation not in ("silu", "relu", "elu", "identity"):
            raise ValueError(f"qk_activation: expected 'silu', 'relu', 'elu' or 'identity', got {qk_activation!r}")
        if qk_norm not in ("l2", "sum"):
            raise ValueError(f"qk_norm: expected 'l2' or 'sum', got {qk_norm!r}")
        if mode == "fused_chunk":
            raise NotImplementedError("fused_chunk_delta_rule is now deprecated. Please use `chunk_delta_rule` instead.")
        if mode not in ("chunk", "fused_recurrent"):
            raise ValueError(f"mode: expected 'chunk' or 'fused_recurrent', got {mode!r}")
        if d_model is not None:
            hidden_size = d_model
        self.mode, self.qk_activation, self.qk_norm = mode, qk_activation, qk_norm
        self.hidden_size, self.expand_k, self.expand_v, self.num_heads = hidden_size, expand_k, expand_v, num_heads
        self.use_gate, self.use_short_conv, self.conv_size, self.conv_bias = use_gate, use_short_conv, conv_size, \
            conv_bias
        self.allow_neg_eigval, self.layer_idx = allow_neg_eigval, layer_idx
        self.key_dim, self.value_dim = int(hidden_size * expand_k), int(hidden_size * expand_v)
        for name, dim in (("key", self.key_dim), ("value", self.value_dim)):
            if dim % num_heads:
                raise ValueError(f"{name} dim: {dim} (hidden_size·expand) is not a multiple of num_heads ({num_heads})")
        self.head_k_dim, self.head_v_dim = self.key_dim // num_heads, self.value_dim // num_heads
        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        self.use_beta = use_beta
        if use_beta:
            self.b_proj = nn.Linear(hidden_size, num_heads, bias=False)
        _convolutions_and_output(self, conv_size, conv_bias, qk_activation == "silu", norm_eps)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        mode, last, hidden_states, indices, cu_seqlens = layer_input(self, hidden_states, attention_mask,
                                                                     past_key_values, kwargs.get("cu_seqlens"))
        q, k, v, conv_state = project_qkv(self, hidden_states, last, use_cache, cu_seqlens)
        q, k, v = heads(q, self.head_k_dim), heads(k, self.head_k_dim), heads(v, self.head_v_dim)
        if self.qk_activation == "relu":
            q, k = q.relu(), k.relu()
        elif self.qk_activation == "elu":
            q, k = elu_plus_one(q), elu_plus_one(k)
        if self.qk_norm == "sum":
            q, k = sum_norm(q).to(q), sum_norm(k).to(k)
        beta = self.b_proj(hidden_states).sigmoid() if self.use_beta else torch.ones_like(q[..., 0])
        if self.allow_neg_eigval:
            beta = beta * 2.0
        state = last["recurrent_state"] if last is not None else None
        run = fla.fused_recurrent_delta_rule if mode == "fused_recurrent" else fla.chunk_delta_rule
        o, state = recurrence(run, q, k, v, beta, initial_state=state, output_final_state=use_cache,
                              cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=self.qk_norm == "l2",
                              state_shapes=(self.num_heads, self.head_k_dim, self.head_v_dim))
        update_layer_cache(self, past_key_values, recurrent_state=state, conv_state=conv_state, offset=q_len)
        return _output(self, o, hidden_states, indices, batch_size, q_len), None, past_key_values


def time_step_bias(n, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4):
    """Mamba-2's initial dt_bias [n]: a time step log-uniform in [dt_min, dt_max] (at least dt_init_floor),
    through the inverse of softplus."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=dt_init_floor)
    bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
    bias._no_weight_decay = True
    return bias


class GroupedValueDeltaLayer(nn.Module):
    """What fla's GatedDeltaNet and KimiDeltaAttention share: num_heads q/k heads of head_dim, num_v_heads
    value heads of head_dim·expand_v (grouped value attention), q/k/v projections and short
    convolutions, β = sigmoid(b_proj(x)) and the gate computed in the kernel from A_log and dt_bias;
    training runs the chunked form, T ≤ 64 outside training (or mode="fused_recurrent") token by token.
    The cache's recurrent state is [B, HV, V, K] (state_v_first, as fla's layers keep it)."""

    def _build(self, hidden_size, expand_v, head_dim, num_heads, num_v_heads, mode, use_short_conv, conv_size,
               conv_bias, allow_neg_eigval, layer_idx):
        if mode not in ("chunk", "fused_recurrent"):
            raise ValueError(f"mode: expected 'chunk' or 'fused_recurrent', got {mode!r}")
        self.mode, self.allow_neg_eigval, self.hidden_size, self.expand_v = mode, allow_neg_eigval, hidden_size, \
            expand_v
        self.use_short_conv, self.conv_size, self.conv_bias = use_short_conv, conv_size, conv_bias
        self.qk_activation = "silu"
        self.head_dim, self.num_heads = head_dim, num_heads
        self.num_v_heads = num_v_heads if num_v_heads is not None else num_heads
        self.head_k_dim, self.head_v_dim = head_dim, int(head_dim * expand_v)
        self.key_dim, self.value_dim = num_heads * self.head_k_dim, self.num_v_heads * self.head_v_dim
        self.layer_idx = layer_idx
        if not math.isclose(head_dim * expand_v, self.head_v_dim, rel_tol=1e-5):
            raise ValueError(f"expand_v: {expand_v} times head_dim ({head_dim}) is not an integer "
                             f"({head_dim * expand_v}); pick expand_v so that head_dim·expand_v is whole")
        if self.num_v_heads % num_heads:
            raise ValueError(f"num_v_heads: {self.num_v_heads} is not a multiple of num_heads ({num_heads})")
        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim, bias=False)

    def _recur(self, hidden_states, attention_mask, past_key_values, use_cache, cu_seqlens, gate, chunk, recurrent,
               **options):
        """The recurrence of the layer's input: (o [.., HV, V], the unpadded hidden states, indices). gate(x)
        is the gate's raw input; chunk and recurrent are linattn.fla's two forms, given options too."""
        q_len = hidden_states.shape[1]
        mode, last, hidden_states, indices, cu_seqlens = layer_input(self, hidden_states, attention_mask,
                                                                     past_key_values, cu_seqlens,
                                                                     chunk_in_training=True)
        q, k, v, conv_state = project_qkv(self, hidden_states, last, use_cache, cu_seqlens)
        q, k, v = heads(q, self.head_k_dim), heads(k, self.head_k_dim), heads(v, self.head_v_dim)
        state = last["recurrent_state"] if last is not None else None
        o, state = recurrence(chunk if mode == "chunk" else recurrent, q, k, v, g=gate(hidden_states),
                              beta=self.b_proj(hidden_states), A_log=self.A_log, dt_bias=self.dt_bias,
                              initial_state=state, output_final_state=use_cache, use_qk_l2norm_in_kernel=True,
                              use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                              allow_neg_eigval=self.allow_neg_eigval, state_v_first=True, cu_seqlens=cu_seqlens,
                              state_shapes=(self.num_v_heads, self.head_v_dim, self.head_k_dim), **options)
        update_layer_cache(self, past_key_values, recurrent_state=state, conv_state=conv_state, offset=q_len)
        return o, hidden_states, indices


class GatedDeltaNet(GroupedValueDeltaLayer):
    """fla.layers.GatedDeltaNet (Yang et al. 2024): DeltaNet with a decay per head and token,
    g = −exp(A_log)·softplus(a_proj(x) + dt_bias), S_t = exp(g_t) S_{t−1} then the delta update, β =
    sigmoid(b_proj(x)); num_v_heads > num_heads shares each q/k head among value heads (grouped
    value attention). The output: an RMS norm per head gated by output_gate_activation(g_proj(x))
    ("swish"/"silu" or "sigmoid"; use_gate), then o_proj. Training runs the chunked form; T ≤ 64
    outside training, or mode="fused_recurrent", token by token. The cache's recurrent state is
    [B, HV, V, K], as fla's layer keeps it (state_v_first)."""

    def __init__(self, hidden_size=2048, expand_v=2, head_dim=256, num_heads=6, num_v_heads=None, mode="chunk",
                 use_gate=True, use_short_conv=True, allow_neg_eigval=False, conv_size=4, conv_bias=False,
                 layer_idx=None, norm_eps=1e-5, output_gate_activation="swish", **kwargs):
        super().__init__()
        if output_gate_activation not in ("swish", "silu", "sigmoid"):
            raise ValueError("output_gate_activation: expected 'swish', 'silu' or 'sigmoid' (the output gate's "
                             f"activation), got {output_gate_activation!r}")
        self._build(hidden_size, expand_v, head_dim, num_heads, num_v_heads, mode, use_short_conv, conv_size,
                    conv_bias, allow_neg_eigval, layer_idx)
        self.use_gate, self.output_gate_activation = use_gate, output_gate_activation
        self.a_proj = nn.Linear(hidden_size, self.num_v_heads, bias=False)
        self.b_proj = nn.Linear(hidden_size, self.num_v_heads, bias=False)
        # Mamba-2's initialisation: A uniform in [0, 16].
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads).uniform_(0, 16).log())
        self.A_log._no_weight_decay = True
        self.dt_bias = time_step_bias(self.num_v_heads)
        _convolutions_and_output(self, conv_size, conv_bias, True, norm_eps, output_gate_activation)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        o, hidden_states, indices = self._recur(hidden_states, attention_mask, past_key_values, use_cache,
                                                kwargs.get("cu_seqlens"), self.a_proj, fla.chunk_gated_delta_rule,
                                                fla.fused_recurrent_gated_delta_rule)
        return _output(self, o, hidden_states, indices, batch_size, q_len), None, past_key_values
