"""fla.layers.KimiDeltaAttention on the CPU (linattn.fla's chunk_kda and fused_recurrent_kda underneath)."""

import functools

import torch
from torch import nn

from . import fla
from ._delta_layers import GroupedValueDeltaLayer, short_convolutions, time_step_bias
from ._layer_parts import FusedRMSNormGated, heads, repad


class KimiDeltaAttention(GroupedValueDeltaLayer):
    """fla.layers.KimiDeltaAttention (Kimi Linear, 2025): the gated delta rule with a decay per key
    dimension, S_t = diag(exp g_t) S_{t−1} then the delta update, g_t [HV, K] computed in the kernel from
    the low-rank f_proj(x): g = −exp(A_log)·softplus(f + dt_bias), or with lower_bound
    g = lower_bound·sigmoid(exp(A_log)·(f + dt_bias)) (in [lower_bound, 0)); β = sigmoid(b_proj(x));
    q, k L2-normalised; the output an RMS norm per head gated by sigmoid(g_proj(x)) (low rank, with a
    bias), then o_proj. safe_gate (which needs lower_bound) selects a faster GPU kernel in fla and
    changes nothing here; as in fla, its A_log starts at zero. The cache's recurrent state is
    [B, HV, V, K] (state_v_first)."""

    def __init__(self, hidden_size=2048, expand_v=1, head_dim=128, num_heads=16, num_v_heads=None, mode="chunk",
                 use_short_conv=True, allow_neg_eigval=False, safe_gate=False, lower_bound=None, conv_size=4,
                 conv_bias=False, layer_idx=None, norm_eps=1e-5, **kwargs):
        super().__init__()
        if safe_gate and lower_bound is None:
            raise ValueError("safe_gate: True needs lower_bound (the gate's floor in log space, e.g. -5.0), got None")
        self._build(hidden_size, expand_v, head_dim, num_heads, num_v_heads, mode, use_short_conv, conv_size,
                    conv_bias, allow_neg_eigval, layer_idx)
        self.safe_gate, self.lower_bound = safe_gate, lower_bound
        short_convolutions(self, conv_size, conv_bias, True, warn=False)
        self.gate_dim = self.num_v_heads * self.head_k_dim  # a decay per value head and key dimension
        self.f_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.gate_dim, bias=False))
        self.b_proj = nn.Linear(hidden_size, self.num_v_heads, bias=False)
        A = torch.zeros(self.num_v_heads) if safe_gate else torch.empty(self.num_v_heads).uniform_(1, 16).log()
        self.A_log = nn.Parameter(A)
        self.A_log._no_weight_decay = True
        self.dt_bias = time_step_bias(self.gate_dim)
        self.g_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.value_dim, bias=True))
        self.o_norm = FusedRMSNormGated(self.head_v_dim, activation="sigmoid", eps=norm_eps)
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)

    def _gate(self, hidden_states):
        return heads(self.f_proj(hidden_states), self.head_k_dim)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        chunk = functools.partial(fla.chunk_kda, safe_gate=self.safe_gate)
        o, hidden_states, indices = self._recur(hidden_states, attention_mask, past_key_values, use_cache,
                                                kwargs.get("cu_seqlens"), self._gate, chunk, fla.fused_recurrent_kda,
                                                lower_bound=self.lower_bound)
        o = self.o_norm(o, heads(self.g_proj(hidden_states), self.head_v_dim))
        return repad(self.o_proj(o.flatten(-2)), indices, batch_size, q_len), None, past_key_values
