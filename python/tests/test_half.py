"""numpy float16, torch.float16 and torch.bfloat16 through linattn's half-precision operators: outputs
of the input dtype, autograd through linattn.torch, and the accuracy criterion of
docs/half-precision.md (error vs the float64 oracle at most 2x that of the float32 operator on the
same rounded inputs with its output rounded to the storage type)."""

import numpy as np
import pytest

import linattn

torch = pytest.importorskip("torch")
import linattn.torch as lt  # noqa: E402


def _rel(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


def _inputs(dtype, shape_q=(2, 63, 3, 17), nk=65, e=9, seed=0):
    rng = np.random.default_rng(seed)
    b, nq, h, d = shape_q
    q = rng.uniform(-1, 1, (b, nq, h, d))
    k = rng.uniform(-1, 1, (b, nk, h, d))
    v = rng.uniform(-1, 1, (b, nk, h, e))
    return [torch.tensor(x).to(dtype) for x in (q, k, v)]


def _criterion(name, got, base32, want, dtype):
    """got: the half call's result; base32: the float32 operator's result on the same rounded inputs."""
    base = base32.to(dtype).to(torch.float64).numpy()
    e_half, e_base = _rel(got.to(torch.float64).numpy(), want), _rel(base, want)
    assert e_half <= 2 * e_base, f"{name}: half {e_half:.3e} vs baseline {e_base:.3e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["softmax", "linear"])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_half_forward_backward(dtype, op, causal):
    q, k, v = _inputs(dtype)
    fn = lt.softmax_attention if op == "softmax" else lt.linear_attention
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = fn(*leaves, layout="bnhd", causal=causal)
    assert out.dtype == dtype and out.shape == (2, 63, 3, 9)
    dout = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape).to(dtype)
    out.backward(dout)
    for x in leaves:
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
    # The same rounded inputs in float32 (the baseline) and float64 (the oracle).
    f32 = [x.detach().float().requires_grad_() for x in (q, k, v)]
    f64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    o32, o64 = fn(*f32, layout="bnhd", causal=causal), fn(*f64, layout="bnhd", causal=causal)
    o32.backward(dout.float())
    o64.backward(dout.double())
    _criterion("out", out.detach(), o32.detach(), o64.detach().numpy(), dtype)
    for name, a, b, c in zip(("dq", "dk", "dv"), leaves, f32, f64):
        _criterion(name, a.grad, b.grad, c.grad.numpy(), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_half_bhnd_and_strided(dtype):
    q, k, v = (x.permute(0, 2, 1, 3) for x in _inputs(dtype, (1, 5, 2, 16), nk=97, e=16))  # [B, H, N, D] views
    out = lt.softmax_attention(q, k, v, layout="bhnd", causal=True)  # 5 queries: the native decode path
    assert out.dtype == dtype and out.shape == (1, 2, 5, 16)
    want = lt.softmax_attention(q.double(), k.double(), v.double(), layout="bhnd", causal=True)
    base = lt.softmax_attention(q.float(), k.float(), v.float(), layout="bhnd", causal=True)
    _criterion("decode out", out, base, want.numpy(), dtype)


def test_numpy_float16():
    q, k, v = (x.numpy() for x in _inputs(torch.float16, (1, 65, 2, 8), nk=97, e=8))
    for name in ("softmax_attention", "linear_attention"):
        out = getattr(linattn, name)(q, k, v)
        assert out.dtype == np.float16 and out.shape == (1, 65, 2, 8)
        want = getattr(linattn.reference, name)(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
        base = getattr(linattn, name)(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
        assert _rel(out, want) <= 2 * _rel(base.astype(np.float16), want)
        grads = getattr(linattn, name + "_backward")(q, k, v, np.ones_like(out))
        assert all(g.dtype == np.float16 and g.shape == x.shape for g, x in zip(grads, (q, k, v)))
    # bhnd layout: a transposed view, no copy
    out = linattn.softmax_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                                    layout="bhnd")
    assert out.dtype == np.float16 and out.shape == (1, 2, 65, 8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shared", [False, True])
def test_torch_half_linformer(dtype, shared):
    """Linformer on half q, k, v with float32 projections (learned ones in the model's dtype are cast):
    out in q's dtype, gradients to q, k, v in it and to E, F in theirs, the criterion against fp64."""
    q, k, v = _inputs(dtype, (2, 63, 2, 17), nk=65, e=9, seed=4)
    rng = np.random.default_rng(5)
    E = torch.tensor(rng.uniform(-0.3, 0.3, (2, 16, 80)), dtype=torch.float32)
    F = None if shared else torch.tensor(rng.uniform(-0.3, 0.3, (2, 16, 80)), dtype=torch.float32)
    dout = torch.linspace(-1, 1, 2 * 63 * 2 * 9, dtype=torch.float64).reshape(2, 63, 2, 9)

    def run(cast):
        leaves = [cast(x).requires_grad_() for x in (q, k, v)]
        proj = [None if x is None else (x.double() if cast(q).dtype == torch.float64 else x.clone()).requires_grad_()
                for x in (E, F)]
        out = lt.linformer_attention(*leaves, proj[0], proj[1], layout="bnhd")
        out.backward(dout.to(out.dtype))
        return out.detach(), [x.grad for x in leaves], [None if x is None else x.grad for x in proj]

    out, grads, pgrads = run(lambda x: x.clone())
    o32, g32, p32 = run(lambda x: x.detach().float())
    o64, g64, p64 = run(lambda x: x.detach().double())
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    assert pgrads[0].dtype == torch.float32 and (shared or pgrads[1].dtype == torch.float32)
    _criterion("out", out, o32, o64.numpy(), dtype)
    for name, a, b, c in zip(("dq", "dk", "dv"), grads, g32, g64):
        _criterion(name, a, b, c.numpy(), dtype)
    # The projections' gradients stay float32: compare with the float32 call's within half's precision.
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    for a, c in zip(pgrads, p64):
        if a is not None:
            assert _rel(a.numpy(), c.numpy()) < tol


def test_numpy_float16_linformer():
    q, k, v = (x.numpy() for x in _inputs(torch.float16, (1, 33, 2, 8), nk=40, e=8, seed=6))
    E = np.random.default_rng(7).uniform(-0.3, 0.3, (2, 8, 40)).astype(np.float32)
    out = linattn.linformer_attention(q, k, v, E)
    assert out.dtype == np.float16 and out.shape == (1, 33, 2, 8)
    want = linattn.reference.linformer_attention(*(x.astype(np.float64) for x in (q, k, v)), E.astype(np.float64))
    base = linattn.linformer_attention(*(x.astype(np.float32) for x in (q, k, v)), E)
    assert _rel(out, want) <= 2 * _rel(base.astype(np.float16), want)
    dq, dk, dv, dE, dF = linattn.linformer_attention_backward(q, k, v, E, None, np.ones_like(out))
    assert all(g.dtype == np.float16 for g in (dq, dk, dv)) and dE.dtype == np.float32 and dF is None
    with pytest.raises(TypeError, match="E: expected float32"):
        linattn.linformer_attention(q, k, v, E.astype(np.float16))


def test_mixed_dtypes_are_refused():
    q, k, v = (x.numpy() for x in _inputs(torch.float16, (1, 3, 1, 4), nk=3, e=4))
    with pytest.raises(TypeError, match="k: expected float16"):
        linattn.softmax_attention(q, k.astype(np.float32), v)
    tq, tk, tv = _inputs(torch.bfloat16, (1, 3, 1, 4), nk=3, e=4)
    with pytest.raises(TypeError, match="k: expected torch.bfloat16"):
        lt.linear_attention(tq, tk.half(), tv, layout="bnhd")


def test_loaded_bf16_state_reads_and_steps(tmp_path):
    """A bf16 state file (written by the C++ API: RecurrentState(..., DType::bf16)) loads in Python;
    S reads widened and steps run on it. Written here by hand in the format of docs/state-format.md."""
    import struct
    import zlib

    B, H, M, E = 1, 1, 2, 3
    name = b"elu"
    head = b"LNATSTAT" + struct.pack("<I5qI", 2, B, H, M, E, 4, len(name)) + name + struct.pack("<I", 1)
    head += struct.pack("<I", zlib.crc32(head))
    S = np.arange(6, dtype=np.float32) * 0.5
    body = head + (S.view(np.uint32) >> 16).astype("<u2").tobytes() + np.ones(2, "<f4").tobytes()
    path = tmp_path / "bf16.state"
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    state = linattn.RecurrentState(B, H, M, E)
    state.load(str(path))
    np.testing.assert_array_equal(state.S.reshape(-1), S)
    out = state.step(*(np.full((1, 1, 2), 0.5, np.float32),) * 2, np.ones((1, 1, 3), np.float32))
    assert out.shape == (1, 1, 3) and np.all(np.isfinite(out))


def test_bf16_state_steps_saves_and_loads(tmp_path):
    rng = np.random.default_rng(1)
    B, H, D, E = 2, 3, 16, 8
    s16 = linattn.RecurrentState(B, H, D, E, dtype="bf16")
    s32 = linattn.RecurrentState(B, H, D, E)
    assert s16.dtype == "bf16" and s32.dtype == "f32"
    for _ in range(20):
        q, k = (rng.uniform(-1, 1, (B, H, D)).astype(np.float32) for _ in range(2))
        v = rng.uniform(-1, 1, (B, H, E)).astype(np.float32)
        o16, o32 = s16.step(q, k, v), s32.step(q, k, v)
    assert np.abs(o16 - o32).max() / np.abs(o32).max() < 2e-2  # S held to bf16's 8 bits
    np.testing.assert_array_equal(s16.S.view(np.uint32) & 0xFFFF, 0)  # every element a bf16 value
    s16.save(str(tmp_path / "s.state"))
    t = linattn.RecurrentState(B, H, D, E)
    t.load(str(tmp_path / "s.state"))
    assert t.dtype == "bf16" and t.position == 20
    np.testing.assert_array_equal(t.S, s16.S)
    with pytest.raises(ValueError, match='dtype: expected "f32" or "bf16"'):
        linattn.RecurrentState(1, 1, 4, 4, dtype="f16")
