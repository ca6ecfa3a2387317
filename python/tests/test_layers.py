"""linattn.layers.LinearAttention: fla.layers' arguments and return, the layer's formula, and
token-by-token decoding with a Cache equal to the whole sequence at constant memory."""

import pytest
import torch
import torch.nn.functional as F

from linattn.layers import Cache, LinearAttention


def formula(layer, x):
    """The layer written out: projections, φ, o_t = scale · Σ_{s ≤ t} (φq_t · φk_s) v_s, RMSNorm, o_proj."""
    B, T, _ = x.shape
    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    q = layer.feature_map_q(layer.q_proj(x).view(B, T, H, K))
    k = layer.feature_map_k(layer.k_proj(x).view(B, T, -1, K).repeat_interleave(layer.num_kv_groups, 2))
    v = layer.v_proj(x).view(B, T, -1, V).repeat_interleave(layer.num_kv_groups, 2)
    scores = torch.einsum("bthk,bshk->bhts", q, k) * K ** -0.5 * torch.ones(T, T).tril()
    o = torch.einsum("bhts,bshv->bthv", scores, v)
    return layer.o_proj(layer.norm(o).flatten(-2))


@pytest.mark.parametrize("feature_map", ["elementwise_product", "elu", "relu", "identity"])
@pytest.mark.parametrize("T", [5, 100])
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_forward_is_the_formula(feature_map, T, num_kv_heads):
    torch.manual_seed(0)
    layer = LinearAttention(hidden_size=32, num_heads=4, num_kv_heads=num_kv_heads, feature_map=feature_map,
                            layer_idx=0)
    x = torch.randn(2, T, 32)
    o, attentions, cache = layer(x)
    assert attentions is None and cache is None and o.shape == x.shape
    torch.testing.assert_close(o, formula(layer, x), atol=2e-5, rtol=1e-4)
    o.sum().backward()
    assert all(p.grad is not None for p in layer.q_proj.parameters())


def test_decoding_with_a_cache_is_the_whole_sequence_at_constant_memory():
    torch.manual_seed(1)
    layers = [LinearAttention(hidden_size=32, num_heads=4, feature_map="elu", layer_idx=i) for i in range(2)]
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
        sizes.add(tuple(cache[1]["recurrent_state"].shape))
    torch.testing.assert_close(torch.cat(outputs, 1), whole, atol=2e-5, rtol=1e-4)
    assert sizes == {(2, 4, 8, 8)} and len(cache) == 2 and cache.get_seq_length(0) == 80


def test_refusals_name_the_argument():
    with pytest.raises(NotImplementedError, match="feature_map: 'hedgehog'"):
        LinearAttention(hidden_size=32, num_heads=4, feature_map="hedgehog")
    with pytest.raises(ValueError, match="mode: expected"):
        LinearAttention(hidden_size=32, num_heads=4, mode="parallel")
    with pytest.raises(ValueError, match="layer_idx"):
        LinearAttention(hidden_size=32, num_heads=4)(torch.randn(1, 3, 32), past_key_values=Cache())
