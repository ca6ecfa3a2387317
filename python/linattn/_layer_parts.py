"""The pieces linattn.layers' modules share, as fla.modules and fla.layers.utils have them: the decode
cache, the short causal convolution with its cache, the gated RMS norm, the activations by name, and
the removal of padding (attention_mask) into packed sequences (cu_seqlens) and back."""

import torch
from torch import nn
from torch.nn import functional as F


class Cache:
    """Per-layer decode states, as fla's Cache: cache[layer_idx] is {"recurrent_state": S,
    "conv_state": (q, k, v) short-convolution windows or None, "offset": tokens seen}."""

    def __init__(self):
        self.states = []

    def __len__(self):
        return len(self.states)

    def __getitem__(self, layer_idx):
        return self.states[layer_idx]

    def update(self, recurrent_state=None, conv_state=None, layer_idx=0, offset=1, **kwargs):
        while len(self.states) <= layer_idx:
            self.states.append({"recurrent_state": None, "conv_state": None, "offset": 0})
        entry = self.states[layer_idx]
        entry["recurrent_state"] = recurrent_state
        entry["conv_state"] = conv_state
        entry["offset"] += offset
        return entry

    def get_seq_length(self, layer_idx=0):
        return self.states[layer_idx]["offset"] if len(self.states) > layer_idx else 0


def layer_cache(module, past_key_values):
    """The layer's entry of the cache, or None; a cache needs the layer's index."""
    if past_key_values is None:
        return None
    if module.layer_idx is None:
        raise ValueError(f"layer_idx: {type(module).__name__} needs an int layer_idx when past_key_values is given, "
                         "got None")
    return past_key_values[module.layer_idx] if len(past_key_values) > module.layer_idx else None


def update_layer_cache(module, past_key_values, **state):
    if past_key_values is not None:
        past_key_values.update(layer_idx=module.layer_idx, **state)


def elu_plus_one(x):
    return F.elu(x) + 1


def sum_norm(x):
    return x / x.sum(-1, keepdim=True)


_ACTIVATIONS = {"swish": F.silu, "silu": F.silu, "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
                "elu": F.elu, "elu_p1": elu_plus_one, "gelu": F.gelu, "identity": lambda x: x}


def activation(name, what):
    """fla's ACT2FN entry by name (the ones its layers use), or a ValueError naming the argument."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"{what}: {name!r} is not an activation linattn.layers has (expected one of "
                         f"{sorted(_ACTIVATIONS)})")
    return _ACTIVATIONS[name]


class ShortConvolution(nn.Conv1d):
    """fla.modules.ShortConvolution: a depthwise causal convolution over time (kernel_size taps per
    channel), then silu. forward(x [B, T, D], cache [N, D, W]) returns (y [B, T, D], cache): the cache
    holds the last W inputs of each sequence (zeros before the first), so that decoding token by token
    gives what the whole sequence gives. With cu_seqlens (B = 1) no window crosses a sequence's start."""

    def __init__(self, hidden_size, kernel_size, bias=False, activation="silu", backend="triton", device=None,
                 dtype=None, **kwargs):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size, bias=bias,
                         padding=kernel_size - 1, device=device, dtype=dtype)
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"activation: expected None, 'silu' or 'swish', got {activation!r}")
        self.hidden_size, self.activation, self.backend = hidden_size, activation, backend

    def _window(self, x, cache):
        """x [N, T, D], cache [N, D, W] or None -> y [N, T, D], the new cache [N, D, W]."""
        W = self.kernel_size[0]
        if cache is None:
            cache = x.new_zeros(x.shape[0], self.hidden_size, W)
        whole = torch.cat([cache.to(x.dtype), x.transpose(1, 2)], dim=-1)  # [N, D, W + T]
        y = F.conv1d(whole[..., 1:], self.weight, self.bias, groups=self.hidden_size)
        return y.transpose(1, 2), whole[..., -W:]

    def forward(self, x, residual=None, mask=None, cache=None, output_final_state=False, cu_seqlens=None, **kwargs):
        if mask is not None:
            if cu_seqlens is not None:
                raise ValueError("`mask` and `cu_seqlens` cannot be provided at the same time")
            x = x * mask.unsqueeze(-1)
        if cu_seqlens is None:
            y, final = self._window(x, cache)
        else:
            if x.shape[0] != 1:
                raise ValueError(f"x: the batch size must be 1 with cu_seqlens, got {x.shape[0]}")
            bounds = cu_seqlens.tolist()
            ys, finals = [], []
            for n, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
                y_n, final_n = self._window(x[:, a:b], None if cache is None else cache[n:n + 1])
                ys.append(y_n)
                finals.append(final_n)
            y = torch.cat(ys, dim=1)
            final = torch.cat(finals, dim=0) if finals else x.new_zeros(0, self.hidden_size, self.kernel_size[0])
        if self.activation is not None:
            y = F.silu(y)
        if residual is not None:
            y = y + residual
        return y, (final if output_final_state else None)


class FusedRMSNormGated(nn.Module):
    """fla.modules.FusedRMSNormGated: rmsnorm(x)·weight, times the gate's activation: g·sigmoid(g)
    ("swish", "silu") or sigmoid(g)."""

    def __init__(self, hidden_size, elementwise_affine=True, eps=1e-5, activation="swish", device=None, dtype=None):
        super().__init__()
        if activation not in ("swish", "silu", "sigmoid"):
            raise ValueError(f"activation: expected 'swish', 'silu' or 'sigmoid', got {activation!r}")
        self.hidden_size, self.elementwise_affine, self.eps, self.activation = hidden_size, elementwise_affine, eps, \
            activation
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype)) if elementwise_affine else None
        self.register_parameter("bias", None)

    def forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
        if residual is not None:
            x = x + residual
        y = F.rms_norm(x.float(), (self.hidden_size,), None if self.weight is None else self.weight.float(), self.eps)
        gate = F.silu(g.float()) if self.activation in ("swish", "silu") else torch.sigmoid(g.float())
        out = (y * gate).to(x.dtype)
        return (out, x) if prenorm else out


def unpad(hidden_states, attention_mask, cu_seqlens):
    """hidden_states [B, T, D] with attention_mask [B, T_total] (1 where a token is real; its last T
    columns are this call's) -> ([1, tokens, D], indices, cu_seqlens); without a mask: unchanged."""
    if attention_mask is None:
        return hidden_states, None, cu_seqlens
    if attention_mask.dim() != 2:
        raise ValueError("attention_mask: expected a 0-1 matrix of shape [batch_size, seq_len] for padding "
                         f"(0 marks padding), got shape {list(attention_mask.shape)}")
    if cu_seqlens is not None:
        raise ValueError("attention_mask and cu_seqlens cannot be given together")
    mask = attention_mask[:, -hidden_states.shape[1]:].bool()
    indices = mask.flatten().nonzero().squeeze(-1)
    lengths = mask.sum(-1)
    cu = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    packed = hidden_states.flatten(0, 1).index_select(0, indices).unsqueeze(0)
    return packed, indices, cu


def repad(o, indices, batch_size, seq_len):
    """The inverse of unpad: [1, tokens, D] -> [B, T, D], zeros at the padding."""
    if indices is None:
        return o
    out = o.new_zeros(batch_size * seq_len, o.shape[-1])
    return out.index_copy(0, indices, o.squeeze(0)).view(batch_size, seq_len, -1)


def heads(x, head_dim):
    """[..., n·head_dim] -> [..., n, head_dim]."""
    return x.unflatten(-1, (-1, head_dim))


def repeat_heads(x, head_dim, groups):
    """[..., n·head_dim] -> [..., n·groups, head_dim], each head repeated for its group of heads."""
    x = heads(x, head_dim)
    return x.repeat_interleave(groups, dim=-2) if groups > 1 else x
