"""linattn.layers.KimiDeltaAttention, MultiScaleRetention and SimpleGatedLinearAttention as drop-ins for
fla.layers': a reference
module per layer, written here in plain torch from the semantics of fla's layer (its constructor's
submodules and parameter names, its forward token by token), whose state dict must load strictly;
the outputs against it (padded and packed batches included), chunk against fused_recurrent, decoding
with the Cache against the whole forward, and a backward reaching every parameter."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from linattn.layers import Cache, KimiDeltaAttention, MultiScaleRetention, SimpleGatedLinearAttention
from test_recurrent_layers import l2, recurrence

HIDDEN = 32


def causal_conv(weight, x, silu=True):
    """fla's ShortConvolution: a depthwise causal convolution over time (zeros before the start), silu."""
    W, T = weight.shape[-1], x.shape[1]
    y = F.conv1d(x.transpose(1, 2), weight, padding=W - 1, groups=x.shape[-1])[..., :T].transpose(1, 2)
    return F.silu(y) if silu else y


def conv_weight(dim, size=4):
    return nn.Parameter(torch.randn(dim, 1, size) * 0.5)


class ConvHolder(nn.Module):
    """A submodule with fla's ShortConvolution's one parameter, `weight` [D, 1, W]."""

    def __init__(self, dim):
        super().__init__()
        self.weight = conv_weight(dim)


class NormHolder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.3 * torch.randn(dim))


def rms(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class ReferenceKDA(nn.Module):
    """fla.layers.KimiDeltaAttention's parameters (names and shapes) and its forward, one sequence at a
    time, token by token."""

    def __init__(self, head_dim=8, num_heads=2, num_v_heads=4, expand_v=1.0, lower_bound=None):
        super().__init__()
        H, HV, K, V = num_heads, num_v_heads, head_dim, int(head_dim * expand_v)
        self.H, self.HV, self.K, self.V, self.lower_bound = H, HV, K, V, lower_bound
        self.q_proj, self.k_proj = nn.Linear(HIDDEN, H * K, bias=False), nn.Linear(HIDDEN, H * K, bias=False)
        self.v_proj = nn.Linear(HIDDEN, HV * V, bias=False)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = ConvHolder(H * K), ConvHolder(H * K), ConvHolder(HV * V)
        self.f_proj = nn.Sequential(nn.Linear(HIDDEN, V, bias=False), nn.Linear(V, HV * K, bias=False))
        self.b_proj = nn.Linear(HIDDEN, HV, bias=False)
        self.A_log = nn.Parameter(torch.rand(HV) * 2 - 1)
        self.dt_bias = nn.Parameter(torch.randn(HV * K))
        self.g_proj = nn.Sequential(nn.Linear(HIDDEN, V, bias=False), nn.Linear(V, HV * V, bias=True))
        self.o_norm = NormHolder(V)
        self.o_proj = nn.Linear(HV * V, HIDDEN, bias=False)

    def forward(self, x):
        """x [1, T, hidden] (one sequence) -> [1, T, hidden]."""
        T, H, HV, K, V = x.shape[1], self.H, self.HV, self.K, self.V
        group = HV // H
        q = l2(causal_conv(self.q_conv1d.weight, self.q_proj(x)).view(1, T, H, K)).repeat_interleave(group, 2)
        k = l2(causal_conv(self.k_conv1d.weight, self.k_proj(x)).view(1, T, H, K)).repeat_interleave(group, 2)
        v = causal_conv(self.v_conv1d.weight, self.v_proj(x)).view(1, T, HV, V)
        raw = self.f_proj(x).view(1, T, HV, K) + self.dt_bias.view(HV, K)
        rate = self.A_log.exp()[:, None]
        if self.lower_bound is None:
            g = -rate * F.softplus(raw)
        else:
            g = self.lower_bound * torch.sigmoid(rate * raw)
        o = recurrence(q, k, v, g, self.b_proj(x).sigmoid())
        gate = torch.sigmoid(self.g_proj(x).view(1, T, HV, V))
        return self.o_proj((rms(o, self.o_norm.weight) * gate).flatten(-2))


def rotate(x, start):
    """RoPE with GPT-NeoX halves: channel i < D/2 pairs with i + D/2, turned by (start + t)·10000^(−2i/D)."""
    T, D = x.shape[1], x.shape[-1]
    theta = (start + torch.arange(T, dtype=torch.float64))[:, None] * 10000.0 ** (
        -torch.arange(0, D, 2, dtype=torch.float64) / D)
    cos, sin = theta.cos().float()[None, :, None], theta.sin().float()[None, :, None]
    a, b = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


class ReferenceRetention(nn.Module):
    """fla.layers.MultiScaleRetention's parameters and forward, one sequence at a time: rotary q and k
    from position `start`, the decay γ_h = 1 − 2^(−5−h), the output norm with its gate."""

    def __init__(self, num_heads=4, num_kv_heads=None, expand_k=1.0, expand_v=2.0, use_short_conv=False,
                 gate_fn="swish", fuse_norm=True):
        super().__init__()
        H = num_heads
        G = H // (num_kv_heads or H)
        self.H, self.G = H, G
        self.K, self.V = int(HIDDEN * expand_k) // H, int(HIDDEN * expand_v) // H
        self.q_proj = nn.Linear(HIDDEN, H * self.K, bias=False)
        self.k_proj = nn.Linear(HIDDEN, H * self.K // G, bias=False)
        self.v_proj = nn.Linear(HIDDEN, H * self.V // G, bias=False)
        self.g_proj = nn.Linear(HIDDEN, H * self.V, bias=False)
        self.use_short_conv = use_short_conv
        if use_short_conv:
            self.q_conv1d, self.k_conv1d = ConvHolder(H * self.K), ConvHolder(H * self.K // G)
            self.v_conv1d = ConvHolder(H * self.V // G)
        self.o_proj = nn.Linear(H * self.V, HIDDEN, bias=False)
        self.fused = gate_fn == "swish" and fuse_norm
        if self.fused:
            self.g_norm_swish_gate = NormHolder(self.V)
        else:
            self.g_norm = NormHolder(self.V)
        self.gate = {"swish": F.silu, "sigmoid": torch.sigmoid}[gate_fn]

    def forward(self, x, start=0):
        T, H, G, K, V = x.shape[1], self.H, self.G, self.K, self.V
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_short_conv:
            q, k, v = (causal_conv(c.weight, y) for c, y in ((self.q_conv1d, q), (self.k_conv1d, k),
                                                             (self.v_conv1d, v)))
        q, k = rotate(q.view(1, T, H, K), start), rotate(k.view(1, T, H // G, K), start).repeat_interleave(G, 2)
        v = v.view(1, T, H // G, V).repeat_interleave(G, 2)
        gamma = torch.tensor([math.log(1 - 2.0 ** (-5 - h)) for h in range(H)])
        o = recurrence(q, k, v, gamma.view(1, 1, H, 1).expand(1, T, H, K))
        g = self.g_proj(x)
        if self.fused:
            o = (rms(o, self.g_norm_swish_gate.weight) * F.silu(g.view(1, T, H, V))).flatten(-2)
        else:
            o = rms(o, self.g_norm.weight).flatten(-2) * self.gate(g)
        return self.o_proj(o)


class ReferenceSimpleGLA(nn.Module):
    """fla.layers.SimpleGatedLinearAttention's parameters and forward, one sequence at a time: a log decay
    per head and token, logsigmoid(gk_proj(x))/16, the gated output norm."""

    def __init__(self, num_heads=4, num_kv_heads=None, use_short_conv=True, gate_fn="swish"):
        super().__init__()
        H = num_heads
        G = H // (num_kv_heads or H)
        self.H, self.G, self.K, self.V = H, G, HIDDEN // H, HIDDEN // H
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj, self.v_proj = nn.Linear(HIDDEN, HIDDEN // G, bias=False), nn.Linear(HIDDEN, HIDDEN // G, bias=False)
        self.g_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.use_short_conv = use_short_conv
        if use_short_conv:
            self.q_conv1d, self.k_conv1d, self.v_conv1d = ConvHolder(HIDDEN), ConvHolder(HIDDEN // G), ConvHolder(
                HIDDEN // G)
        self.gk_proj = nn.Linear(HIDDEN, H)
        self.fused = gate_fn == "swish"
        if self.fused:
            self.g_norm_swish_gate = NormHolder(self.V)
        else:
            self.g_norm = NormHolder(self.V)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        T, H, G, K, V = x.shape[1], self.H, self.G, self.K, self.V
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_short_conv:
            q, k, v = (causal_conv(c.weight, y) for c, y in ((self.q_conv1d, q), (self.k_conv1d, k),
                                                             (self.v_conv1d, v)))
        q = q.view(1, T, H, K)
        k, v = k.view(1, T, H // G, K).repeat_interleave(G, 2), v.view(1, T, H // G, V).repeat_interleave(G, 2)
        gk = F.logsigmoid(self.gk_proj(x)) / 16
        o = recurrence(q, k, v, gk[..., None].expand(1, T, H, K))
        g = self.g_proj(x)
        if self.fused:
            return self.o_proj((rms(o, self.g_norm_swish_gate.weight) * F.silu(g.view(1, T, H, V))).flatten(-2))
        return self.o_proj(rms(o, self.g_norm.weight).flatten(-2) * torch.sigmoid(g))


CASES = {
    "kda": (lambda: ReferenceKDA(),
            lambda **kw: KimiDeltaAttention(hidden_size=HIDDEN, head_dim=8, num_heads=2, num_v_heads=4, **kw)),
    "kda_lower_bound": (lambda: ReferenceKDA(num_v_heads=2, expand_v=1.5, lower_bound=-5.0),
                        lambda **kw: KimiDeltaAttention(hidden_size=HIDDEN, head_dim=8, num_heads=2, expand_v=1.5,
                                                        lower_bound=-5.0, safe_gate=True, **kw)),
    "retention": (lambda: ReferenceRetention(),
                  lambda **kw: MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, **kw)),
    "retention_gqa_conv_sigmoid": (
        lambda: ReferenceRetention(num_kv_heads=2, expand_k=0.5, use_short_conv=True, gate_fn="sigmoid"),
        lambda **kw: MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, num_kv_heads=2, expand_k=0.5,
                                         use_short_conv=True, gate_fn="sigmoid", **kw)),
    "simple_gla": (lambda: ReferenceSimpleGLA(),
                   lambda **kw: SimpleGatedLinearAttention(hidden_size=HIDDEN, num_heads=4, **kw)),
    "simple_gla_gqa_sigmoid": (lambda: ReferenceSimpleGLA(num_kv_heads=2, use_short_conv=False, gate_fn="sigmoid"),
                               lambda **kw: SimpleGatedLinearAttention(hidden_size=HIDDEN, num_heads=4, num_kv_heads=2,
                                                                       use_short_conv=False, gate_fn="sigmoid",
                                                                       **kw)),
}


def pair(name, seed=0, **kw):
    """(reference, linattn's layer holding the reference's weights, loaded strictly)."""
    torch.manual_seed(seed)
    make_reference, make = CASES[name]
    reference = make_reference()
    layer = make(layer_idx=0, **kw).eval()
    layer.load_state_dict(reference.state_dict(), strict=True)
    return reference, layer


@pytest.mark.parametrize("name", list(CASES))
def test_state_dict_loads_strictly_both_ways(name):
    reference, layer = pair(name)
    assert sorted(layer.state_dict()) == sorted(reference.state_dict())
    reference.load_state_dict(layer.state_dict(), strict=True)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("T", [1, 9, 70])
def test_forward_is_the_reference(name, T):
    reference, layer = pair(name, seed=T)
    x = torch.randn(2, T, HIDDEN)
    o, attentions, cache = layer(x)
    assert attentions is None and cache is None
    expected = torch.cat([reference(x[b:b + 1]) for b in range(2)])
    torch.testing.assert_close(o, expected, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_padded_and_packed_batches_are_each_sequence_alone(name):
    """Left padding (attention_mask) and packing (cu_seqlens, with an empty sequence): each sequence's
    tokens give what the reference gives it alone (the rotary positions restart with each sequence)."""
    reference, layer = pair(name, seed=5)
    lengths = [7, 0, 12, 3]
    xs = [torch.randn(1, n, HIDDEN) for n in lengths]
    mask = torch.zeros(len(lengths), 12, dtype=torch.long)
    padded = torch.zeros(len(lengths), 12, HIDDEN)
    for b, (n, x) in enumerate(zip(lengths, xs)):
        mask[b, 12 - n:] = 1
        padded[b, 12 - n:] = x[0]
    o = layer(padded, attention_mask=mask)[0]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    packed = layer(torch.cat(xs, 1), cu_seqlens=cu)[0]
    for b, (n, x) in enumerate(zip(lengths, xs)):
        if n == 0:
            continue
        alone = reference(x)
        torch.testing.assert_close(o[b, 12 - n:], alone[0], atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(packed[:, cu[b]:cu[b + 1]], alone, atol=5e-5, rtol=1e-4)
    assert (o * (1 - mask)[..., None] == 0).all()


@pytest.mark.parametrize("name", list(CASES))
def test_chunk_and_fused_recurrent_agree(name):
    _, layer = pair(name, seed=6)
    x = torch.randn(2, 97, HIDDEN)
    chunked = layer(x)[0]
    layer.mode = "fused_recurrent"
    torch.testing.assert_close(layer(x)[0], chunked, atol=2e-5, rtol=1e-4)


def make_cache(kind):
    if kind == "linattn":
        return Cache()
    return pytest.importorskip("fla.models.cache_utils", reason="flash-linear-attention is not installed").Cache()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("cache_kind", ["linattn", "fla"])
def test_decoding_with_a_cache_is_the_whole_forward(name, cache_kind):
    """Two layers; a left-padded batch: prefill 67 tokens (chunked), then 5 token by token with the
    growing mask; equal to the whole forward, the state's size constant; with linattn's Cache and with
    fla's own where flash-linear-attention is installed."""
    cache = make_cache(cache_kind)
    _, first = pair(name, seed=7)
    _, second = pair(name, seed=8)
    second.layer_idx = 1
    x = torch.randn(2, 72, HIDDEN)
    mask = torch.ones(2, 72, dtype=torch.long)
    mask[1, :9] = 0
    whole = second(first(x, attention_mask=mask)[0], attention_mask=mask)[0]
    h = x[:, :67]
    for layer in (first, second):
        h, _, cache = layer(h, attention_mask=mask[:, :67], past_key_values=cache, use_cache=True)
    outputs, sizes = [h], set()
    for t in range(67, 72):
        h = x[:, t:t + 1]
        for layer in (first, second):
            h, _, cache = layer(h, attention_mask=mask[:, :t + 1], past_key_values=cache, use_cache=True)
        outputs.append(h)
        sizes.add(tuple(cache[1]["recurrent_state"].shape))
    torch.testing.assert_close(torch.cat(outputs, 1), whole, atol=5e-5, rtol=1e-4)
    assert len(sizes) == 1 and cache.get_seq_length(1) == 72


@pytest.mark.parametrize("name", list(CASES))
def test_backward_reaches_every_parameter(name):
    _, layer = pair(name, seed=9)
    layer.train()
    layer(torch.randn(2, 70, HIDDEN))[0].square().sum().backward()
    missing = [n for n, p in layer.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no finite gradient for {missing}"


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="mode: expected"):
        KimiDeltaAttention(hidden_size=HIDDEN, head_dim=8, num_heads=2, mode="parallel")
    with pytest.raises(ValueError, match="safe_gate: True needs lower_bound"):
        KimiDeltaAttention(hidden_size=HIDDEN, head_dim=8, num_heads=2, safe_gate=True)
    with pytest.raises(ValueError, match="num_v_heads: 3"):
        KimiDeltaAttention(hidden_size=HIDDEN, head_dim=8, num_heads=2, num_v_heads=3)
    with pytest.raises(ValueError, match="mode: expected"):
        MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, mode="recurrent")
    with pytest.raises(ValueError, match="gate_fn: 'mish'"):
        MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, gate_fn="mish")
    with pytest.raises(ValueError, match="feature_map: 'hedgehog'"):
        MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, feature_map="hedgehog")
    with pytest.raises(ValueError, match="num_kv_heads: 3"):
        MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="expand_k"):
        MultiScaleRetention(hidden_size=HIDDEN, num_heads=4, expand_k=0.3)
