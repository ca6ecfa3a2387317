"""Defects of linattn.layers, one test each (issue 39 item 3 and issue 42 item 11): GatedDeltaNet's
output_gate_activation, LinearAttention's packed and padded batches, an attention_mask of the wrong
shape, an all-padding row and an empty call (T = 0). The layers are looked up by name, so that every
test runs (and fails) on a tree without the fixes."""

import pytest
import torch
import torch.nn.functional as F

import linattn.layers as layers
from test_recurrent_layers import assert_left_padding_is_each_sequence_alone, gated_deltanet_formula

HIDDEN = 32
MAKERS = {
    "LinearAttention": dict(num_heads=4, feature_map="elu", do_feature_map_norm=True),
    "GatedLinearAttention": dict(num_heads=2, use_short_conv=True),
    "DeltaNet": dict(num_heads=2),
    "GatedDeltaNet": dict(head_dim=8, num_heads=2, num_v_heads=4),
    "KimiDeltaAttention": dict(head_dim=8, num_heads=2, num_v_heads=4),
    "MultiScaleRetention": dict(num_heads=4),
    "SimpleGatedLinearAttention": dict(num_heads=4),
}


def make(name, layer_idx=0, **kw):
    torch.manual_seed(0)
    return getattr(layers, name)(hidden_size=HIDDEN, layer_idx=layer_idx, **{**MAKERS[name], **kw}).eval()


@pytest.mark.parametrize("activation, gate", [("sigmoid", torch.sigmoid), ("silu", F.silu), ("swish", F.silu)])
def test_gated_deltanet_honours_output_gate_activation(activation, gate):
    """fla's output_gate_activation="sigmoid" gates the norm by sigmoid(g), not swish(g) (it was ignored)."""
    layer = make("GatedDeltaNet", output_gate_activation=activation)
    x = torch.randn(2, 9, HIDDEN)
    torch.testing.assert_close(layer(x)[0], gated_deltanet_formula(layer, x, gate), atol=5e-5, rtol=1e-4)


def test_gated_deltanet_refuses_an_output_gate_activation_it_lacks():
    with pytest.raises(ValueError, match="output_gate_activation: expected 'swish', 'silu' or 'sigmoid'"):
        make("GatedDeltaNet", output_gate_activation="relu")


@pytest.mark.parametrize("normalize", [False, True])
def test_linear_attention_packed_sequences_do_not_mix(normalize):
    """cu_seqlens (it was ignored): each packed sequence, an empty one included, gives what it gives alone,
    its final state too."""
    layer = make("LinearAttention", do_feature_map_norm=normalize)
    lengths = [70, 0, 5, 66]
    xs = [torch.randn(1, n, HIDDEN) for n in lengths]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    cache = layers.Cache()
    packed = layer(torch.cat(xs, 1), cu_seqlens=cu, past_key_values=cache, use_cache=True)[0]
    states = cache[0]["recurrent_state"]
    for n, x in enumerate(xs):
        alone_cache = layers.Cache()
        alone = layer(x, past_key_values=alone_cache, use_cache=True)[0] if x.shape[1] else x
        torch.testing.assert_close(packed[:, cu[n]:cu[n + 1]], alone, atol=5e-5, rtol=1e-4)
        if x.shape[1]:
            mine = [s[n:n + 1] for s in states] if normalize else [states[n:n + 1]]
            theirs = alone_cache[0]["recurrent_state"]
            for a, b in zip(mine, theirs if normalize else [theirs]):
                torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)


def test_linear_attention_padding_stays_out_of_the_normaliser():
    """With do_feature_map_norm=True a padded key entered the normaliser Σ k (the values were zeroed, the
    keys were not): a left-padded batch now equals the sequences run unpadded, zeros at the padding."""
    assert_left_padding_is_each_sequence_alone(make("LinearAttention", do_feature_map_norm=True), 80, 13)


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("shape", [(2, 8), (2, 10), (1, 9), (3, 9)])
def test_attention_mask_of_the_wrong_length_is_refused(name, shape):
    """A mask that is not [B, T] (nor, with a cache, [B, cache's tokens + T]) picked the wrong tokens
    (GLA, DeltaNet, GatedDeltaNet) or failed in a broadcast (LinearAttention): now a ValueError naming it."""
    layer = make(name)
    with pytest.raises(ValueError, match=r"attention_mask: expected shape \[batch_size, seq_len\] = \[2, 9\]"):
        layer(torch.randn(2, 9, HIDDEN), attention_mask=torch.ones(shape, dtype=torch.long))


@pytest.mark.parametrize("name", list(MAKERS))
def test_attention_mask_after_a_cache_covers_its_tokens_or_only_this_call(name):
    layer = make(name)
    x = torch.randn(2, 1, HIDDEN)
    for length in (1, 6):  # this call's token, or the cache's 5 and this one
        cache = layers.Cache()
        layer(torch.randn(2, 5, HIDDEN), past_key_values=cache, use_cache=True)
        assert layer(x, attention_mask=torch.ones(2, length), past_key_values=cache)[0].shape == x.shape
    with pytest.raises(ValueError, match=r"= \[2, 1 or 7\] \(this call's 1 tokens after the cache's 6\)"):
        layer(x, attention_mask=torch.ones(2, 5), past_key_values=cache)


@pytest.mark.parametrize("name", list(MAKERS))
def test_all_padding_row_gives_zeros_not_a_crash(name):
    """A row that is all padding (an empty sequence once unpadded) crashed the short convolution."""
    layer = make(name)
    x = torch.randn(3, 7, HIDDEN)
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1] = 0
    mask[2, :3] = 0
    cache = layers.Cache()
    o = layer(x, attention_mask=mask, past_key_values=cache, use_cache=True)[0]
    assert (o[1] == 0).all() and (o[2, :3] == 0).all()
    torch.testing.assert_close(o[0], layer(x[:1])[0][0], atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(o[2, 3:], layer(x[2:, 3:])[0][0], atol=5e-5, rtol=1e-4)
    state = cache[0]["recurrent_state"]
    for part in (state if isinstance(state, tuple) else (state,)):
        assert (part[1] == 0).all()  # the empty row's state is the initial one
    everything_padding = layer(x, attention_mask=torch.zeros(3, 7))[0]
    assert everything_padding.shape == x.shape and (everything_padding == 0).all()


@pytest.mark.parametrize("name", list(MAKERS))
def test_empty_call_gives_an_empty_output_and_keeps_the_cache(name):
    """T = 0 crashed the DeltaNet layers' short convolution (and linattn's operators refuse T = 0): now an
    empty output, and the cache goes on as if the call had not happened."""
    layer = make(name)
    x = torch.randn(2, 6, HIDDEN)
    empty = torch.randn(2, 0, HIDDEN)
    o, _, _ = layer(empty)
    assert o.shape == (2, 0, HIDDEN)
    cache, straight = layers.Cache(), layers.Cache()
    assert layer(empty, past_key_values=cache, use_cache=True)[0].shape == (2, 0, HIDDEN)
    first = layer(x[:, :4], past_key_values=cache, use_cache=True)[0]
    layer(empty, attention_mask=torch.ones(2, 4), past_key_values=cache, use_cache=True)
    rest = layer(x[:, 4:], past_key_values=cache, use_cache=True)[0]
    expected = torch.cat([layer(x[:, :4], past_key_values=straight, use_cache=True)[0],
                          layer(x[:, 4:], past_key_values=straight, use_cache=True)[0]], 1)
    torch.testing.assert_close(torch.cat([first, rest], 1), expected, atol=5e-5, rtol=1e-4)


def test_fused_rms_norm_gated_honours_residual_in_fp32():
    """prenorm returns x + residual in the residual's dtype, float32 with residual_in_fp32 (it was ignored),
    and the output stays in x's dtype."""
    norm = layers.FusedRMSNormGated(8)
    x, g = torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(3, 8, dtype=torch.bfloat16)
    out, summed = norm(x, g, prenorm=True, residual_in_fp32=True)
    assert out.dtype == torch.bfloat16 and summed.dtype == torch.float32
    torch.testing.assert_close(summed, x.float())
    residual = torch.randn(3, 8)
    out, summed = norm(x, g, residual=residual, prenorm=True)
    assert out.dtype == torch.bfloat16 and summed.dtype == torch.float32
    torch.testing.assert_close(summed, x.float() + residual)


def test_cache_keeps_the_states_through_a_call_without_use_cache():
    """As fla's Cache: a call with the cache but use_cache=False counts its tokens and keeps the states
    (they were replaced by None, so the next call started from zeros)."""
    layer = make("DeltaNet")
    cache = layers.Cache()
    layer(torch.randn(2, 5, HIDDEN), past_key_values=cache, use_cache=True)
    kept = cache[0]["recurrent_state"].clone()
    layer(torch.randn(2, 1, HIDDEN), past_key_values=cache, use_cache=False)
    assert torch.equal(cache[0]["recurrent_state"], kept) and cache[0]["conv_state"][0] is not None
    assert cache.get_seq_length(0) == 6


def test_short_convolution_of_no_token_keeps_its_window():
    """T = 0, or an empty packed sequence, crashed F.conv1d (the window was shorter than the kernel)."""
    conv = layers.ShortConvolution(6, 4)
    window = torch.randn(2, 6, 4)
    y, final = conv(torch.randn(2, 0, 6), cache=window, output_final_state=True)
    assert y.shape == (2, 0, 6) and torch.equal(final, window)
    x = torch.randn(1, 5, 6)
    y, final = conv(x, cu_seqlens=torch.tensor([0, 0, 5]), output_final_state=True)
    torch.testing.assert_close(y, conv(x)[0])
    assert (final[0] == 0).all() and torch.equal(final[1, :, -4:], x[0, -4:].T)


def test_gelu_is_flas_tanh_approximation():
    """fla's ACT2FN "gelu" is the tanh approximation (fast_gelu_impl); linattn.layers' table gave torch's exact
    erf gelu, so GatedLinearAttention(gate_fn="gelu") and feature_map="gelu" differed from fla by up to 5e-4."""
    from linattn._layer_parts import activation
    x = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    fla_gelu = x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))
    assert torch.allclose(activation("gelu", "gate_fn")(x), fla_gelu, rtol=0, atol=1e-8)
    for name in ("logsigmoid", "sqrelu"):
        activation(name, "gate_fn")  # fla's ACT2FN has them
    with pytest.raises(ValueError, match="hidden_act"):
        activation("tanh", "hidden_act", ("relu", "gelu"))
