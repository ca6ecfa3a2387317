"""Query groups through the decayed family's bindings (ONNX LinearAttention's GQA, opset 27, in linattn's
[B, T, H, D] layout): q [B, T, R·H, K] over k [B, T, H, K] and v [B, T, H, V], query head i reading the state
of k/v head i // R; g [B, T, H] or [B, T, H, K], g_gamma [H] and the states [N, H, K, V] per k/v head; out
[B, T, R·H, V]. decayed_attention (fp32 and the fp64 oracle), decayed_recurrent_forward, decayed_recurrent and
decayed_step against a numpy recurrence written here from the formula and against the call with k, v, g and the
states repeated per query head; the delta rule's forwards (chunked, token by token, the step) against its
recurrence; the fp64 oracle's backward against R ungrouped passes and the float32 chunked backward against it;
the refusals (the delta rule's backward, the DPLR delta rule, gates and states of q's heads) naming the heads."""

import numpy as np
import pytest

from linattn import _linattn

DECAYS = ["linear", "retention", "lightning", "simple_gla", "gla"]


def problem(decay, B, T, H, R, K, V, seed, N=None):
    """q, k, v, g (or None), g_gamma (or None) and an initial state [N, H, K, V], float32."""
    rng = np.random.default_rng(seed)
    N = B if N is None else N
    q = rng.standard_normal((B, T, R * H, K), dtype=np.float32)
    k = rng.standard_normal((B, T, H, K), dtype=np.float32)
    v = rng.standard_normal((B, T, H, V), dtype=np.float32)
    g = {"simple_gla": -rng.random((B, T, H), dtype=np.float32),
         "gla": -rng.random((B, T, H, K), dtype=np.float32)}.get(decay)
    g_gamma = -0.5 * rng.random(H, dtype=np.float32) if decay == "lightning" else None
    h0 = 0.5 * rng.standard_normal((N, H, K, V), dtype=np.float32)
    return q, k, v, g, g_gamma, h0


def log_decay(decay, g, g_gamma, b, t, h, K):
    """[K] log decays of k/v head h at token t of batch row b."""
    if decay == "retention":
        return np.full(K, np.log1p(-2.0 ** (-5.0 - h)))
    if decay == "lightning":
        return np.full(K, float(g_gamma[h]))
    if decay == "simple_gla":
        return np.full(K, float(g[b, t, h]))
    if decay == "gla":
        return g[b, t, h].astype(np.float64)
    return np.zeros(K)


def naive(decay, q, k, v, g, g_gamma, h0, cu_seqlens=None):
    """(out, final) in fp64: S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ per k/v head, o_t[i] = K^-½ S_tᵀ q_t[i] for
    each query head i of the head's group."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    R, scale = HQ // H, float(np.float32(K ** -0.5))  # the operators scale by an fp32 K^-½
    spans = [(b, 0, T) for b in range(B)] if cu_seqlens is None else \
        [(0, int(s), int(e)) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    out, final = np.zeros((B, T, HQ, V)), np.zeros((len(spans), H, K, V))
    for n, (b, start, end) in enumerate(spans):
        for h in range(H):
            S = h0[n, h].astype(np.float64)
            for t in range(start, end):
                a = np.exp(log_decay(decay, g, g_gamma, b, t, h, K))
                S = a[:, None] * S + np.outer(k[b, t, h], v[b, t, h])
                for r in range(R):
                    out[b, t, h * R + r] = scale * q[b, t, h * R + r] @ S
            final[n, h] = S
    return out, final


def relative(got, want):
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("T,R", [(1, 2), (65, 2), (33, 3)])
def test_every_forward_matches_the_recurrence(decay, T, R):
    q, k, v, g, g_gamma, h0 = problem(decay, 2, T, 2, R, 7, 5, seed=T + R)
    want, want_final = naive(decay, q, k, v, g, g_gamma, h0)
    options = dict(decay=decay, g_gamma=g_gamma, initial_state=h0, output_final_state=True)
    o, final = _linattn.decayed_attention(q, k, v, g, chunk_size=16, **options)
    assert o.shape == (2, T, 2 * R, 5) and final.shape == h0.shape
    assert relative(o, want) < 2e-4 and relative(final, want_final) < 2e-4
    f64 = lambda x: None if x is None else x.astype(np.float64)
    o64, final64 = _linattn.reference.decayed_attention(
        f64(q), f64(k), f64(v), f64(g), decay=decay, g_gamma=g_gamma, initial_state=f64(h0), output_final_state=True)
    assert relative(o64, want) < 1e-12 and relative(final64, want_final) < 1e-12
    o, final = _linattn.decayed_recurrent_forward(q, k, v, g, **options)
    assert relative(o, want) < 2e-5 and relative(final, want_final) < 2e-5
    state = h0.copy()
    o = _linattn.decayed_recurrent(q, k, v, g, state, decay=decay, g_gamma=g_gamma)
    assert relative(o, want) < 2e-5 and relative(state, want_final) < 2e-5


@pytest.mark.parametrize("decay", DECAYS)
def test_packed_sequences_with_an_empty_one(decay):
    cu = np.array([0, 30, 30, 50], dtype=np.int64)
    q, k, v, g, g_gamma, h0 = problem(decay, 1, 50, 2, 3, 6, 4, seed=9, N=3)
    want, want_final = naive(decay, q, k, v, g, g_gamma, h0, cu)
    options = dict(decay=decay, g_gamma=g_gamma, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    for o, final in (_linattn.decayed_attention(q, k, v, g, chunk_size=16, **options),
                     _linattn.decayed_recurrent_forward(q, k, v, g, **options)):
        assert relative(o, want) < 2e-4 and relative(final, want_final) < 2e-4


@pytest.mark.parametrize("decay", ["linear", "lightning", "simple_gla", "gla"])
def test_equals_the_call_with_keys_values_gates_and_states_repeated(decay):
    # retention decays each head by its index: its repeated call is another problem (the recurrence checks it).
    R = 2
    q, k, v, g, g_gamma, h0 = problem(decay, 2, 70, 3, R, 8, 6, seed=4)
    rep = lambda x: None if x is None else np.ascontiguousarray(np.repeat(x, R, axis=2 if x.ndim > 1 else 0))
    o, final = _linattn.decayed_attention(q, k, v, g, decay=decay, g_gamma=g_gamma, initial_state=h0,
                                          output_final_state=True, chunk_size=16)
    o_rep, final_rep = _linattn.decayed_attention(q, rep(k), rep(v), rep(g), decay=decay, g_gamma=rep(g_gamma),
                                                  initial_state=np.repeat(h0, R, axis=1), output_final_state=True,
                                                  chunk_size=16)
    np.testing.assert_array_equal(o, o_rep)
    for r in range(R):  # every query head's final state is its k/v head's
        np.testing.assert_array_equal(final, final_rep[:, r::R])


@pytest.mark.parametrize("decay", DECAYS)
def test_decode_steps_give_the_forward(decay):
    q, k, v, g, g_gamma, h0 = problem(decay, 2, 6, 2, 3, 5, 4, seed=5)
    want, want_final = naive(decay, q, k, v, g, g_gamma, h0)
    state = h0.copy()
    for t in range(q.shape[1]):
        o = _linattn.decayed_step(q[:, t], k[:, t], v[:, t], None if g is None else g[:, t], state, decay=decay,
                                  g_gamma=g_gamma)
        assert o.shape == (2, 6, 4)
        assert relative(o, want[:, t]) < 2e-5
    assert relative(state, want_final) < 2e-5


@pytest.mark.parametrize("decay", DECAYS)
def test_oracle_backward_is_the_sum_of_the_query_heads_passes(decay):
    # The fp64 oracle's backward with query groups against R ungrouped oracle passes, one per query head r of the
    # groups (q[:, :, r::R], dout[:, :, r::R]): dq theirs, dk, dv, dg and dinitial_state their sums (dfinal_state
    # in the first pass alone).
    R = 3
    q, k, v, g, g_gamma, h0 = problem(decay, 1, 20, 2, R, 5, 4, seed=11)
    f64 = lambda x: None if x is None else x.astype(np.float64)
    q, k, v, g, h0 = map(f64, (q, k, v, g, h0))
    rng = np.random.default_rng(12)
    dout, dfinal = rng.standard_normal((1, 20, 2 * R, 4)), rng.standard_normal(h0.shape)
    options = dict(decay=decay, g_gamma=g_gamma, initial_state=h0)
    grads = _linattn.reference.decayed_attention_backward(q, k, v, g, dout, dfinal, **options)
    assert grads[0].shape == q.shape and grads[1].shape == k.shape and grads[4].shape == h0.shape
    want = [np.zeros_like(x) for x in (q, k, v)] + [None if g is None else np.zeros_like(g), np.zeros_like(h0)]
    for r in range(R):
        d = _linattn.reference.decayed_attention_backward(q[:, :, r::R], k, v, g, dout[:, :, r::R],
                                                          dfinal if r == 0 else None, **options)
        want[0][:, :, r::R] = d[0]
        for i in range(1, 5):
            if want[i] is not None:
                want[i] += d[i]
    for got, expected in zip(grads, want):
        if expected is None:
            assert got is None
        else:
            assert relative(got, expected) < 1e-12


@pytest.mark.parametrize("decay", DECAYS)
def test_float32_backward_matches_the_oracle(decay):
    # The chunked backward takes query groups natively: dq of q's R·H heads, dk, dv, dg and dinitial_state of H.
    q, k, v, g, g_gamma, h0 = problem(decay, 2, 45, 2, 3, 6, 5, seed=13)
    rng = np.random.default_rng(14)
    dout = rng.standard_normal((2, 45, 6, 5), dtype=np.float32)
    dfinal = rng.standard_normal(h0.shape, dtype=np.float32)
    options = dict(decay=decay, g_gamma=g_gamma, initial_state=h0)
    got = _linattn.decayed_attention_backward(q, k, v, g, dout, dfinal, chunk_size=16, **options)
    f64 = lambda x: None if x is None else x.astype(np.float64)
    want = _linattn.reference.decayed_attention_backward(f64(q), f64(k), f64(v), f64(g), f64(dout), f64(dfinal),
                                                         decay=decay, g_gamma=g_gamma, initial_state=f64(h0))
    assert got[0].shape == q.shape and got[1].shape == k.shape
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert relative(a, b) < 2e-4


def l2norm(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def naive_delta(q, k, v, beta, g, h0, gate, use_qk_l2norm):
    """(out, final) in fp64 of the delta rule per k/v head: P = diag(exp g_t) S, S = P + β_t k_t (v_t − Pᵀ k_t)ᵀ,
    read out by each query head of the head's group."""
    q, k, v, beta = (x.astype(np.float64) for x in (q, k, v, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    R, scale = HQ // H, float(np.float32(K ** -0.5))
    out, final = np.zeros((B, T, HQ, V)), np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = h0[b, h].astype(np.float64)
            for t in range(T):
                a = np.zeros(K) if gate == "delta_rule" else np.broadcast_to(g[b, t, h].astype(np.float64), (K,))
                P = np.exp(a)[:, None] * S
                S = P + beta[b, t, h] * np.outer(k[b, t, h], v[b, t, h] - P.T @ k[b, t, h])
                for r in range(R):
                    out[b, t, h * R + r] = scale * q[b, t, h * R + r] @ S
            final[b, h] = S
    return out, final


@pytest.mark.parametrize("gate", ["delta_rule", "gated_delta_rule", "kda"])
@pytest.mark.parametrize("T,R,norm", [(1, 2, True), (65, 2, True), (33, 3, False)])
def test_delta_rule_forwards_match_the_recurrence(gate, T, R, norm):
    B, H, K, V = 2, 2, 6, 5
    rng = np.random.default_rng(T)
    q = rng.standard_normal((B, T, R * H, K), dtype=np.float32)
    k = rng.standard_normal((B, T, H, K), dtype=np.float32) * (1 if norm else 0.3)
    v = rng.standard_normal((B, T, H, V), dtype=np.float32)
    beta = rng.random((B, T, H), dtype=np.float32)
    g = {"gated_delta_rule": -rng.random((B, T, H), dtype=np.float32),
         "kda": -rng.random((B, T, H, K), dtype=np.float32)}.get(gate)
    h0 = 0.5 * rng.standard_normal((B, H, K, V), dtype=np.float32)
    want, want_final = naive_delta(q, k, v, beta, g, h0, gate, norm)
    options = dict(gate=gate, initial_state=h0, output_final_state=True, use_qk_l2norm=norm)
    for o, final in (_linattn.delta_rule(q, k, v, beta, g, chunk_size=16, **options),
                     _linattn.delta_rule_recurrent_forward(q, k, v, beta, g, **options)):
        assert o.shape == (B, T, R * H, V) and final.shape == h0.shape
        assert relative(o, want) < 2e-4 and relative(final, want_final) < 2e-4
    state = h0.copy()
    for t in range(T):
        o = _linattn.delta_rule_step(q[:, t], k[:, t], v[:, t], beta[:, t], None if g is None else g[:, t], state,
                                     gate=gate, use_qk_l2norm=norm)
        assert relative(o, want[:, t]) < 2e-4
    assert relative(state, want_final) < 2e-4


def test_refusals_name_the_heads():
    q, k, v, g, _, _ = problem("simple_gla", 1, 5, 2, 2, 4, 3, seed=6)
    dout = np.ones((1, 5, 4, 3), np.float32)
    beta = np.ones((1, 5, 2), np.float32)
    with pytest.raises(ValueError, match=r"q has 4 heads over k's and v's 2 \(query groups\), which this backward"):
        _linattn.delta_rule_backward(q, k, v, beta, g, dout, gate="gated_delta_rule")
    a, b, gk = (np.full(k.shape, -0.1, np.float32) for _ in range(3))
    with pytest.raises(ValueError, match=r"q.extent\[2\] \(heads\) is 4, expected k's 2 heads: query heads grouped "
                                         r"over the key/value heads .* native only in the forwards of the decayed"):
        _linattn.dplr_delta_rule(q, k, v, a, b, gk)
    with pytest.raises(ValueError, match=r"g.extent\[2\] \(heads\) is 4, expected 2 \(k's and v's heads\)"):
        _linattn.decayed_attention(q, k, v, np.zeros((1, 5, 4), np.float32), decay="simple_gla")
    with pytest.raises(ValueError, match=r"state: expected shape \[N, H, K, V\] = \[1, 2, 4, 3\], got \[1, 4, 4, 3\]"):
        _linattn.decayed_recurrent(q, k, v, g, np.zeros((1, 4, 4, 3), np.float32), decay="simple_gla")
