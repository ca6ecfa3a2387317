"""linattn.fla's chunked functions on bfloat16/float16 tensors read them in place through linattn's half-precision
operators (_linattn.half), g in float32 beside them as flash-linear-attention's and transformers' models pass it.
The check: the same call on float32 copies of the same (rounded) values, its o and gradients rounded once to the
inputs' dtypes, must be matched bit for bit (the native path rounds the same float32 sums once), the final state
and the float32 g's gradient exactly; and the half operators must be the ones that ran."""

import pytest

torch = pytest.importorskip("torch")

import linattn.fla as F  # noqa: E402
from linattn import _linattn  # noqa: E402


def _inputs(dtype, B, T, H, HV, K, V, gate_cols, seed, states=None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).to(dtype)
    v = torch.randn(B, T, HV, V, generator=gen).to(dtype)
    beta = torch.rand(B, T, HV, generator=gen).to(dtype)
    g = None
    if gate_cols:
        g = -torch.rand(B, T, HV, *([K] if gate_cols > 1 else []), generator=gen) * 0.7  # float32, not rounded
    h0 = torch.randn(states or B, HV, K, V, generator=gen)
    do = torch.randn(B, T, HV, V, generator=gen).to(dtype)
    dht = torch.randn(states or B, HV, K, V, generator=gen)
    return q, k, v, beta, g, h0, do, dht


def _run(fn, tensors, do, dht, **options):
    """(o, final state, the gradient of each tensor) of fn(*tensors) for loss Σ o·do + Σ final·dht."""
    leaves = [None if x is None else x.detach().clone().requires_grad_() for x in tensors]
    o, final = fn(*leaves, output_final_state=True, **options)
    ((o.float() * do.float()).sum() + (final * dht).sum()).backward()
    return o.detach(), final.detach(), [None if x is None else x.grad for x in leaves]


def _expect_same(native, wide, dtype, what):
    o, final, grads = native
    o32, final32, grads32 = wide
    assert o.dtype == dtype and final.dtype == torch.float32, what
    assert torch.equal(o.view(torch.int16), o32.to(dtype).view(torch.int16)), f"{what}: o"
    assert torch.equal(final, final32), f"{what}: final state"
    for i, (a, b) in enumerate(zip(grads, grads32)):
        assert (a is None) == (b is None), f"{what}: gradient {i}"
        if a is None:
            continue
        if a.dtype == torch.float32:  # g and the initial state: float32, exactly
            assert torch.equal(a, b), f"{what}: gradient {i}"
        else:
            assert a.dtype == dtype, f"{what}: gradient {i} dtype {a.dtype}"
            assert torch.equal(a.view(torch.int16), b.to(dtype).view(torch.int16)), f"{what}: gradient {i}"


def _counting(monkeypatch, names):
    calls = {}
    for name in names:
        original = getattr(_linattn.half, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(_linattn.half, name, counted)
    return calls


_DELTA = [("chunk_delta_rule", 0), ("chunk_gated_delta_rule", 1), ("chunk_kda", 8)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,gate_cols", _DELTA)
@pytest.mark.parametrize("HV,cu", [(2, None), (4, [0, 30, 30, 70])])
def test_delta_rule_half_calls_are_native_and_match_float32(monkeypatch, dtype, name, gate_cols, HV, cu):
    """Grouped value heads (HV = 2·H, whose backward sums dq and dk over a group in float32 copies) and packed
    sequences with an empty one."""
    states = None if cu is None else len(cu) - 1
    B = 2 if cu is None else 1
    q, k, v, beta, g, h0, do, dht = _inputs(dtype, B, 70, 2, HV, 8, 8, gate_cols, seed=gate_cols + HV, states=states)
    fn = getattr(F, name)
    cu_seqlens = None if cu is None else torch.tensor(cu)
    options = dict(use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)
    calls = _counting(monkeypatch, ["delta_rule", "delta_rule_backward"])
    if name == "chunk_delta_rule":
        native = _run(lambda q, k, v, beta, h0, **o: fn(q, k, v, beta, initial_state=h0, **o), (q, k, v, beta, h0),
                      do, dht, **options)
        wide = _run(lambda q, k, v, beta, h0, **o: fn(q.float(), k.float(), v.float(), beta.float(), initial_state=h0,
                                                      **o), (q, k, v, beta, h0), do, dht, **options)
    else:
        native = _run(lambda q, k, v, g, beta, h0, **o: fn(q, k, v, g, beta, initial_state=h0, **o),
                      (q, k, v, g, beta, h0), do, dht, **options)
        wide = _run(lambda q, k, v, g, beta, h0, **o: fn(q.float(), k.float(), v.float(), g, beta.float(),
                                                         initial_state=h0, **o), (q, k, v, g, beta, h0), do, dht,
                    **options)
    assert calls == {"delta_rule": 1, "delta_rule_backward": 1}, calls
    _expect_same(native, wide, dtype, f"{name} HV{HV}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,gate_cols", [("chunk_simple_gla", 1), ("chunk_gla", 8)])
@pytest.mark.parametrize("g_half", [False, True])
def test_decayed_half_calls_are_native_and_match_float32(monkeypatch, dtype, name, gate_cols, g_half):
    q, k, v, _, g, h0, do, dht = _inputs(dtype, 2, 97, 2, 2, 8, 8, gate_cols, seed=5)
    if g_half:
        g = g.to(dtype)
    fn = getattr(F, name)
    calls = _counting(monkeypatch, ["decayed_attention", "decayed_attention_backward"])
    native = _run(lambda q, k, v, g, h0, **o: fn(q, k, v, g, initial_state=h0, **o), (q, k, v, g, h0), do, dht)
    wide = _run(lambda q, k, v, g, h0, **o: fn(q.float(), k.float(), v.float(), g.float(), initial_state=h0, **o),
                (q, k, v, g, h0), do, dht)
    assert calls == {"decayed_attention": 1, "decayed_attention_backward": 1}, calls
    _expect_same(native, wide, dtype, f"{name} g {'half' if g_half else 'float32'}")


def test_half_calls_computing_in_torch_stay_widened(monkeypatch):
    """chunk_linear_attn's normalize (a denominator computed in torch) and the in-kernel sigmoid of beta would
    lose precision computed in half: those calls still run on float32 copies."""
    q, k, v, beta, g, _, _, _ = _inputs(torch.bfloat16, 1, 20, 2, 2, 8, 8, 1, seed=3)
    calls = _counting(monkeypatch, ["decayed_attention", "delta_rule"])
    o, _ = F.chunk_linear_attn(q, k, v)
    o2, _ = F.chunk_gated_delta_rule(q, k, v, g, beta, use_beta_sigmoid_in_kernel=True)
    assert calls == {} and o.dtype == o2.dtype == torch.bfloat16


def test_opcheck_on_half_tensors():
    """The torch operators' fake implementations give the real dtypes: o in q's, states and a float32 g's gradient
    in float32."""
    gen = torch.Generator().manual_seed(4)

    def rand(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen).to(dtype).requires_grad_()

    q, k, v = rand(1, 5, 2, 3), rand(1, 5, 2, 3), rand(1, 5, 2, 4)
    g = (-torch.rand(1, 5, 2, 3, generator=gen)).requires_grad_()
    h0, beta = rand(1, 2, 3, 4, dtype=torch.float32), rand(1, 5, 2)
    torch.library.opcheck(torch.ops.linattn.decayed_forward, (q, k, v, g, h0, None, None, "gla", False, 0.5, 64, True))
    torch.library.opcheck(torch.ops.linattn.delta_forward,
                          (q, k, v, beta, g, h0, None, "kda", False, 0.5, True, 64, True))
