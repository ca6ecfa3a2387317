"""layout=: torch's [B, H, N, D] ("bhnd") and linattn's [B, N, H, D] ("bnhd") are both taken, and a
4-d call into linattn.torch without a layout is an error, never a guess (issue 15)."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt


def bhnd_inputs(seed=0, B=2, H=3, Nq=7, Nk=11, D=5, E=4):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g) for n, d in ((Nq, D), (Nk, D), (Nk, E))]


@pytest.mark.parametrize("name", ["softmax_attention", "linear_attention"])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_bhnd_is_bnhd_transposed(name, causal):
    q, k, v = bhnd_inputs()
    fn = getattr(lt, name)
    got = fn(q, k, v, layout="bhnd", causal=causal)
    want = fn(*(x.transpose(1, 2) for x in (q, k, v)), layout="bnhd", causal=causal).transpose(1, 2)
    assert got.shape == (2, 3, 7, 4)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["softmax_attention", "linear_attention"])
def test_torch_gradients_in_bhnd(name):
    q, k, v = (x.double().requires_grad_() for x in bhnd_inputs(1, B=1, H=2, Nq=4, Nk=6, D=3, E=2))
    fn = getattr(lt, name)
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, layout="bhnd", causal=True), (q, k, v))


@pytest.mark.parametrize("name", ["softmax_attention", "linear_attention", "linformer_attention"])
def test_torch_without_layout_is_an_error_naming_both(name):
    q, k, v = bhnd_inputs()
    extra = (torch.rand(5, 11),) if name == "linformer_attention" else ()
    with pytest.raises(TypeError, match=r'layout: expected "bhnd" \(torch\'s \[B, H, N, D\]\) or "bnhd"'):
        getattr(lt, name)(q, k, v, *extra)
    with pytest.raises(ValueError, match=r"layout: expected \"bhnd\" or \"bnhd\", got 'bthd'"):
        getattr(lt, name)(q, k, v, *extra, layout="bthd")


@pytest.mark.parametrize("name", ["softmax_attention", "linear_attention"])
def test_numpy_layouts(name):
    q, k, v = (x.numpy() for x in bhnd_inputs(2))
    dout = np.random.default_rng(0).standard_normal((2, 3, 7, 4)).astype(np.float32)
    fn, backward = getattr(linattn, name), getattr(linattn, name + "_backward")
    got = fn(q, k, v, layout="bhnd", causal=True)
    want = fn(*(x.swapaxes(1, 2) for x in (q, k, v)), causal=True).swapaxes(1, 2)  # bnhd is the default
    assert got.shape == (2, 3, 7, 4) and np.array_equal(got, want)
    grads = backward(q, k, v, dout, layout="bhnd", causal=True)
    wants = backward(*(x.swapaxes(1, 2) for x in (q, k, v, dout)), causal=True)
    for g, w, x in zip(grads, wants, (q, k, v)):
        assert g.shape == x.shape and np.array_equal(g, w.swapaxes(1, 2))
    with pytest.raises(ValueError, match="layout"):
        fn(q, k, v, layout="BHND")
