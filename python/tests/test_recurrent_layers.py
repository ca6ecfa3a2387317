"""linattn.layers.GatedLinearAttention, DeltaNet and GatedDeltaNet: fla.layers' arguments, parameter
names and return; each layer against its formula written out here in plain torch (token-by-token
recurrences); decoding with a Cache equal to the whole sequence at constant memory; padding masks."""

import pytest
import torch
import torch.nn.functional as F

from linattn.layers import Cache, DeltaNet, FusedRMSNormGated, GatedDeltaNet, GatedLinearAttention, ShortConvolution


def conv_formula(conv, x):
    """Causal depthwise convolution over time: y_t = Σ_j w_j x_{t−W+1+j}, zeros before the start."""
    W, T = conv.kernel_size[0], x.shape[1]
    y = F.conv1d(x.transpose(1, 2), conv.weight, conv.bias, padding=W - 1, groups=x.shape[-1])[..., :T]
    y = y.transpose(1, 2)
    return F.silu(y) if conv.activation is not None else y


def recurrence(q, k, v, log_decay, beta=None):
    """o_t = K^−1/2 · S_tᵀ q_t with S_t = D_t S_{t−1} + k_t v_tᵀ (beta None), or the delta rule
    S_t = P + β_t k_t (v_t − Pᵀ k_t)ᵀ, P = D_t S_{t−1}; D_t = diag(exp log_decay_t) ([B, T, H, K])."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = S * log_decay[:, t].exp()[..., None]
        kt, vt = k[:, t], v[:, t]
        if beta is None:
            S = S + kt[..., None] * vt[..., None, :]
        else:
            err = vt - torch.einsum("bhkv,bhk->bhv", S, kt)
            S = S + beta[:, t][..., None, None] * kt[..., None] * err[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * K ** -0.5)
    return torch.stack(out, 1)


def l2(x):
    return x / (x.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()


def gated_norm(norm, o, g, gate=F.silu):
    return F.rms_norm(o, (o.shape[-1],), norm.weight, norm.eps) * gate(g)


def gla_formula(layer, x):
    B, T, _ = x.shape
    q, k, v = layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)
    if layer.use_short_conv:
        q, k, v = conv_formula(layer.q_conv1d, q), conv_formula(layer.k_conv1d, k), conv_formula(layer.v_conv1d, v)
    gk = F.logsigmoid(layer.gk_proj(x)) / layer.gate_logit_normalizer
    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    o = recurrence(q.view(B, T, H, K), k.view(B, T, H, K), v.view(B, T, H, V), gk.view(B, T, H, K))
    g = layer.g_proj(x).view(B, T, H, V)
    return layer.o_proj(gated_norm(layer.g_norm_swish_gate, o, g).flatten(-2))


def deltanet_formula(layer, x):
    B, T, _ = x.shape
    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    q = l2(conv_formula(layer.q_conv1d, layer.q_proj(x)).view(B, T, H, K))
    k = l2(conv_formula(layer.k_conv1d, layer.k_proj(x)).view(B, T, H, K))
    v = conv_formula(layer.v_conv1d, layer.v_proj(x)).view(B, T, H, V)
    beta = layer.b_proj(x).sigmoid()
    o = recurrence(q, k, v, torch.zeros_like(q), beta)
    if layer.use_gate:
        return layer.o_proj(gated_norm(layer.o_norm, o, layer.g_proj(x).view(B, T, H, V)).flatten(-2))
    return layer.o_proj(layer.o_norm(o).flatten(-2))


def gated_deltanet_formula(layer, x, gate=F.silu):
    B, T, _ = x.shape
    H, HV, K, V = layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    group = HV // H
    q = l2(conv_formula(layer.q_conv1d, layer.q_proj(x)).view(B, T, H, K)).repeat_interleave(group, 2)
    k = l2(conv_formula(layer.k_conv1d, layer.k_proj(x)).view(B, T, H, K)).repeat_interleave(group, 2)
    v = conv_formula(layer.v_conv1d, layer.v_proj(x)).view(B, T, HV, V)
    g = -layer.A_log.exp() * F.softplus(layer.a_proj(x) + layer.dt_bias)  # [B, T, HV]
    o = recurrence(q, k, v, g[..., None].expand(B, T, HV, K), layer.b_proj(x).sigmoid())
    return layer.o_proj(gated_norm(layer.o_norm, o, layer.g_proj(x).view(B, T, HV, V), gate).flatten(-2))


LAYERS = {
    "gla": (lambda **kw: GatedLinearAttention(hidden_size=32, num_heads=2, **kw), gla_formula),
    "gla_conv": (lambda **kw: GatedLinearAttention(hidden_size=32, num_heads=2, use_short_conv=True, **kw),
                 gla_formula),
    "deltanet": (lambda **kw: DeltaNet(hidden_size=32, num_heads=2, **kw), deltanet_formula),
    "deltanet_gate": (lambda **kw: DeltaNet(hidden_size=32, num_heads=2, use_gate=True, **kw), deltanet_formula),
    "gated_deltanet": (lambda **kw: GatedDeltaNet(hidden_size=32, head_dim=8, num_heads=2, num_v_heads=4, **kw),
                       gated_deltanet_formula),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("T", [5, 100])
def test_forward_is_the_formula(name, T):
    torch.manual_seed(0)
    make, formula = LAYERS[name]
    layer = make(layer_idx=0).eval()
    x = torch.randn(2, T, 32)
    o, attentions, cache = layer(x)
    assert attentions is None and cache is None and o.shape == x.shape
    torch.testing.assert_close(o, formula(layer, x), atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(LAYERS))
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(1)
    layer = LAYERS[name][0](layer_idx=0).train()
    layer(torch.randn(2, 70, 32))[0].square().sum().backward()
    missing = [n for n, p in layer.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no finite gradient for {missing}"


@pytest.mark.parametrize("name", list(LAYERS))
def test_decoding_with_a_cache_is_the_whole_sequence_at_constant_memory(name):
    torch.manual_seed(2)
    make = LAYERS[name][0]
    layers = [make(layer_idx=i).eval() for i in range(2)]
    x = torch.randn(2, 80, 32)
    whole = layers[1](layers[0](x)[0])[0]
    cache = Cache()
    h = x[:, :70]
    for layer in layers:  # prefill 70 tokens (the chunked path), then 10 one by one (the recurrent one)
        h, _, cache = layer(h, past_key_values=cache, use_cache=True)
    outputs, sizes = [h], set()
    for t in range(70, 80):
        h = x[:, t:t + 1]
        for layer in layers:
            h, _, cache = layer(h, past_key_values=cache, use_cache=True)
        outputs.append(h)
        entry = cache[1]
        sizes.add((tuple(entry["recurrent_state"].shape),
                   None if entry["conv_state"] is None else tuple(entry["conv_state"][0].shape)))
    torch.testing.assert_close(torch.cat(outputs, 1), whole, atol=5e-5, rtol=1e-4)
    assert len(sizes) == 1 and len(cache) == 2 and cache.get_seq_length(0) == 80


@pytest.mark.parametrize("name", ["gla_conv", "deltanet", "gated_deltanet"])
def test_padding_mask_is_each_sequence_alone(name):
    """attention_mask [B, T] (left padding): each sequence's real tokens give what they give alone."""
    torch.manual_seed(3)
    assert_left_padding_is_each_sequence_alone(LAYERS[name][0](layer_idx=0).eval(), 9, 4)


def assert_left_padding_is_each_sequence_alone(layer, T, pad):
    """Two rows of T tokens, the second's first pad tokens padding: each row's real tokens give what they
    give alone, and the padding gives zeros."""
    x = torch.randn(2, T, layer.hidden_size)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, :pad] = 0
    o = layer(x, attention_mask=mask)[0]
    torch.testing.assert_close(o[0], layer(x[:1])[0][0], atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(o[1, pad:], layer(x[1:, pad:])[0][0], atol=5e-5, rtol=1e-4)
    assert (o[1, :pad] == 0).all()


def test_parameter_names_are_flas():
    """The state_dict keys of fla's layers (so their checkpoints load)."""
    gdn = GatedDeltaNet(hidden_size=32, head_dim=8, num_heads=2)
    assert sorted(gdn.state_dict()) == sorted(
        ["q_proj.weight", "k_proj.weight", "v_proj.weight", "a_proj.weight", "b_proj.weight", "A_log", "dt_bias",
         "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight", "g_proj.weight", "o_norm.weight",
         "o_proj.weight"])
    gla = GatedLinearAttention(hidden_size=32, num_heads=2)
    assert sorted(gla.state_dict()) == sorted(
        ["q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight", "gk_proj.0.weight", "gk_proj.1.weight",
         "gk_proj.1.bias", "o_proj.weight", "g_norm_swish_gate.weight"])
    dn = DeltaNet(hidden_size=32, num_heads=2)
    assert sorted(dn.state_dict()) == sorted(
        ["q_proj.weight", "k_proj.weight", "v_proj.weight", "b_proj.weight", "q_conv1d.weight", "k_conv1d.weight",
         "v_conv1d.weight", "o_norm.weight", "o_proj.weight"])


def test_short_convolution_cache_and_packed_sequences():
    torch.manual_seed(4)
    conv = ShortConvolution(6, 4)
    x = torch.randn(1, 11, 6)
    y, cache = conv(x, output_final_state=True)
    torch.testing.assert_close(y, conv_formula(conv, x))
    assert cache.shape == (1, 6, 4)
    torch.testing.assert_close(cache, x[0, -4:].T[None])
    cu = torch.tensor([0, 3, 11])
    y_packed, _ = conv(x, cu_seqlens=cu)
    torch.testing.assert_close(y_packed[:, :3], conv_formula(conv, x[:, :3]))
    torch.testing.assert_close(y_packed[:, 3:], conv_formula(conv, x[:, 3:]))
    norm = FusedRMSNormGated(6)
    g = torch.randn(1, 11, 6)
    torch.testing.assert_close(norm(x, g), gated_norm(norm, x, g))


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="mode: expected"):
        GatedLinearAttention(hidden_size=32, num_heads=2, mode="parallel")
    with pytest.raises(ValueError, match="qk_norm: expected"):
        DeltaNet(hidden_size=32, num_heads=2, qk_norm="none")
    with pytest.raises(ValueError, match="num_v_heads: 3 is not a multiple"):
        GatedDeltaNet(hidden_size=32, head_dim=8, num_heads=2, num_v_heads=3)
    with pytest.raises(ValueError, match="expand_v"):
        GatedDeltaNet(hidden_size=32, head_dim=8, num_heads=2, expand_v=0.3)
    with pytest.raises(ValueError, match="layer_idx"):
        DeltaNet(hidden_size=32, num_heads=2)(torch.randn(1, 3, 32), past_key_values=Cache())
    with pytest.raises(ValueError, match="attention_mask"):
        DeltaNet(hidden_size=32, num_heads=2)(torch.randn(1, 3, 32), attention_mask=torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match="feature_map: 'hedgehog'"):
        GatedLinearAttention(hidden_size=32, num_heads=2, feature_map="hedgehog")
