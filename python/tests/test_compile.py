"""linattn's operators are torch.library operators with fake tensors and autograd: torch.compile
(fullgraph=True: a graph break is an error) and torch.export take them as single nodes."""

import pytest
import torch

import linattn.torch as lt

pytestmark = pytest.mark.skipif(not hasattr(torch.library, "custom_op"), reason="torch < 2.4: no custom_op")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 48)

    def forward(self, x):
        B, N, _ = x.shape
        q, k, v = self.proj(x).view(B, N, 3, 2, 8).permute(2, 0, 3, 1, 4)  # each [B, H, N, D]
        soft = lt.scaled_dot_product_attention(q, k, v, is_causal=True)
        lin = lt.linear_attention(q, k, v, layout="bhnd", causal=True)
        return (soft + lin).sum(1)


def step(model, x):
    model.zero_grad()
    out = model(x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def test_compile_fullgraph_forward_and_backward():
    """torch.compile's default backend (inductor): the one a user gets; aot_eager would check the same
    tracing without the code generation, at a CI cost of another compile."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(2, 12, 16)
    want, want_grads = step(model, x)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    got, got_grads = step(compiled, x)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b)


def test_export_keeps_the_operators():
    torch.manual_seed(1)
    model, x = Block(), torch.randn(2, 12, 16)
    exported = torch.export.export(model, (x,))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "linattn.softmax_forward.default" in targets and "linattn.linear_forward.default" in targets
    torch.testing.assert_close(exported.module()(x), model(x))


def test_fake_tensors_give_the_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v = torch.empty(2, 5, 3, 4), torch.empty(2, 7, 3, 4), torch.empty(2, 7, 3, 6)
        out, lse = torch.ops.linattn.softmax_forward(q, k, v, True, None, None)
        lin = torch.ops.linattn.linear_forward(q, k, v, "elu", False, 1e-6, None, 0, None)
    assert out.shape == (2, 5, 3, 6) and lse.shape == (2, 3, 5) and lin.shape == (2, 5, 3, 6)


def test_opcheck():
    q, k, v = (torch.randn(1, 4, 2, 3, requires_grad=True) for _ in range(3))
    torch.library.opcheck(torch.ops.linattn.softmax_forward, (q, k, v, True, None, None))
    torch.library.opcheck(torch.ops.linattn.linear_forward, (q, k, v, "elu", True, 1e-6, None, 0, None))


class LinformerBlock(torch.nn.Module):
    """Linformer with learned projections: E for the keys, and F, or E again for the values."""

    def __init__(self, shared):
        super().__init__()
        self.proj = torch.nn.Linear(16, 48)
        self.E = torch.nn.Parameter(torch.randn(5, 12) / 4)  # [P, N_max], shared by the heads
        self.F = None if shared else torch.nn.Parameter(torch.randn(5, 12) / 4)

    def forward(self, x):
        B, N, _ = x.shape
        q, k, v = self.proj(x).view(B, N, 3, 2, 8).permute(2, 0, 3, 1, 4)  # each [B, H, N, D]
        return lt.linformer_attention(q, k, v, self.E, self.F, layout="bhnd").sum(1)


@pytest.mark.parametrize("shared", [False, True])
def test_compile_fullgraph_linformer(shared):
    """Linformer is an operator too: compiled without a graph break = eager, gradients to E and F
    included (shared: F is E, whose gradient then sums both uses)."""
    torch.manual_seed(2)
    model, x = LinformerBlock(shared), torch.randn(2, 12, 16)
    want, want_grads = step(model, x)
    torch._dynamo.reset()
    got, got_grads = step(torch.compile(model, fullgraph=True), x)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b)
    exported = torch.export.export(model, (x,))
    assert "linattn.linformer_forward.default" in {str(n.target) for n in exported.graph.nodes}


def test_linformer_gradients_against_finite_differences():
    """float64 runs the oracle through the same operator: gradcheck of q, k, v, E and F."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 6, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    E = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    F = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)  # [H, P, N_max]: one per head
    fn = lambda q, k, v, E, F: lt.linformer_attention(q, k, v, E, F, layout="bnhd")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, E, F))
    q32, k32, v32, E32, F32 = (x.detach().float().requires_grad_() for x in (q, k, v, E, F))
    torch.testing.assert_close(fn(q32, k32, v32, E32, F32).double(), fn(q, k, v, E, F), rtol=1e-5, atol=1e-5)
    torch.library.opcheck(torch.ops.linattn.linformer_forward, (q32, k32, v32, E32, F32, None, None))


def fla_layers():
    from linattn.layers import DeltaNet, GatedDeltaNet, GatedLinearAttention

    return [GatedLinearAttention(hidden_size=16, num_heads=2, use_short_conv=True),
            DeltaNet(hidden_size=16, num_heads=2),
            GatedDeltaNet(hidden_size=16, head_dim=4, num_heads=2, num_v_heads=4)]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["GatedLinearAttention", "DeltaNet", "GatedDeltaNet"])
def test_compile_fullgraph_fla_layers(index):
    """fla's layers call linattn::decayed_forward / delta_forward: no graph break, same values and
    gradients (T = 70: the chunked path, training). aot_eager traces as inductor does (dynamo, then
    AOTAutograd) without the code generation that the test above already covers."""
    torch.manual_seed(2)
    layer = fla_layers()[index]
    x = torch.randn(2, 70, 16)

    def run(module):
        module.zero_grad()
        out = module(x)[0]
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in module.parameters()]

    want, want_grads = run(layer)
    torch._dynamo.reset()
    got, got_grads = run(torch.compile(layer, fullgraph=True, backend="aot_eager"))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_export_keeps_the_fla_operators():
    torch.manual_seed(3)
    gla, delta, _ = fla_layers()
    x = torch.randn(1, 70, 16)
    for layer, name in ((gla, "linattn.decayed_forward.default"), (delta, "linattn.delta_forward.default")):
        exported = torch.export.export(layer, (x,))
        targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
        assert name in targets
        torch.testing.assert_close(exported.module()(x)[0], layer(x)[0])


def test_opcheck_fla_operators():
    gen = torch.Generator().manual_seed(4)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).requires_grad_()

    q, k, v = rand(1, 5, 2, 3), rand(1, 5, 2, 3), rand(1, 5, 2, 4)
    g, h0 = (-torch.rand(1, 5, 2, 3, generator=gen)).requires_grad_(), rand(1, 2, 3, 4)
    beta = torch.rand(1, 5, 2, generator=gen).requires_grad_()
    cu = torch.tensor([0, 2, 5])
    torch.library.opcheck(torch.ops.linattn.decayed_forward, (q, k, v, g, h0, None, None, "gla", False, 0.5, 64, True))
    torch.library.opcheck(torch.ops.linattn.delta_forward,
                          (q, k, v, beta, g, h0, None, "kda", True, 0.5, True, 64, True))
    torch.library.opcheck(torch.ops.linattn.delta_forward,
                          (q, k, v, beta, None, None, cu, "delta_rule", False, 0.5, False, 64, False))
