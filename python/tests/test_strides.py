"""Strided float32 arrays are read in place: the operator's view points into the caller's memory with
the caller's strides. Only strides a view cannot express (negative, not whole floats, misaligned) are
copied first."""

import numpy as np
import torch

import linattn
import linattn.torch as lt
from linattn_test_support import layout_array, rel_err, torch_softmax

B, N, H, D = 2, 65, 3, 17


def data(seed=0, shape=(B, N, H, D)):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_transposed_array_is_viewed_without_copy():
    bhnd = np.ascontiguousarray(data().transpose(0, 2, 1, 3))  # memory [B, H, N, D]
    x = bhnd.transpose(0, 2, 1, 3)  # viewed as [B, N, H, D]
    address, strides, copied = linattn._linattn._view_info(x)
    assert not copied
    assert address == bhnd.ctypes.data
    assert tuple(strides) == (H * N * D, D, N * D, 1)


def test_padded_and_broadcast_arrays_are_viewed_without_copy():
    x = layout_array(data(), "padded")  # NaN in the gaps: reading one would show
    address, strides, copied = linattn._linattn._view_info(x)
    assert not copied and address == x.ctypes.data
    assert tuple(strides) == tuple(s // 4 for s in x.strides)
    shared = np.broadcast_to(data(shape=(1, N, H, D)), (B, N, H, D))  # the same keys for every batch
    address, strides, copied = linattn._linattn._view_info(shared)
    assert not copied and strides[0] == 0


def test_strided_inputs_give_the_contiguous_result():
    q, k, v = data(1), data(2), data(3)
    want = linattn.softmax_attention(q, k, v)
    for layout in ("bhnd", "padded"):
        got = linattn.softmax_attention(*(layout_array(x, layout) for x in (q, k, v)))
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    shared = np.broadcast_to(k[:1], k.shape)
    got = linattn.linear_attention(q, shared, np.broadcast_to(v[:1], v.shape))
    np.testing.assert_allclose(got, linattn.linear_attention(q, np.array(shared), np.array(v[:1].repeat(B, 0))),
                               rtol=0, atol=1e-6)


def test_inexpressible_strides_are_copied():
    q, k, v = data(1), data(2), data(3)
    flipped = q[:, ::-1]  # negative stride
    assert linattn._linattn._view_info(flipped)[2]
    np.testing.assert_allclose(linattn.softmax_attention(flipped, k, v),
                               linattn.softmax_attention(np.ascontiguousarray(flipped), k, v), rtol=0, atol=1e-6)
    raw = np.zeros(q.nbytes + 1, dtype=np.uint8)
    misaligned = np.frombuffer(raw.data, dtype=np.float32, count=q.size, offset=1).reshape(q.shape)
    misaligned[...] = q
    assert linattn._linattn._view_info(misaligned)[2]
    np.testing.assert_array_equal(linattn.linear_attention(misaligned, k, v), linattn.linear_attention(q, k, v))
    odd = np.lib.stride_tricks.as_strided(raw[:64].view(np.float32), shape=(1, 3, 1, 2), strides=(0, 6, 0, 4))
    assert linattn._linattn._view_info(odd)[2]
    assert linattn.softmax_attention(odd, odd, odd).shape == (1, 3, 1, 2)


def test_read_only_inputs_and_fresh_outputs():
    q, k, v = data(1), data(2), data(3)
    for x in (q, k, v):
        x.flags.writeable = False
    out = linattn.linear_attention(q, k, v)
    assert out.flags.writeable and out.flags.owndata and out.flags.c_contiguous and out.shape == (B, N, H, D)
    first = out.copy()
    out[...] = 0  # the caller's own array: no other result shares it
    assert np.array_equal(linattn.linear_attention(q, k, v), first)


def test_torch_strided_tensors_are_read_in_place():
    base = torch.from_numpy(data()).transpose(1, 2).contiguous()  # [B, H, N, D]
    q = base.transpose(1, 2).requires_grad_()  # a [B, N, H, D] view of it
    array = lt._array(q)
    address, strides, copied = linattn._linattn._view_info(array)
    assert not copied and address == base.data_ptr() and tuple(strides) == tuple(q.stride())
    out = lt.softmax_attention(q, q, q, layout="bnhd")
    want = torch_softmax(*(q.detach().double(),) * 3)
    assert rel_err(out.detach(), want) < 2e-6
