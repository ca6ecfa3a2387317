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
