"""linattn.integrations.packed_attention: full attention over packed sequences as transformers' attention
functions take it (query [1, Hq, T, D], grouped key heads, cu_seqlens), through linattn's softmax with
cu_seqlens, against softmax written out in fp64 per sequence: forward and backward, lengths 1, 0, 63, 65,
97, odd head dims, value dims other than the key's, bf16; and when it must not take the kernel (another
mask, dropout, a window, float64) the per-sequence path, also against the definition."""

import pytest

torch = pytest.importorskip("torch", reason="packed attention runs on torch tensors")

import linattn.torch as linattn_torch  # noqa: E402
from linattn.integrations.packed_attention import offsets_of, packed_attention  # noqa: E402


def definition(query, key, value, cu, scaling, causal, mask=None):
    """fp64, one sequence at a time, from the formula; [1, T, Hq, E]."""
    q, k, v = query.double(), key.double(), value.double()
    groups = q.shape[1] // k.shape[1]
    out = q.new_zeros(1, q.shape[2], q.shape[1], v.shape[-1])
    for n in range(len(cu) - 1):
        a, b = int(cu[n]), int(cu[n + 1])
        for h in range(q.shape[1]):
            scores = scaling * q[0, h, a:b] @ k[0, h // groups, a:b].T
            allowed = torch.ones_like(scores, dtype=torch.bool)
            if causal:
                allowed = allowed.tril()
            if mask is not None:
                allowed &= mask[0, 0, a:b, a:b]
            weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
            out[0, a:b, h] = weights @ v[0, h // groups, a:b]
    return out


def tensors(lengths, hq, hk, d, e, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    make = lambda h, dim: (torch.randn(1, h, T, dim, generator=generator) * 2).to(dtype).requires_grad_()  # noqa: E731
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return make(hq, d), make(hk, d), make(hk, e), cu


def grads(out, inputs, seed=9):
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    return torch.autograd.grad((out.double() * weights).sum(), inputs)


def close(got, want, tol, what):
    err = (got.double() - want.double()).abs().max().item()
    assert err <= tol * max(want.abs().max().item(), 1e-3), f"{what}: max error {err:.3g}"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths, hq, hk, d, e", [([63, 1, 0, 65], 4, 2, 7, 5), ([97], 3, 3, 16, 16),
                                                   ([1, 1, 1], 6, 1, 9, 4)])
def test_kernel_against_the_definition(monkeypatch, causal, lengths, hq, hk, d, e):
    calls = []
    real = linattn_torch.softmax_attention
    monkeypatch.setattr(linattn_torch, "softmax_attention", lambda *a, **k: calls.append(k) or real(*a, **k))
    query, key, value, cu = tensors(lengths, hq, hk, d, e, torch.float32, seed=len(lengths))
    mask = None
    if causal:  # as transformers gives it: the packed mask itself, [1, 1, T, T]
        T = int(cu[-1])
        ids = torch.bucketize(torch.arange(T), cu[1:].long(), right=True)
        mask = ((ids[:, None] == ids[None, :]) & torch.ones(T, T, dtype=torch.bool).tril())[None, None]
    out = packed_attention(query, key, value, mask, cu, cu.long(), scaling=0.3, causal=causal)
    assert len(calls) == 1 and torch.equal(calls[0]["cu_seqlens"], cu.long()), "linattn's kernel did not run"
    want = definition(query, key, value, cu, 0.3, causal)
    close(out, want, 2e-6, "forward")
    inputs = (query, key, value)
    got_grads, want_grads = grads(out, inputs), grads(want, inputs)
    for name, g, w in zip("qkv", got_grads, want_grads):
        close(g, w, 1e-5, f"d{name}")


def test_kernel_in_bfloat16():
    query, key, value, cu = tensors([5, 0, 12], 4, 2, 8, 8, torch.bfloat16, seed=3)
    out = packed_attention(query, key, value, None, cu, cu, scaling=0.35, causal=True)
    assert out.dtype == torch.bfloat16
    close(out, definition(query, key, value, cu, 0.35, True), 2e-2, "bf16 forward")
    dq = grads(out, (query,))[0]
    close(dq, grads(definition(query, key, value, cu, 0.35, True), (query,))[0], 5e-2, "bf16 dq")


@pytest.mark.parametrize("case", ["top-k mask", "dropout", "window", "float64"])
def test_per_sequence_where_the_kernel_cannot_say_it(monkeypatch, case):
    """The calls the kernel's packing cannot express go per sequence through torch's SDPA, and are right."""
    monkeypatch.setattr(linattn_torch, "softmax_attention", lambda *a, **k: pytest.fail("the kernel ran"))
    dtype = torch.float64 if case == "float64" else torch.float32
    query, key, value, cu = tensors([4, 7], 2, 1, 8, 8, dtype, seed=5)
    T, mask, options = 11, None, {}
    if case == "top-k mask":
        mask = torch.rand(1, 1, T, T, generator=torch.Generator().manual_seed(1)) > 0.3
        mask |= torch.eye(T, dtype=torch.bool)
    elif case == "dropout":
        options["dropout"] = 0.5
    elif case == "window":
        options["window"] = 2
    out = packed_attention(query, key, value, mask, cu, cu, scaling=0.5, causal=True, **options)
    if case == "dropout":
        assert out.shape == (1, T, 2, 8)
        return
    if case == "window":
        ids = torch.bucketize(torch.arange(T), cu[1:].long(), right=True)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        mask = ((ids[:, None] == ids[None, :]) & (j > i - 2))[None, None]
    close(out, definition(query, key, value, cu, 0.5, True, mask), 1e-6, case)


def test_offsets_of_sequence_indices():
    assert offsets_of(torch.tensor([[0, 0, 1, 2, 2, 2]])).tolist() == [0, 2, 3, 6]
    assert offsets_of(torch.tensor([[3]])).tolist() == [0, 1]
