"""The pieces linattn.layers' modules share, as fla.modules and fla.layers.utils have them: the decode
cache, the short causal convolution with its cache, the gated RMS norm, the activations by name, and
the removal of padding (attention_mask) into packed sequences (cu_seqlens) and back."""

import math

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
        """As fla's Cache: a state given replaces the layer's, None keeps it (a call without use_cache
        leaves the states as they were); the tokens seen grow by offset either way."""
        while len(self.states) <= layer_idx:
            self.states.append({"recurrent_state": None, "conv_state": None, "offset": 0})
        entry = self.states[layer_idx]
        if recurrent_state is not None:
            entry["recurrent_state"] = recurrent_state
        if conv_state is not None and not all(c is None for c in conv_state):
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


def key_value_dims(hidden_size, expand_k, expand_v, num_heads):
    """(key_dim, value_dim) = hidden_size·expand_k, hidden_size·expand_v, each refused unless whole and a
    multiple of num_heads."""
    dims = []
    for name, expand in (("expand_k", expand_k), ("expand_v", expand_v)):
        dim = round(hidden_size * expand)
        if not math.isclose(hidden_size * expand, dim):
            raise ValueError(f"{name}: hidden_size·{name} = {hidden_size * expand} is not an integer; pick {name} "
                             "so that it is whole")
        if dim % num_heads:
            raise ValueError(f"{name}: hidden_size·{name} = {dim} is not a multiple of num_heads ({num_heads})")
        dims.append(dim)
    return tuple(dims)


def elu_plus_one(x):
    return F.elu(x) + 1


def sum_norm(x):
    return x / x.sum(-1, keepdim=True)


def tanh_gelu(x):
    """fla's "gelu" (its ACT2FN's fast_gelu_impl): the tanh approximation, not torch's exact erf form."""
    return F.gelu(x, approximate="tanh")


def squared_relu(x):
    return F.relu(x).square()


# fla's ACT2FN (relu, sigmoid, logsigmoid, silu, swish, sqrelu, gelu), and the maps linattn's layers
# also take by name (tanh, elu, elu_p1, identity). fla's two-argument bias_gelu is not a map of one tensor.
_ACTIVATIONS = {"swish": F.silu, "silu": F.silu, "relu": F.relu, "sigmoid": torch.sigmoid,
                "logsigmoid": F.logsigmoid, "sqrelu": squared_relu, "gelu": tanh_gelu, "tanh": torch.tanh,
                "elu": F.elu, "elu_p1": elu_plus_one, "identity": lambda x: x}


# The names of fla's ACT2FN itself, for arguments that fla looks up there alone (Mamba2's hidden_act).
FLA_ACT2FN = ("relu", "sigmoid", "logsigmoid", "silu", "swish", "sqrelu", "gelu")


def activation(name, what, names=None):
    """The activation of that name (of `names` only, when given), or a ValueError naming the argument."""
    names = sorted(_ACTIVATIONS) if names is None else sorted(names)
    if name not in names:
        raise ValueError(f"{what}: {name!r} is not an activation linattn.layers has (expected one of {names})")
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
        if x.shape[1] == 0:  # no token (T = 0, or a sequence that is all padding): the window stays as it was
            return x, cache.to(x.dtype)
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


def short_convolve(module, q, k, v, last, use_cache, cu_seqlens):
    """q, k, v through the module's q_conv1d, k_conv1d, v_conv1d, continuing the windows in the layer's
    cache entry last (or from zeros); returns q, k, v and the new windows (a tuple, None without use_cache)."""
    states = last["conv_state"] if last is not None and last["conv_state"] is not None else (None,) * 3
    (q, cq), (k, ck), (v, cv) = [conv(x, cache=c, output_final_state=use_cache, cu_seqlens=cu_seqlens)
                                 for conv, x, c in zip((module.q_conv1d, module.k_conv1d, module.v_conv1d), (q, k, v),
                                                       states)]
    return q, k, v, (cq, ck, cv)


def rms_norm_gated(x, gate, weight, eps, activation="silu", norm_in_input_dtype=False, bias=None):
    """The gated RMS norm of fla's FusedRMSNormGated and of transformers' *RMSNormGated modules:
    x / √(mean(x²) + eps) · weight (+ bias) · act(gate), act silu ("silu", "swish") or sigmoid ("sigmoid");
    gate None: no gate (fla's RMSNorm). The output in x's dtype. Computed in float32, in the order
    transformers' torch modules compute it, so that it gives their results bit for bit: norm_in_input_dtype
    rounds the normalised x to x's dtype before the weight multiplies it (Qwen3-Next, Qwen3.5, OLMo-Hybrid:
    weight · normed.to(dtype)); without it everything stays in float32 until the end (fla, Kimi Linear,
    GLM-5-Next, Bailing). weight, bias: None for none. The temporaries are updated in place: no more memory
    traffic than the formula needs."""
    if gate is not None and activation not in ("silu", "swish", "sigmoid"):
        raise ValueError(f"activation: expected 'swish', 'silu' or 'sigmoid', got {activation!r}")
    h = x.to(torch.float32)
    rstd = h.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    h = h * rstd
    if weight is not None:
        h = weight * h.to(x.dtype) if norm_in_input_dtype else h.mul_(weight.to(torch.float32))
    if bias is not None:
        h = h + bias.to(torch.float32)
    if gate is None:
        return h.to(x.dtype)
    gate = gate.to(torch.float32)
    gated = F.silu(gate) if activation in ("silu", "swish") else torch.sigmoid(gate)
    # In place only where the product stays float32: transformers' weight · normed.to(bf16) is bf16 there,
    # and its product with the float32 gate is float32 before the final rounding.
    out = h.mul_(gated) if h.dtype == torch.float32 else h * gated
    return out.to(x.dtype)


def fla_rms_norm_gated(x, g, weight, bias, activation="swish", residual=None, prenorm=False, residual_in_fp32=False,
                       eps=1e-6):
    """fla.modules' rms_norm_gated (and, with g None, its rms_norm): the norm of x + residual, gated, in x's
    dtype; with prenorm also x + residual, kept in the residual's dtype (float32 with residual_in_fp32 and no
    residual, else x's), as fla's kernel stores it."""
    residual_dtype = residual.dtype if residual is not None else (torch.float32 if residual_in_fp32 else x.dtype)
    total = x.float() if residual is None else x.float() + residual.float()
    out = rms_norm_gated(total, g, weight, eps, activation, bias=bias).to(x.dtype)
    return (out, total.to(residual_dtype)) if prenorm else out


def fla_rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False):
    """fla.modules' rms_norm (fla's RMSNorm forward): fla_rms_norm_gated without a gate."""
    return fla_rms_norm_gated(x, None, weight, bias, None, residual, prenorm, residual_in_fp32, eps)


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
        return fla_rms_norm_gated(x, g, self.weight, self.bias, self.activation, residual, prenorm, residual_in_fp32,
                                  self.eps)


def cache_seen(module, past_key_values):
    """The tokens the cache has seen before this call for the module's layer (0 without a cache), or
    None where the cache cannot say (it has no get_seq_length)."""
    if past_key_values is None:
        return 0
    if not hasattr(past_key_values, "get_seq_length"):
        return None
    return int(past_key_values.get_seq_length(module.layer_idx))


def unpad(hidden_states, attention_mask, cu_seqlens, seen=0):
    """hidden_states [B, T, D] with attention_mask [B, T_total] (1 where a token is real; its last T
    columns are this call's) -> ([1, tokens, D], indices, cu_seqlens); without a mask: unchanged.
    T_total is T, or with a cache the tokens seen before (seen; None: not known) plus T: any other
    length would pick the wrong tokens, so it is refused."""
    if attention_mask is None:
        return hidden_states, None, cu_seqlens
    if attention_mask.dim() != 2:
        raise ValueError("attention_mask: expected a 0-1 matrix of shape [batch_size, seq_len] for padding "
                         f"(0 marks padding), got shape {list(attention_mask.shape)}")
    if cu_seqlens is not None:
        raise ValueError("attention_mask and cu_seqlens cannot be given together")
    batch_size, q_len = hidden_states.shape[:2]
    mask_batch, mask_len = attention_mask.shape
    lengths = {q_len} if seen is None or seen == 0 else {q_len, seen + q_len}
    if mask_batch != batch_size or not (mask_len in lengths or (seen is None and mask_len >= q_len)):
        allowed = " or ".join(str(n) for n in sorted(lengths)) + (" or more" if seen is None else "")
        raise ValueError(f"attention_mask: expected shape [batch_size, seq_len] = [{batch_size}, {allowed}] "
                         f"(this call's {q_len} tokens" + (f" after the cache's {seen}" if seen else "") +
                         f"), got {list(attention_mask.shape)}; pass the mask of the tokens given")
    mask = attention_mask[:, -q_len:].bool() if q_len else attention_mask[:, :0].bool()
    indices = mask.flatten().nonzero().squeeze(-1)
    lengths = mask.sum(-1)
    cu = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    packed = hidden_states.flatten(0, 1).index_select(0, indices).unsqueeze(0)
    return packed, indices, cu


def layer_input(module, hidden_states, attention_mask, past_key_values, cu_seqlens, chunk_in_training=False):
    """What every layer's forward does first, as flash-linear-attention's layers do: (mode, the layer's cache
    entry or None, the unpadded hidden states, indices, cu_seqlens). mode is "fused_recurrent" for 64 tokens
    or fewer (decoding), module.mode otherwise; chunk_in_training: the layer trains only chunked (the gated
    delta rule's layers), so training never takes the recurrent form and refuses any other mode."""
    q_len = hidden_states.shape[1]
    mode = "fused_recurrent" if q_len <= 64 and not (chunk_in_training and module.training) else module.mode
    if chunk_in_training and module.training and mode != "chunk":
        raise ValueError("mode: only 'chunk' is supported in training (call .eval() to decode)")
    last = layer_cache(module, past_key_values)
    # Padding is removed (not zeroed): a padded key would otherwise enter the normaliser and the state.
    hidden_states, indices, cu_seqlens = unpad(hidden_states, attention_mask, cu_seqlens,
                                               cache_seen(module, past_key_values))
    return mode, last, hidden_states, indices, cu_seqlens


def recurrence(run, q, k, v, *args, state_shapes, **options):
    """run(q, k, v, *args, **options), one of linattn.fla's functions. With no token at all (T = 0, or
    every row padding) linattn's operators refuse and there is nothing to compute: o is empty and the
    state passes through (zeros, as an empty run leaves them, where none was given). state_shapes: the
    per-sequence shape of the state, or of each of its parts (a tuple of shapes)."""
    if q.shape[1] > 0:
        return run(q, k, v, *args, **options)
    state = None
    if options.get("output_final_state"):
        state = options.get("initial_state")
        if state is None:
            cu = options.get("cu_seqlens")
            n = q.shape[0] if cu is None else len(cu) - 1
            if isinstance(state_shapes[0], int):
                state = q.new_zeros(n, *state_shapes)
            else:
                state = tuple(q.new_zeros(n, *shape) for shape in state_shapes)
    return v.new_zeros(v.shape), state


def repad(o, indices, batch_size, seq_len):
    """The inverse of unpad: [1, tokens, D] -> [B, T, D], zeros at the padding."""
    if indices is None:
        return o
    out = o.new_zeros(batch_size * seq_len, *o.shape[2:])
    return out.index_copy(0, indices, o.squeeze(0)).view(batch_size, seq_len, *o.shape[2:])


def heads(x, head_dim):
    """[..., n·head_dim] -> [..., n, head_dim]."""
    return x.unflatten(-1, (-1, head_dim))


def repeat_heads(x, head_dim, groups):
    """[..., n·head_dim] -> [..., n·groups, head_dim], each head repeated for its group of heads."""
    x = heads(x, head_dim)
    return x.repeat_interleave(groups, dim=-2) if groups > 1 else x
