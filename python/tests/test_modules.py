"""linattn.torch's nn.Module layers: projections plus the chosen attention, trainable."""

import pytest
import torch

import linattn.torch as lt
from linattn_test_support import rel_err, torch_linear, torch_softmax


def reference_layer(layer, x, context, key_lengths):
    """The same layer in torch's own math, float64, with the layer's weights."""
    dbl = lambda t: t.detach().double()  # noqa: E731
    lin = lambda p, t: t @ dbl(p.weight).T + dbl(p.bias)  # noqa: E731
    B, Nq, _ = x.shape
    Nk = context.shape[1]
    q = lin(layer.q_proj, dbl(x)).view(B, Nq, layer.n_heads, -1)
    k = lin(layer.k_proj, dbl(context)).view(B, Nk, layer.n_heads, -1)
    v = lin(layer.v_proj, dbl(context)).view(B, Nk, layer.n_heads, -1)
    if layer.attention == "softmax":
        out = torch_softmax(q, k, v, causal=layer.causal, key_lengths=key_lengths)
    else:
        out = torch_linear(q, k, v, causal=layer.causal, key_lengths=key_lengths)
    return lin(layer.out_proj, out.reshape(B, Nq, -1))


@pytest.mark.parametrize("attention", ["linear", "softmax"])
@pytest.mark.parametrize("causal", [False, True])
def test_layer_matches_torch_math(attention, causal):
    torch.manual_seed(0)
    layer = lt.Attention(24, 3, attention=attention, causal=causal)
    x = torch.randn(2, 17, 24)
    context = torch.randn(2, 9, 24)
    for ctx, lengths in ((None, None), (context, torch.tensor([9, 4]))):
        got = layer(x, ctx, key_lengths=lengths)
        want = reference_layer(layer, x, x if ctx is None else ctx, lengths)
        assert got.shape == (2, 17, 24)
        assert rel_err(got.detach(), want) < 1e-5


def test_subclasses_and_gradients():
    torch.manual_seed(1)
    x = torch.randn(3, 11, 16, requires_grad=True)
    for layer in (lt.SoftmaxAttention(16, 4, causal=True), lt.LinearAttention(16, 2, head_dim=5, value_dim=3)):
        layer(x).square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert "attention='linear'" in repr(lt.LinearAttention(16, 2))


def test_a_few_training_steps_reduce_the_loss():
    torch.manual_seed(2)
    layer = lt.LinearAttention(16, 2, causal=True)
    x = torch.randn(4, 20, 16)
    target = torch.roll(x, 1, dims=1)  # copy the previous token
    opt = torch.optim.Adam(layer.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (layer(x) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
