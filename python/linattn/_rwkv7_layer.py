"""fla.layers.RWKV7Attention on the CPU (linattn.fla's chunk_rwkv7 and fused_mul_recurrent_rwkv7 underneath),
and, in fla's signatures, the torch forms of the Triton helpers around the operator that fla's layer calls
(linattn.integrations.fla routes fla's own to them on CPU tensors): the token shift, the six token-shift
mixes, RWKV-7's key update, the output correction and gate, the L2 norm and the group norm.

RWKV-7's time mixing (Peng et al., 2025), per token t and head, with the state S [V, K]:

    δ_t = x_{t−1} − x_t (x_0 = 0, or the cache's last token);   x•_t = x_t + δ_t ⊙ μ•  for • in r, w, k, v, a, g
    r = W_r x_r,  k₀ = W_k x_k,  v = W_v x_v (layers after the first: lerp(v, v_first, σ(LoRA_v(x_v))))
    log w = −e^{−1/2} σ(LoRA_w(x_w))   (a decay in (e^{−e^{−1/2}}, 1)),   a = σ(LoRA_a(x_a)),  g = LoRA_g(x_g)
    κ = normalize(k₀ ⊙ k_k) per head,   k = k₀ ⊙ (1 + (a − 1) ⊙ k_a)
    S_t = S_{t−1} (diag(w_t) − κ_t (κ_t ⊙ a_t)ᵀ) + v_t k_tᵀ,   o_t = S_t r_t
    out = W_o [(GroupNorm(o) + (Σ r ⊙ k ⊙ r_k) v) ⊙ g]       (the sum per head)
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from . import fla
from ._layer_parts import layer_cache, recurrence, update_layer_cache

__all__ = ["RWKV7Attention", "LoRA", "GroupNorm"]

# log w's floor: −e^{−1/2}. fla's layer scales σ(·) by it and gives it to chunk_rwkv7 as lower_bound.
_LOG_DECAY_FLOOR = -math.exp(-0.5)


# ------------------------------------------------------------------------------------------------
# fla's Triton helpers, in torch (same parameters, in the same order, as fla's functions).


def fla_token_shift(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla.modules.token_shift: δ = (the previous token) − x for x [B, T, D]; the previous token of a
    sequence's first is the cache's row (cache [N, D], N = B or the sequences of cu_seqlens), or zeros.
    With output_cache also returns the last token of each sequence [N, D] (the cache's row where a sequence
    has none). chunk_indices (fla's Triton tiling) changes nothing."""
    if cu_seqlens is not None and x.shape[0] != 1:
        raise ValueError(f"x: the batch size must be 1 with cu_seqlens, got {x.shape[0]}")
    flat = x.flatten(0, 1)  # [B·T, D]
    T = x.shape[1]
    if cu_seqlens is None:
        starts = torch.arange(x.shape[0], device=x.device) * T
        lengths = torch.full((x.shape[0],), T, dtype=torch.long, device=x.device)
    else:
        starts, lengths = cu_seqlens[:-1].long(), cu_seqlens.diff().long()
    first = x.new_zeros(len(starts), x.shape[2]) if cache is None else cache.to(x.dtype)
    previous = torch.cat([flat.new_zeros(1, flat.shape[1]), flat])[:-1]
    real = lengths > 0
    previous = previous.index_copy(0, starts[real], first[real])
    delta = (previous - flat).view_as(x)
    if not output_cache:
        return delta
    last = first.clone()
    last[real] = flat.index_select(0, (starts + lengths - 1)[real])
    return delta, last


def fla_addcmul_rwkv7(hidden_states, delta, xr, xw, xk, xv, xa, xg=None):
    """fla.ops.rwkv7's fused_addcmul_rwkv7: hidden_states + delta ⊙ μ for each mix μ (None for xg None)."""
    return tuple(None if mix is None else torch.addcmul(hidden_states, delta, mix) for mix in (xr, xw, xk, xv, xa, xg))


def fla_k_rwkv7(k, a, ka, cu_seqlens=None, cu_seqlens_cpu=None):
    """fla.ops.rwkv7's fused_k_rwkv7: k ⊙ (1 + (a − 1) ⊙ ka), written as fla's reference rounds it."""
    return k.addcmul(k * (a - 1), ka)


def fla_gate_output_correction(o, r, k, r_k, v, g):
    """fla.ops.rwkv7's gate_output_correction: (o + (Σ_d r ⊙ k ⊙ r_k) v) ⊙ g; o, g [B, T, H·V], r, k
    [B, T, H, K], r_k [H, K], v [B, T, H, V]."""
    return (o + ((r * k * r_k).sum(-1, keepdim=True) * v).view(o.shape)) * g


def _wide(x):
    """x in float32, as fla's kernels compute (float64 stays float64: linattn's fp64 oracle runs through here)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def fla_l2_norm(x, eps=1e-6, output_dtype=None):
    """fla.modules' l2norm (l2_norm): x / √(Σ x² + eps) over the last dimension, in float32, then in
    output_dtype (default x's)."""
    h = _wide(x)
    return (h * h.square().sum(-1, keepdim=True).add(eps).rsqrt()).to(output_dtype or x.dtype)


def fla_group_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False,
                   is_rms_norm=False, num_groups=1):
    """fla.modules' group_norm (GroupNorm's forward): each of num_groups equal slices of the last dimension
    of x + residual layer-normalised (or RMS-normalised), in float32, times weight, plus bias (each over the
    whole last dimension; None for none), in x's dtype; with prenorm also x + residual (float32 with
    residual_in_fp32 and no residual, else the residual's dtype or x's)."""
    if x.shape[-1] % num_groups:
        raise ValueError(f"num_groups: {num_groups} does not divide x's last dimension ({x.shape[-1]})")
    total = _wide(x) if residual is None else _wide(x) + _wide(residual)
    h = total.unflatten(-1, (num_groups, -1))
    if not is_rms_norm:
        h = h - h.mean(-1, keepdim=True)
    h = (h * h.square().mean(-1, keepdim=True).add(eps).rsqrt()).flatten(-2)
    if weight is not None:
        h = h * _wide(weight)
    if bias is not None:
        h = h + _wide(bias)
    if not prenorm:
        return h.to(x.dtype)
    residual_dtype = residual.dtype if residual is not None else (torch.float32 if residual_in_fp32 else x.dtype)
    return h.to(x.dtype), total.to(residual_dtype)


# ------------------------------------------------------------------------------------------------
# The modules.


def _orthogonal_(weight, gain=1.0):
    """Orthogonal initialisation computed in float32 (torch's QR does not take half precision)."""
    with torch.no_grad():
        weight.copy_(nn.init.orthogonal_(weight.float(), gain=gain))


class LoRA(nn.Module):
    """fla.layers.rwkv6.LoRA: a low-rank map lora = Linear(in → rank, no bias), activation, Linear(rank → out).
    Initialised as fla does: the first map zero, the second orthogonal with gain 0.1·√(out/rank)
    (0.1 where rank ≥ out), its bias zero."""

    def __init__(self, input_dim, output_dim, low_rank_dim, bias=True, activation="tanh"):
        super().__init__()
        acts = {None: nn.Identity, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU}
        if activation not in acts:
            raise ValueError(f"activation: expected None, 'sigmoid', 'tanh' or 'relu', got {activation!r}")
        self.input_dim, self.output_dim, self.low_rank_dim, self.bias = input_dim, output_dim, low_rank_dim, bias
        self.lora = nn.Sequential(nn.Linear(input_dim, low_rank_dim, bias=False), acts[activation](),
                                  nn.Linear(low_rank_dim, output_dim, bias=bias))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.lora[0].weight)
        rank, out = self.lora[2].weight.shape[1], self.lora[2].weight.shape[0]
        _orthogonal_(self.lora[2].weight, 0.1 * (math.sqrt(rank / out) if rank > out else 1.0))
        if self.lora[2].bias is not None:
            nn.init.zeros_(self.lora[2].bias)

    def set_bias_value(self, value):
        if self.lora[2].bias is not None:
            with torch.no_grad():
                self.lora[2].bias.copy_(torch.as_tensor(value, dtype=self.lora[2].bias.dtype))

    def forward(self, x):
        return self.lora(x)


class GroupNorm(nn.Module):
    """fla.modules.GroupNorm: fla_group_norm with weight (ones) and, with bias, a bias (zeros)."""

    def __init__(self, num_groups, hidden_size, elementwise_affine=True, bias=False, eps=1e-5, is_rms_norm=False,
                 device=None, dtype=None):
        super().__init__()
        if hidden_size % num_groups:
            raise ValueError(f"num_groups: {num_groups} does not divide hidden_size ({hidden_size})")
        self.num_groups, self.hidden_size, self.elementwise_affine = num_groups, hidden_size, elementwise_affine
        self.eps, self.is_rms_norm = eps, is_rms_norm
        self.register_parameter("weight", None)
        self.register_parameter("bias", None)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
            if bias:
                self.bias = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype))

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return fla_group_norm(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32,
                              self.is_rms_norm, self.num_groups)


def _rank(given, scale, hidden_size, factor=1.0):
    """A LoRA's rank: given, or fla's default scale·√hidden_size·factor rounded to a multiple of 32, at least 32."""
    return given if given is not None else max(32, int(round(scale * hidden_size**0.5 * factor / 32) * 32))


class RWKV7Attention(nn.Module):
    """fla.layers.RWKV7Attention: RWKV-7's time mixing (the module docstring's equations). Same constructor
    arguments and defaults, parameter names and forward as fla 0.6.0's; forward returns (o, None,
    past_key_values, v_first): the first layer (layer_idx 0) makes v_first, every later one needs it.
    attention_mask [B, T_total] zeroes the padded tokens (and their values), as fla's layer does: exact for
    left padding (a padded token leaves a zero state zero); cu_seqlens (B = 1) packs sequences that never
    mix. The cache entry holds the recurrent state [N, H, K, V] and, as "conv_state", the last token [N, D]
    of the token shift; a call without use_cache leaves both as they were."""

    def __init__(self, mode="chunk", hidden_size=1024, head_dim=64, num_heads=None, decay_low_rank_dim=None,
                 gate_low_rank_dim=None, a_low_rank_dim=None, v_low_rank_dim=None, elementwise_affine=True,
                 norm_eps=1e-5, layer_idx=None, fuse_norm=False, value_dim=None, num_hidden_layers=None, **kwargs):
        super().__init__()
        if mode not in ("chunk", "fused_recurrent"):
            raise ValueError(f"mode: expected 'chunk' or 'fused_recurrent', got {mode!r}")
        if head_dim is None and num_heads is None:
            raise ValueError("head_dim, num_heads: give one of them (both are None)")
        divisor, name = (head_dim, "head_dim") if head_dim is not None else (num_heads, "num_heads")
        if hidden_size % divisor:
            raise ValueError(f"{name}: {divisor} does not divide hidden_size ({hidden_size})")
        self.mode, self.hidden_size, self.layer_idx, self.fuse_norm = mode, hidden_size, layer_idx, fuse_norm
        self.num_hidden_layers = num_hidden_layers
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_heads
        self.num_heads = hidden_size // self.head_dim
        self.key_dim, self.value_dim = hidden_size, value_dim if value_dim is not None else hidden_size
        if self.value_dim % self.num_heads:
            raise ValueError(f"value_dim: {self.value_dim} is not a multiple of the number of heads ({self.num_heads})")
        self.head_v_dim = self.value_dim // self.num_heads
        if layer_idx is not None and (num_hidden_layers is None or num_hidden_layers < 2):
            raise ValueError(f"num_hidden_layers: RWKV-7's initialisation by depth needs the model's number of layers "
                             f"(at least 2) when layer_idx is given, got {num_hidden_layers!r}")
        factor = self.head_dim / 64  # fla widens the decay's and a's LoRA for heads over 64
        self.decay_low_rank_dim = _rank(decay_low_rank_dim, 2.5, hidden_size, factor)
        self.gate_low_rank_dim = _rank(gate_low_rank_dim, 5, hidden_size)
        self.a_low_rank_dim = _rank(a_low_rank_dim, 2.5, hidden_size, factor)
        self.v_low_rank_dim = _rank(v_low_rank_dim, 1.7, hidden_size, factor)

        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))  # no parameters; kept for fla's module tree
        for mix in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            setattr(self, mix, nn.Parameter(torch.zeros(1, 1, hidden_size)))
        self.k_k = nn.Parameter(torch.zeros(self.key_dim))
        self.k_a = nn.Parameter(torch.zeros(self.key_dim))
        self.r_k = nn.Parameter(torch.zeros(self.num_heads, self.head_dim))
        self.r_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)
        self.w_lora = LoRA(hidden_size, self.key_dim, self.decay_low_rank_dim, activation="tanh")
        if layer_idx != 0:
            self.v_lora = LoRA(hidden_size, self.value_dim, self.v_low_rank_dim, activation=None)
        self.a_lora = LoRA(hidden_size, self.key_dim, self.a_low_rank_dim, activation=None)
        self.g_lora = LoRA(hidden_size, self.value_dim, self.gate_low_rank_dim, activation="sigmoid", bias=False)
        eps = self.head_dim * norm_eps
        if fuse_norm:
            self.g_norm = GroupNorm(self.num_heads, self.value_dim, elementwise_affine, bias=True, eps=eps)
        else:
            self.g_norm = nn.GroupNorm(self.num_heads, self.value_dim, eps=eps, affine=elementwise_affine)
        if layer_idx is not None:
            self._initialize_by_depth()

    @torch.no_grad()
    def _initialize_by_depth(self):
        """RWKV-7's initialisation, as fla's layer does it for a layer of known depth: token-shift mixes
        that shrink with depth, a decay bias rising across channels, zigzag patterns per head, orthogonal
        projections, o_proj zero."""
        C, depth = self.hidden_size, self.layer_idx / (self.num_hidden_layers - 1)
        shallow = 1.0 - self.layer_idx / self.num_hidden_layers
        n = torch.arange(C, dtype=torch.float64)
        ramp = n / C
        linear = n / (C - 1) - 0.5
        zigzag = ((n % self.head_dim) - (self.head_dim - 1) / 2) / ((self.head_dim - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        decay = -6 + 6 * (n / (C - 1))**(1 + depth**0.3)
        for mix, power in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7), ("x_a", 0.9), ("x_g", 0.2)):
            getattr(self, mix).copy_((1.0 - ramp**(power * shallow)).view(1, 1, C))
        nn.init.constant_(self.k_a, 1.02)
        nn.init.constant_(self.r_k, -0.04)
        self.k_k.copy_(0.71 - linear * 0.1)
        self.w_lora.set_bias_value(decay + 0.5 + zigzag * 2.5)
        self.a_lora.set_bias_value(-0.19 + zigzag * 0.3 + linear * 0.4)
        if self.layer_idx != 0:  # the same ramp over the value channels (fla's fails where value_dim ≠ hidden_size)
            self.v_lora.set_bias_value(0.73 - (torch.linspace(0, 1, self.value_dim, dtype=torch.float64) - 0.5) * 0.4)
        if self.g_norm.weight is not None:
            self.g_norm.weight.fill_(((self.layer_idx + 1) / self.num_hidden_layers)**0.7)
        _orthogonal_(self.r_proj.weight)
        _orthogonal_(self.k_proj.weight, 0.1)
        _orthogonal_(self.v_proj.weight)
        nn.init.zeros_(self.o_proj.weight)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, v_first=None, cu_seqlens=None, **kwargs):
        batch_size, seq_len, _ = hidden_states.shape
        if self.layer_idx != 0 and v_first is None:
            raise ValueError(f"v_first: layer {self.layer_idx} mixes its values with the first layer's; pass the "
                             "v_first that the layer with layer_idx 0 returned")
        am = None
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape[1] < seq_len:
                raise ValueError("attention_mask: expected a 0-1 matrix [batch_size, seq_len] (0 marks padding) of "
                                 f"at least this call's {seq_len} tokens, got shape {list(attention_mask.shape)}")
            am = attention_mask[:, attention_mask.shape[1] - seq_len:].unsqueeze(-1)
            hidden_states = hidden_states.mul(am)
        last = layer_cache(self, past_key_values)
        shift_cache = last["conv_state"] if last is not None else None
        delta, shift_cache = fla_token_shift(hidden_states, cu_seqlens, cache=shift_cache, output_cache=True)
        xr, xw, xk, xv, xa, xg = fla_addcmul_rwkv7(hidden_states, delta, self.x_r, self.x_w, self.x_k, self.x_v,
                                                   self.x_a, self.x_g)
        r, k, v = self.r_proj(xr), self.k_proj(xk), self.v_proj(xv)
        w = _LOG_DECAY_FLOOR * self.w_lora(xw).sigmoid()
        if self.layer_idx == 0:
            v_first = v
        else:
            v = torch.lerp(v, v_first, self.v_lora(xv).sigmoid())
        a, g = self.a_lora(xa).sigmoid(), self.g_lora(xg)
        kk = (k * self.k_k).unflatten(-1, (-1, self.head_dim))
        kk = fla_l2_norm(kk) if self.fuse_norm else F.normalize(kk, dim=-1, p=2.0)
        k = fla_k_rwkv7(k, a, self.k_a)
        if am is not None:
            v = v * am
        r, w, k, a = (x.unflatten(-1, (-1, self.head_dim)) for x in (r, w, k, a))
        v = v.unflatten(-1, (-1, self.head_v_dim))
        o, state = self._recur(r, w, k, v, kk, a, last, use_cache, cu_seqlens)
        update_layer_cache(self, past_key_values, recurrent_state=state,
                           conv_state=shift_cache if use_cache else None, offset=seq_len)
        if self.fuse_norm:
            o = self.g_norm(o.flatten(-2))
        else:
            o = self.g_norm(o.flatten(0, 1).flatten(-2)).view(batch_size, seq_len, -1)
        o = self.o_proj(fla_gate_output_correction(o, r, k, self.r_k, v, g))
        return o, None, past_key_values, v_first

    def _recur(self, r, w, k, v, kk, a, last, use_cache, cu_seqlens):
        """The operator, chosen as fla's layer chooses (chunked while training or with gradients, or for 64
        tokens or more; else the decoding form, which forms b = κ ⊙ a in float32 for half precision)."""
        state = last["recurrent_state"] if last is not None else None
        options = dict(scale=1.0, initial_state=state, output_final_state=use_cache, cu_seqlens=cu_seqlens)
        if self.training or r.shape[1] >= 64 or torch.is_grad_enabled():
            def run(r, k, v, **options):
                return fla.chunk_rwkv7(r, w, k, v, -kk, kk * a, safe_gate=True, lower_bound=_LOG_DECAY_FLOOR,
                                       chunk_size=64, **options)
        else:
            def run(r, k, v, **options):
                return fla.fused_mul_recurrent_rwkv7(r, w, k, v, kk, a, **options)
        return recurrence(run, r, k, v, state_shapes=(self.num_heads, self.head_dim, self.head_v_dim), **options)
