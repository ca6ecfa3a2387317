"""linattn.integrations.causal_conv1d's flash-linear-attention forms (what linattn.integrations.fla puts in
place of fla.modules' Triton causal_conv1d / causal_conv1d_update): x [B, T, D], a cache of the last W
inputs [N, D, W] per sequence, packed sequences (cu_seqlens, an empty one) kept apart, a residual; against
the convolution written out in fp64 from its definition, and decoding token by token against the whole."""

import pytest

torch = pytest.importorskip("torch", reason="the convolution takes torch tensors")

from linattn.integrations.causal_conv1d import fla_causal_conv1d, fla_causal_conv1d_update  # noqa: E402


def definition(x, weight, bias, state):
    """One sequence x [T, D] after the W inputs of state [D, W]: y_t = bias + Σ_j weight[:, j] x_{t−W+1+j}."""
    W = weight.shape[1]
    whole = torch.cat([state.T, x], dim=0)  # [W + T, D]
    return torch.stack([bias + sum(weight[:, j] * whole[W + t - (W - 1) + j] for j in range(W))
                        for t in range(x.shape[0])]) if x.shape[0] else x


def test_packed_with_states_and_residual():
    generator = torch.Generator().manual_seed(0)
    D, W, lengths = 5, 4, [3, 0, 1, 7]
    T = sum(lengths)
    x = torch.randn(1, T, D, dtype=torch.float64, generator=generator)
    weight, bias = torch.randn(D, W, dtype=torch.float64, generator=generator), torch.randn(D, dtype=torch.float64)
    states = torch.randn(len(lengths), D, W, dtype=torch.float64, generator=generator)
    residual = torch.randn(1, T, D, dtype=torch.float64, generator=generator)
    cu = torch.tensor([0, 3, 3, 4, 11])
    y, final = fla_causal_conv1d(x, weight, bias, residual=residual, initial_state=states, output_final_state=True,
                                 cu_seqlens=cu)
    for n in range(len(lengths)):
        a, b = int(cu[n]), int(cu[n + 1])
        want = definition(x[0, a:b], weight, bias, states[n]) + residual[0, a:b]
        assert torch.allclose(y[0, a:b], want, atol=1e-12), f"sequence {n}"
        assert torch.equal(final[n], torch.cat([states[n], x[0, a:b].T], dim=1)[:, -W:]), f"final state {n}"
    silu, none = fla_causal_conv1d(x, weight, None, activation="silu", cu_seqlens=cu)
    assert none is None
    plain = fla_causal_conv1d(x, weight, None, cu_seqlens=cu)[0]
    assert torch.allclose(silu, torch.nn.functional.silu(plain), atol=1e-12)
    with pytest.raises(ValueError, match="the batch size must be 1 with cu_seqlens"):
        fla_causal_conv1d(x.expand(2, T, D), weight, cu_seqlens=cu)


def test_decoding_token_by_token_equals_the_whole():
    generator = torch.Generator().manual_seed(1)
    B, D, W, T = 2, 3, 4, 6
    x = torch.randn(B, T, D, dtype=torch.float64, generator=generator)
    weight, bias = torch.randn(D, W, dtype=torch.float64, generator=generator), torch.randn(D, dtype=torch.float64)
    whole, _ = fla_causal_conv1d(x, weight, bias, activation="swish")
    head, cache = fla_causal_conv1d(x[:, :2], weight, bias, activation="swish", output_final_state=True)
    steps = []
    for t in range(2, T):
        y, same = fla_causal_conv1d_update(x[:, t:t + 1], cache, weight=weight, bias=bias, activation="swish")
        assert same is cache and y.shape == (B, 1, D)
        steps.append(y)
    assert torch.allclose(torch.cat([head, *steps], dim=1), whole, atol=1e-12)
    assert torch.equal(cache, x[:, -W:].transpose(1, 2))
