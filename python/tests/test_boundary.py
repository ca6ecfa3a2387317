"""The bindings and the one boundary check (include/linattn/boundary.hpp): every output is a fresh array
that shares no memory with an input; inputs that alias each other, broadcast inputs and the q, k, v
slices of one fused buffer are accepted and read in place; bad arguments are refused by the library's
check, whose message names the operator and the argument, for the fp32 operators and the fp64 oracle
alike."""

import numpy as np
import pytest

import linattn

B, N, H, D = 2, 19, 3, 8


def data(seed, shape=(B, N, H, D), dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def linformer_e(n=N, p=5):
    return np.full((H, p, n), 1.0 / n, dtype=np.float32)


# name -> (forward(q, k, v) returning out, backward(q, k, v, dout) returning gradients)
OPERATORS = {
    "softmax": (linattn.softmax_attention, linattn.softmax_attention_backward),
    "softmax_causal": (lambda q, k, v: linattn.softmax_attention(q, k, v, causal=True),
                       lambda q, k, v, d: linattn.softmax_attention_backward(q, k, v, d, causal=True)),
    "linear": (linattn.linear_attention, linattn.linear_attention_backward),
    "linear_causal": (lambda q, k, v: linattn.linear_attention(q, k, v, causal=True),
                      lambda q, k, v, d: linattn.linear_attention_backward(q, k, v, d, causal=True)),
    "linformer": (lambda q, k, v: linattn.linformer_attention(q, k, v, linformer_e()),
                  lambda q, k, v, d: linattn.linformer_attention_backward(q, k, v, linformer_e(), None, d)),
}


@pytest.mark.parametrize("name", OPERATORS)
def test_outputs_share_no_memory_with_inputs(name):
    forward, backward = OPERATORS[name]
    q, k, v, dout = data(1), data(2), data(3), data(4)
    out = forward(q, k, v)
    grads = [g for g in backward(q, k, v, dout) if g is not None]
    for o in [out, *grads]:
        for x in (q, k, v, dout):
            assert not np.shares_memory(o, x)
    for i, a in enumerate(grads):
        for b in grads[i + 1:]:
            assert not np.shares_memory(a, b)


@pytest.mark.parametrize("name", OPERATORS)
def test_aliased_and_broadcast_inputs_are_accepted(name):
    forward, backward = OPERATORS[name]
    x = data(5)
    # q, k and v all one array: inputs may share memory.
    same = forward(x, x, x)
    np.testing.assert_array_equal(same, forward(x.copy(), x.copy(), x.copy()))
    # k and v broadcast over the heads (head stride 0).
    k = np.broadcast_to(data(6, (B, N, 1, D)), (B, N, H, D))
    assert linattn._linattn._view_info(k)[1][2] == 0
    np.testing.assert_array_equal(forward(x, k, k), forward(x, np.ascontiguousarray(k), np.ascontiguousarray(k)))
    for got, want in zip(backward(x, k, k, x), backward(x, k.copy(), k.copy(), x.copy())):
        if got is not None:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", OPERATORS)
def test_fused_qkv_slices_are_read_in_place(name):
    forward, _ = OPERATORS[name]
    fused = data(7, (B, N, 3, H, D))  # a fused QKV projection's output
    q, k, v = (fused[:, :, i] for i in range(3))
    for part in (q, k, v):
        assert not linattn._linattn._view_info(part)[2]  # not copied
    np.testing.assert_array_equal(forward(q, k, v), forward(q.copy(), k.copy(), v.copy()))


def test_recurrent_state_step_with_aliased_inputs():
    state, separate = linattn.RecurrentState(B, H, D, D), linattn.RecurrentState(B, H, D, D)
    x = data(8, (B, H, D))
    out = state.step(x, x, x)
    assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, separate.step(x.copy(), x.copy(), x.copy()))


@pytest.mark.parametrize("fn, op", [
    (linattn.softmax_attention, "linattn::softmax_attention:"),
    (linattn.linear_attention, "linattn::linear_attention:"),
    (lambda q, k, v: linattn.linformer_attention(q, k, v, linformer_e()), "linattn::linformer_attention:"),
])
def test_fp32_errors_come_from_the_library_check(fn, op):
    q, k, v = data(1), data(2), data(3)
    with pytest.raises(ValueError, match="^" + op + r" v.extent\[2\] \(heads\) is 2, expected 3 \(q's heads\)$"):
        fn(q, k, v[:, :, :2])


@pytest.mark.parametrize("fn, op", [
    (linattn.reference.softmax_attention, "linattn::reference::softmax_attention_forward:"),
    (linattn.reference.linear_attention, "linattn::reference::linear_attention_forward:"),
    (lambda q, k, v, **kw: linattn.reference.linformer_attention(q, k, v, linformer_e().astype(np.float64), **kw),
     "linattn::reference::linformer_attention_forward:"),
])
def test_oracle_errors_come_from_the_oracles_own_check(fn, op):
    q, k, v = (data(i, dtype=np.float64) for i in (1, 2, 3))
    with pytest.raises(ValueError, match="^" + op + r" v.extent\[1\] \(sequence\) is 18, expected 19"):
        fn(q, k, v[:, :18])
    with pytest.raises(ValueError, match="^" + op + r" key_lengths\[1\] is 20, expected a value in \[0, 19\]"):
        fn(q, k, v, key_lengths=[3, 20])


def test_oracle_backward_checks_dout():
    q, k, v = (data(i, dtype=np.float64) for i in (1, 2, 3))
    with pytest.raises(ValueError, match=r"^linattn::reference::softmax_attention_backward: dout.extent\[3\] \(dim\) "
                                         r"is 7, expected 8 \(v's value dim\)$"):
        linattn.reference.softmax_attention_backward(q, k, v, q[..., :7].copy())
