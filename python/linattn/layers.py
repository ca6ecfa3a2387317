"""flash-linear-attention's layers (``fla.layers``) on the CPU, computed by linattn.fla.

The constructor arguments, the forward signature and what forward returns are fla's, so that a model
ports by changing one import:

    layer = LinearAttention(mode="chunk", hidden_size=1024, num_heads=8, feature_map="elu", layer_idx=0)
    o, _, cache = layer(x, past_key_values=cache, use_cache=True)     # x [B, T, hidden_size]

A Cache holds, per layer, the recurrent state, the short convolutions' windows and the number of
tokens seen: decoding token by token keeps constant memory (nothing grows with the sequence). The
layers: LinearAttention (feature maps "elu", "relu", "identity" and "elementwise_product", fla's
default: two learnt linear maps multiplied; fla's "hedgehog", "t2r" and "dpfp" are refused by name),
GatedLinearAttention, SimpleGatedLinearAttention, DeltaNet, GatedDeltaNet, KimiDeltaAttention,
MultiScaleRetention, Mamba2 (on linattn.mamba) and RWKV7Attention (on linattn.fla's chunk_rwkv7). Their
submodules and parameters carry fla's names, so a state_dict of fla's layer loads into linattn's.
attention_mask [B, T_total] marks padding (1 = a real token); its last T columns are this call's, and
T_total is T, or the cache's tokens plus T: any other shape is refused. Padding is removed before the
layer computes (packed sequences, cu_seqlens), so it never reaches a state, a normaliser or a
convolution window (RWKV7Attention zeroes the padded tokens instead, as fla's does); cu_seqlens (B = 1)
packs sequences that never mix.
"""

from ._torch_version import require_torch

require_torch("linattn.layers", (2, 4), "torch.nn.functional.rms_norm")

from torch import nn

from . import fla
from ._delta_layers import DeltaNet, GatedDeltaNet
from ._gla_layer import GatedLinearAttention, SimpleGatedLinearAttention
from ._kda_layer import KimiDeltaAttention
from ._layer_parts import (Cache, FusedRMSNormGated, ShortConvolution, elu_plus_one, heads, key_value_dims,
                           layer_input, recurrence, repad, repeat_heads, update_layer_cache)
from ._mamba2_layer import Mamba2
from ._retention_layer import MultiScaleRetention
from ._rwkv7_layer import RWKV7Attention

__all__ = ["Cache", "LinearAttention", "GatedLinearAttention", "DeltaNet", "GatedDeltaNet", "KimiDeltaAttention",
           "MultiScaleRetention", "Mamba2", "RWKV7Attention", "SimpleGatedLinearAttention", "ShortConvolution",
           "FusedRMSNormGated"]


class _Hadamard(nn.Module):
    """fla's elementwise_product map: layer1(x) * layer2(x), both learnt [head_dim → head_dim]."""

    def __init__(self, head_dim):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(head_dim, head_dim), nn.Linear(head_dim, head_dim)

    def forward(self, x):
        return self.layer1(x) * self.layer2(x)


def _feature_map(name, head_dim):
    if name == "elementwise_product":
        return _Hadamard(head_dim)
    maps = {"elu": elu_plus_one, "relu": nn.ReLU(), "identity": nn.Identity()}
    if name not in maps:
        raise NotImplementedError(f"feature_map: {name!r} is not in linattn.layers (expected one of "
                                  f"'elementwise_product', 'elu', 'relu', 'identity')")
    return maps[name]


class LinearAttention(nn.Module):
    """fla.layers.LinearAttention: q, k, v projections, a feature map, causal linear attention
    (chunked for training, token by token for T ≤ 64 or mode="fused_recurrent"), an output norm per
    head, the output projection."""

    def __init__(self, mode="chunk", hidden_size=1024, expand_k=1.0, expand_v=1.0, num_heads=8, num_kv_heads=None,
                 feature_map="elementwise_product", tie_feature_map_qk=False, output_norm="rmsnorm", norm_q=False,
                 norm_k=False, do_feature_map_norm=False, elementwise_affine=True, norm_eps=1e-5, layer_idx=None,
                 **kwargs):
        super().__init__()
        if mode not in ("chunk", "fused_chunk", "fused_recurrent"):
            raise ValueError(f"mode: expected 'chunk', 'fused_chunk' or 'fused_recurrent', got {mode!r}")
        self.mode, self.hidden_size, self.num_heads, self.layer_idx = mode, hidden_size, num_heads, layer_idx
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: {self.num_kv_heads} does not divide num_heads ({num_heads})")
        self.num_kv_groups = num_heads // self.num_kv_heads
        self.key_dim, self.value_dim = key_value_dims(hidden_size, expand_k, expand_v, num_heads)
        self.head_k_dim, self.head_v_dim = self.key_dim // num_heads, self.value_dim // num_heads
        self.do_feature_map_norm, self.norm_q, self.norm_k = do_feature_map_norm, norm_q, norm_k
        self.feature_map_q = _feature_map(feature_map, self.head_k_dim)
        tied = tie_feature_map_qk and feature_map == "elementwise_product"
        self.feature_map_k = self.feature_map_q if tied else _feature_map(feature_map, self.head_k_dim)
        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim // self.num_kv_groups, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim // self.num_kv_groups, bias=False)
        if output_norm == "rmsnorm":
            self.norm = nn.RMSNorm(self.head_v_dim, eps=norm_eps, elementwise_affine=elementwise_affine)
        elif output_norm == "identity":
            self.norm = nn.Identity()
        else:
            raise NotImplementedError(f"output_norm: expected 'rmsnorm' or 'identity', got {output_norm!r}")
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        mode, last, hidden_states, indices, cu_seqlens = layer_input(self, hidden_states, attention_mask,
                                                                     past_key_values, kwargs.get("cu_seqlens"))
        q = self.feature_map_q(heads(self.q_proj(hidden_states), self.head_k_dim))
        k = self.feature_map_k(repeat_heads(self.k_proj(hidden_states), self.head_k_dim, self.num_kv_groups))
        v = repeat_heads(self.v_proj(hidden_states), self.head_v_dim, self.num_kv_groups)
        if self.norm_q:
            q = q / (q.sum(-1, True) + 1e-4)
        if self.norm_k:
            k = k / (k.sum(-1, True) + 1e-4)
        shapes = (self.num_heads, self.head_k_dim, self.head_v_dim)
        if self.do_feature_map_norm:  # the state is (S, z): z [N, 1, H, K] the running sum of the keys
            shapes = (shapes, (1, self.num_heads, self.head_k_dim))
        run = fla.fused_recurrent_linear_attn if mode == "fused_recurrent" else fla.chunk_linear_attn
        o, final = recurrence(run, q, k, v, initial_state=last["recurrent_state"] if last is not None else None,
                              output_final_state=use_cache, normalize=self.do_feature_map_norm,
                              cu_seqlens=cu_seqlens, state_shapes=shapes)
        update_layer_cache(self, past_key_values, recurrent_state=final, offset=q_len)
        o = self.o_proj(self.norm(o).flatten(-2))
        return repad(o, indices, batch_size, q_len), None, past_key_values
