"""Packed sequences (cu_seqlens) in linattn.softmax_attention / linear_attention and their backwards:
each sequence of a packed call gets what it gets alone (bitwise against the fast call per sequence,
and within fp32 of the fp64 oracle run per sequence), over lengths 1, 0 (empty), 63, 65, 97, causal
and not; the oracle's own cu_seqlens agrees; every refusal names the argument. Then the decode steps,
linattn.decayed_step and linattn.delta_rule_step, token by token against the token-by-token forward."""

import numpy as np
import pytest

import linattn
from linattn import _linattn
from linattn_test_support import rel_err

LENGTHS = [1, 0, 63, 65, 97]
CU = np.cumsum([0] + LENGTHS).astype(np.int64)
T = int(CU[-1])
H, D, E = 2, 5, 3


def packed_inputs(seed=0):
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-1, 1, (1, T, H, D)).astype(np.float32) for _ in range(2))
    v, dout = (rng.uniform(-1, 1, (1, T, H, E)).astype(np.float32) for _ in range(2))
    return q, k, v, dout


def sequences():
    return [(int(a), int(b)) for a, b in zip(CU[:-1], CU[1:]) if b > a]


OPS = {
    "softmax": (linattn.softmax_attention, linattn.softmax_attention_backward, linattn.reference.softmax_attention,
                linattn.reference.softmax_attention_backward, {}),
    "linear": (linattn.linear_attention, linattn.linear_attention_backward, linattn.reference.linear_attention,
               linattn.reference.linear_attention_backward, {"feature_map": "elu"}),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_packed_is_each_sequence_alone(op, causal):
    forward, backward, oracle, oracle_backward, extra = OPS[op]
    q, k, v, dout = packed_inputs()
    options = dict(causal=causal, **extra)
    out = forward(q, k, v, cu_seqlens=CU, **options)
    grads = backward(q, k, v, dout, cu_seqlens=CU, **options)
    packed_oracle = oracle(*(x.astype(np.float64) for x in (q, k, v)), cu_seqlens=CU, **options)
    # the oracle per sequence, put back in place: measured at the scale of the whole tensor (a sequence
    # of one token has dq, dk near zero, whose own scale would measure only their cancellation)
    want_out = np.zeros(out.shape)
    want_grads = [np.zeros(g.shape) for g in grads]
    for a, b in sequences():
        s = slice(a, b)
        assert np.array_equal(out[:, s], forward(q[:, s], k[:, s], v[:, s], **options)), (a, b)
        for g, g_alone in zip(grads, backward(q[:, s], k[:, s], v[:, s], dout[:, s], **options)):
            assert np.array_equal(g[:, s], g_alone), (a, b)
        doubles = [x[:, s].astype(np.float64) for x in (q, k, v, dout)]
        want_out[:, s] = oracle(*doubles[:3], **options)
        for w, w_alone in zip(want_grads, oracle_backward(*doubles, **options)):
            w[:, s] = w_alone
    assert rel_err(out, want_out) < 1e-5
    assert rel_err(packed_oracle, want_out) < 1e-12
    for g, w in zip(grads, want_grads):
        assert rel_err(g, w) < 1e-5


def test_packed_gradients_against_the_packed_oracle():
    q, k, v, dout = packed_inputs(1)
    for forward_backward, oracle_backward in ((linattn.softmax_attention_backward,
                                               linattn.reference.softmax_attention_backward),
                                              (linattn.linear_attention_backward,
                                               linattn.reference.linear_attention_backward)):
        got = forward_backward(q, k, v, dout, causal=True, cu_seqlens=CU)
        want = oracle_backward(*(x.astype(np.float64) for x in (q, k, v, dout)), causal=True, cu_seqlens=CU)
        for g, w in zip(got, want):
            assert rel_err(g, w) < 1e-5


def test_cu_seqlens_takes_any_integer_array():
    q, k, v, _ = packed_inputs(2)
    want = linattn.softmax_attention(q, k, v, cu_seqlens=CU)
    for cu in (CU.astype(np.int32), list(CU), tuple(int(c) for c in CU)):
        assert np.array_equal(linattn.softmax_attention(q, k, v, cu_seqlens=cu), want)


@pytest.mark.parametrize("op", ["softmax_attention", "linear_attention", "softmax_attention_backward",
                                "linear_attention_backward"])
@pytest.mark.parametrize("bad, words", [
    (dict(batch=2), "q's batch is 2 with options.cu_seqlens, expected 1"),
    (dict(keys=7), "k's sequence is 7 with options.cu_seqlens, expected q's 6"),
    (dict(key_lengths=[6]), "options.key_lengths and options.cu_seqlens are both given"),
    (dict(cu=[0]), "options.cu_seqlens has 1 values, expected N + 1"),
    (dict(cu=[1, 6]), "options.cu_seqlens[0] is 1, expected 0"),
    (dict(cu=[0, 4, 3, 6]), "options.cu_seqlens[2] is 3, below options.cu_seqlens[1] = 4"),
    (dict(cu=[0, 2, 5]), "options.cu_seqlens[2] is 5, expected T = 6"),
])
def test_every_refusal_names_the_argument(op, bad, words):
    B, Nk = bad.get("batch", 1), bad.get("keys", 6)
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (B, 6, H, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, Nk, H, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, Nk, H, E)).astype(np.float32)
    args = (q, k, v) + ((rng.uniform(-1, 1, (B, 6, H, E)).astype(np.float32),) if "backward" in op else ())
    kwargs = dict(cu_seqlens=np.array(bad.get("cu", [0, 2, 2, 6])), key_lengths=bad.get("key_lengths"))
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")):
        getattr(linattn, op)(*args, **kwargs)


def test_cu_seqlens_must_be_integers():
    q, k, v, _ = packed_inputs()
    with pytest.raises(TypeError, match="cu_seqlens: expected integers"):
        linattn.softmax_attention(q, k, v, cu_seqlens=CU.astype(np.float64))
    with pytest.raises(ValueError, match="cu_seqlens: expected 1 dim"):
        linattn.linear_attention(q, k, v, cu_seqlens=CU[None])


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("op", ["softmax_attention", "linear_attention"])
def test_torch_autograd_packs(op, dtype):
    """linattn.torch's ops take cu_seqlens (torch.library operators; the fp64 oracle for float64, the
    half-precision operators for bfloat16): the packed output and its gradients are those of each
    sequence run alone (bitwise; within bfloat16's rounding for bfloat16, where a sequence alone may
    take the native half path and the packed call the widened fp32 one)."""
    torch = pytest.importorskip("torch")
    import linattn.torch as lt

    q, k, v, dout = (torch.from_numpy(x).to(getattr(torch, dtype)) for x in packed_inputs(4))
    attend = getattr(lt, op)
    packed = [x.clone().requires_grad_() for x in (q, k, v)]
    out = attend(*packed, layout="bnhd", causal=True, cu_seqlens=torch.from_numpy(CU))
    out.backward(dout)
    for a, b in sequences():
        alone = [x[:, a:b].clone().requires_grad_() for x in (q, k, v)]
        out_alone = attend(*alone, layout="bnhd", causal=True)
        out_alone.backward(dout[:, a:b])
        same = torch.equal if dtype != "bfloat16" else (
            lambda x, y: torch.allclose(x.float(), y.float(), rtol=2e-2, atol=2e-2))
        assert same(out[:, a:b].detach(), out_alone.detach()), (a, b)
        for x, x_alone in zip(packed, alone):
            assert same(x.grad[:, a:b], x_alone.grad), (a, b)


# --- decode steps ---------------------------------------------------------------------------------

B, K, V, STEPS = 2, 6, 4, 5
DECAYS = [("linear", None), ("retention", None), ("lightning", None), ("simple_gla", (B, STEPS, H)),
          ("simple_gla", (B, STEPS, H, 1)), ("gla", (B, STEPS, H, K))]


def step_inputs(seed, gate_shape):
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-1, 1, (B, STEPS, H, K)).astype(np.float32) for _ in range(2))
    v = rng.uniform(-1, 1, (B, STEPS, H, V)).astype(np.float32)
    g = None if gate_shape is None else rng.uniform(-0.5, 0, gate_shape).astype(np.float32)
    state = rng.uniform(-1, 1, (B, H, K, V)).astype(np.float32)
    return q, k, v, g, state


def token(x, t):
    return None if x is None else np.ascontiguousarray(x[:, t])


@pytest.mark.parametrize("decay, gate_shape", DECAYS, ids=lambda x: str(x))
def test_decayed_step_is_the_token_by_token_forward(decay, gate_shape):
    q, k, v, g, state0 = step_inputs(4, gate_shape)
    options = dict(decay=decay, g_gamma=np.array([-0.1, -0.3], np.float32) if decay == "lightning" else None)
    whole_state = state0.copy()
    whole = _linattn.decayed_recurrent(q, k, v, g, whole_state, **options)
    state = state0.copy()
    for t in range(STEPS):
        o = linattn.decayed_step(token(q, t), token(k, t), token(v, t), token(g, t), state, **options)
        assert o.shape == (B, H, V) and o.dtype == np.float32
        np.testing.assert_allclose(o, whole[:, t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, whole_state, rtol=1e-5, atol=1e-6)
    # and against the fp64 oracle from the same initial state
    doubles = [None if x is None else x.astype(np.float64) for x in (q, k, v, g)]
    out64, final64 = linattn.reference.decayed_attention(*doubles, initial_state=state0.astype(np.float64),
                                                         output_final_state=True, **options)
    assert rel_err(state, final64) < 1e-5
    assert rel_err(o, out64[:, -1]) < 1e-5


@pytest.mark.parametrize("use_qk_l2norm", [False, True])
@pytest.mark.parametrize("gate, gate_shape", [("delta_rule", None), ("gated_delta_rule", (B, STEPS, H)),
                                              ("kda", (B, STEPS, H, K))])
def test_delta_rule_step_is_the_token_by_token_forward(gate, gate_shape, use_qk_l2norm):
    q, k, v, g, state0 = step_inputs(5, gate_shape)
    beta = np.random.default_rng(6).uniform(0.1, 0.9, (B, STEPS, H)).astype(np.float32)
    if not use_qk_l2norm:  # unit keys keep each update a contraction
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
    options = dict(gate=gate, use_qk_l2norm=use_qk_l2norm)
    whole_state = state0.copy()
    whole = _linattn.delta_rule_recurrent(q, k, v, beta, g, whole_state, **options)
    state = state0.copy()
    for t in range(STEPS):
        o = linattn.delta_rule_step(token(q, t), token(k, t), token(v, t), token(beta, t), token(g, t), state,
                                    **options)
        assert o.shape == (B, H, V) and o.dtype == np.float32
        np.testing.assert_allclose(o, whole[:, t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, whole_state, rtol=1e-5, atol=1e-6)
    doubles = [None if x is None else x.astype(np.float64) for x in (q, k, v, beta, g)]
    out64, final64 = linattn.reference.delta_rule(*doubles, initial_state=state0.astype(np.float64),
                                                  output_final_state=True, **options)
    assert rel_err(state, final64) < 1e-5
    assert rel_err(o, out64[:, -1]) < 1e-5


def test_step_gates_with_and_without_their_unit_axis_agree():
    q, k, v, g, state0 = step_inputs(7, (B, STEPS, H))
    beta = np.full((B, STEPS, H), 0.5, np.float32)
    s2, s3 = state0.copy(), state0.copy()
    o2 = linattn.delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g[:, 0], s2, gate="gated_delta_rule")
    o3 = linattn.delta_rule_step(q[:, 0], k[:, 0], v[:, 0], beta[:, 0, :, None], g[:, 0, :, None], s3,
                                 gate="gated_delta_rule")
    assert np.array_equal(o2, o3) and np.array_equal(s2, s3)


def test_step_refusals_name_the_argument():
    q, k, v, g, state = step_inputs(8, (B, STEPS, H, K))
    q0, k0, v0, g0 = q[:, 0], k[:, 0], v[:, 0], g[:, 0]
    with pytest.raises(ValueError, match=r"state: expected shape \[N, H, K, V\] = \[2, 2, 6, 4\]"):
        linattn.decayed_step(q0, k0, v0, g0, state[:, :1].copy(), decay="gla")
    with pytest.raises(ValueError, match="state: expected a C-contiguous array"):
        linattn.decayed_step(q0, k0, v0, g0, np.asfortranarray(state), decay="gla")
    with pytest.raises(TypeError, match="state: expected float32"):
        linattn.decayed_step(q0, k0, v0, g0, state.astype(np.float64), decay="gla")
    with pytest.raises(ValueError, match=r"q: expected 3 dims \[B, H, K\]"):
        linattn.decayed_step(q, k0, v0, g0, state, decay="gla")
    with pytest.raises(ValueError, match="g"):
        linattn.decayed_step(q0, k0, v0, g0[:, :, :3], state, decay="gla")
    with pytest.raises(ValueError, match="decay"):
        linattn.decayed_step(q0, k0, v0, g0, state, decay="nope")
    with pytest.raises(TypeError, match="beta: expected a float32 array"):
        linattn.delta_rule_step(q0, k0, v0, None, g0, state, gate="kda")
    with pytest.raises(ValueError, match="gate"):
        linattn.delta_rule_step(q0, k0, v0, g0[..., 0], g0, state, gate="nope")
