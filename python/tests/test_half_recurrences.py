"""The decayed family and the delta rule in half precision from Python: _linattn.half's decayed_attention,
decayed_attention_backward, decayed_recurrent, decayed_step, delta_rule, delta_rule_backward,
delta_rule_recurrent and delta_rule_step on bf16/f16 bits held as uint16 arrays (states float32), and
linattn.decayed_step / delta_rule_step on numpy float16 arrays.

The check: the inputs are rounded to half once; the float32 operators on those same values (widened) and the
fp64 oracle give the references. A half result must sit within a few of its own rounding steps of the
float32 one (each output is rounded once from fp32 accumulations) and within the same bound of the oracle;
the float32 states must agree with the float32 operator's to fp32 rounding."""

import numpy as np
import pytest

import linattn
from linattn import _linattn

torch = pytest.importorskip("torch")

_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
# The rounding step of each type (relative): 2^-8 for bf16, 2^-11 for f16.
_STEP = {"bf16": 2.0**-8, "f16": 2.0**-11}


def _half(x, dtype):
    """(bits as uint16, the rounded values as float32) of a float32 array."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(_DTYPES[dtype])
    return t.view(torch.int16).numpy().view(np.uint16), t.float().numpy()


def _values(bits, dtype):
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(_DTYPES[dtype]).float().numpy()


def _close(got_bits, want, dtype, what, steps=4.0):
    got = _values(got_bits, dtype)
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    assert err <= steps * _STEP[dtype], f"{what}: relative error {err:.3g} over {steps} rounding steps of {dtype}"


def _problem(B, T, H, K, V, gate_cols, seed=0, HV=None, heads_q=None):
    """q [B, T, heads_q or H, K], k [B, T, H, K], v [B, T, HV or H, V], g (per gate_cols) and beta over v's heads,
    dout like o: float32 values to be rounded."""
    rng = np.random.default_rng(seed)
    HV = HV or H
    hq = heads_q or H
    x = {"q": rng.standard_normal((B, T, hq, K)), "k": rng.standard_normal((B, T, H, K)),
         "v": rng.standard_normal((B, T, HV, V)), "beta": rng.uniform(0.05, 1.0, (B, T, HV)),
         "dout": rng.standard_normal((B, T, max(hq, HV), V))}
    if gate_cols:
        x["g"] = -rng.uniform(0.01, 0.7, (B, T, HV, gate_cols) if gate_cols > 1 else (B, T, HV))
    x["k"] /= np.linalg.norm(x["k"], axis=-1, keepdims=True)  # the delta rule's keys, l2-normalised
    return {key: (0.5 * value).astype(np.float32) if key in ("q", "v", "dout") else value.astype(np.float32)
            for key, value in x.items()}


_DECAYED = [("linear", 0), ("simple_gla", 1), ("gla", 8)]
_DELTA = [("delta_rule", 0), ("gated_delta_rule", 1), ("kda", 8)]


def _split(x, dtype):
    bits, vals = {}, {}
    for key, value in x.items():
        bits[key], vals[key] = _half(value, dtype)
    return bits, vals


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("decay,cols", _DECAYED)
@pytest.mark.parametrize("T", [1, 63, 97])
def test_decayed_forward_backward_match_float32_and_oracle(dtype, decay, cols, T):
    K = 8 if cols == 8 else 9
    x = _problem(2, T, 3, K, 5, cols if cols != 8 else K, seed=T)
    bits, vals = _split(x, dtype)
    g_bits, g_vals = bits.get("g"), vals.get("g")
    rng = np.random.default_rng(1)
    initial = rng.standard_normal((2, 3, K, 5)).astype(np.float32) * 0.3
    o, final = _linattn.half.decayed_attention(bits["q"], bits["k"], bits["v"], g_bits, decay=decay, dtype=dtype,
                                               initial_state=initial, output_final_state=True, chunk_size=16)
    assert o.dtype == np.uint16 and o.shape == (2, T, 3, 5) and final.dtype == np.float32
    o32, final32 = _linattn.decayed_attention(vals["q"], vals["k"], vals["v"], g_vals, decay=decay,
                                              initial_state=initial, output_final_state=True, chunk_size=16)
    o64, _ = _linattn.reference.decayed_attention(
        *[None if a is None else a.astype(np.float64) for a in (vals["q"], vals["k"], vals["v"], g_vals)],
        decay=decay, initial_state=initial.astype(np.float64), output_final_state=True)
    _close(o, o32, dtype, "o against float32")
    _close(o, o64, dtype, "o against the oracle")
    np.testing.assert_allclose(final, final32, rtol=1e-5, atol=1e-5 * np.abs(final32).max())

    grads = _linattn.half.decayed_attention_backward(bits["q"], bits["k"], bits["v"], g_bits, bits["dout"][:, :, :3],
                                                     decay=decay, dtype=dtype, initial_state=initial, chunk_size=16)
    grads32 = _linattn.decayed_attention_backward(vals["q"], vals["k"], vals["v"], g_vals, vals["dout"][:, :, :3],
                                                  decay=decay, initial_state=initial, chunk_size=16)
    for name, got, want in zip(("dq", "dk", "dv", "dg"), grads[:4], grads32[:4]):
        if want is None:
            assert got is None, name
            continue
        assert got.shape == want.shape, name
        _close(got, want, dtype, name, steps=8.0)
    np.testing.assert_allclose(grads[4], grads32[4], rtol=1e-4, atol=1e-4 * np.abs(grads32[4]).max())


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("gate,cols", _DELTA)
@pytest.mark.parametrize("T", [1, 65])
def test_delta_forward_backward_match_float32_and_oracle(dtype, gate, cols, T):
    x = _problem(1, T, 2, 8, 7, cols, seed=T + 5)
    bits, vals = _split(x, dtype)
    o, final = _linattn.half.delta_rule(bits["q"], bits["k"], bits["v"], bits["beta"], bits.get("g"), gate=gate,
                                        dtype=dtype, output_final_state=True, use_qk_l2norm=True, chunk_size=32)
    o32, final32 = _linattn.delta_rule(vals["q"], vals["k"], vals["v"], vals["beta"], vals.get("g"), gate=gate,
                                       output_final_state=True, use_qk_l2norm=True, chunk_size=32)
    o64, _ = _linattn.reference.delta_rule(
        *[None if a is None else a.astype(np.float64) for a in (vals["q"], vals["k"], vals["v"], vals["beta"],
                                                                 vals.get("g"))], gate=gate, use_qk_l2norm=True)
    _close(o, o32, dtype, "o against float32")
    _close(o, o64, dtype, "o against the oracle")
    np.testing.assert_allclose(final, final32, rtol=1e-5, atol=1e-5 * np.abs(final32).max())
    grads = _linattn.half.delta_rule_backward(bits["q"], bits["k"], bits["v"], bits["beta"], bits.get("g"),
                                              bits["dout"], gate=gate, dtype=dtype, use_qk_l2norm=True, chunk_size=32)
    grads32 = _linattn.delta_rule_backward(vals["q"], vals["k"], vals["v"], vals["beta"], vals.get("g"),
                                           vals["dout"], gate=gate, use_qk_l2norm=True, chunk_size=32)
    assert grads[3].shape == x["beta"].shape  # beta's gradient in beta's own [B, T, H]
    for name, got, want in zip(("dq", "dk", "dv", "dbeta", "dg"), grads[:5], grads32[:5]):
        if want is None:
            assert got is None, name
            continue
        _close(got, want, dtype, name, steps=8.0)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_grouped_heads_packed_sequences_and_strides(dtype):
    """Value heads a multiple of q/k's (Qwen3.5's layout), query heads a multiple of k/v's (ONNX's), packed
    sequences with an empty one, and inputs whose strides differ from their extents, as float32 runs them."""
    x = _problem(1, 40, 2, 8, 6, 1, HV=4)
    bits, vals = _split(x, dtype)
    cu = np.array([0, 15, 15, 40])
    run = dict(gate="gated_delta_rule", cu_seqlens=cu, output_final_state=True)
    o, final = _linattn.half.delta_rule(bits["q"], bits["k"], bits["v"], bits["beta"], bits["g"], dtype=dtype, **run)
    o32, final32 = _linattn.delta_rule(vals["q"], vals["k"], vals["v"], vals["beta"], vals["g"], **run)
    assert o.shape == (1, 40, 4, 6) and final.shape == (3, 4, 8, 6)
    _close(o, o32, dtype, "grouped value heads")
    np.testing.assert_allclose(final, final32, rtol=1e-5, atol=1e-6)

    y = _problem(2, 33, 2, 8, 6, 8, heads_q=6, seed=3)
    bits, vals = _split(y, dtype)
    o, _ = _linattn.half.decayed_attention(bits["q"], bits["k"], bits["v"], bits["g"], decay="gla", dtype=dtype)
    o32, _ = _linattn.decayed_attention(vals["q"], vals["k"], vals["v"], vals["g"], decay="gla")
    assert o.shape == (2, 33, 6, 6)
    _close(o, o32, dtype, "query groups")

    # Every other token and a head axis in reverse: views whose strides are not their extents'.
    wide = {key: np.repeat(value, 2, axis=1) for key, value in bits.items()}
    view = {key: value[:, ::2] for key, value in wide.items()}
    o_strided, _ = _linattn.half.decayed_attention(view["q"], view["k"], view["v"], view["g"], decay="gla",
                                                   dtype=dtype)
    np.testing.assert_array_equal(o_strided, o)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_token_by_token_and_steps_match_float32(dtype):
    x = _problem(2, 21, 3, 8, 5, 8, seed=11)
    bits, vals = _split(x, dtype)
    state, state32 = np.zeros((2, 3, 8, 5), np.float32), np.zeros((2, 3, 8, 5), np.float32)
    o = _linattn.half.decayed_recurrent(bits["q"], bits["k"], bits["v"], bits["g"], state, decay="gla", dtype=dtype)
    o32 = _linattn.decayed_recurrent(vals["q"], vals["k"], vals["v"], vals["g"], state32, decay="gla")
    _close(o, o32, dtype, "decayed_recurrent")
    np.testing.assert_allclose(state, state32, rtol=1e-5, atol=1e-6)

    state, state32 = np.zeros((2, 3, 8, 5), np.float32), np.zeros((2, 3, 8, 5), np.float32)
    for t in range(x["q"].shape[1]):
        o = _linattn.half.delta_rule_step(*[bits[key][:, t] for key in ("q", "k", "v", "beta", "g")], state,
                                          gate="kda", dtype=dtype, use_qk_l2norm=True)
        o32 = _linattn.delta_rule_step(*[vals[key][:, t] for key in ("q", "k", "v", "beta", "g")], state32,
                                       gate="kda", use_qk_l2norm=True)
        assert o.shape == (2, 3, 5)
        _close(o, o32, dtype, f"delta_rule_step token {t}")
    np.testing.assert_allclose(state, state32, rtol=1e-4, atol=1e-5)


def test_numpy_float16_steps_through_the_top_level_names():
    x = _problem(2, 3, 2, 8, 4, 1, seed=2)
    bits, vals = _split(x, "f16")
    half = {key: value.view(np.float16) for key, value in bits.items()}
    state, state32 = np.zeros((2, 2, 8, 4), np.float32), np.zeros((2, 2, 8, 4), np.float32)
    for t in range(3):
        o = linattn.decayed_step(half["q"][:, t], half["k"][:, t], half["v"][:, t], half["g"][:, t], state,
                                 decay="simple_gla")
        o32 = linattn.decayed_step(vals["q"][:, t], vals["k"][:, t], vals["v"][:, t], vals["g"][:, t], state32,
                                   decay="simple_gla")
        assert o.dtype == np.float16
        _close(o.view(np.uint16), o32, "f16", "decayed_step")
    np.testing.assert_allclose(state, state32, rtol=1e-5, atol=1e-6)
    o = linattn.delta_rule_step(half["q"][:, 0], k=half["k"][:, 0], v=half["v"][:, 0], beta=half["beta"][:, 0],
                                g=half["g"][:, 0], state=state, gate="gated_delta_rule")
    assert o.dtype == np.float16 and o.shape == (2, 2, 4)
    with pytest.raises(TypeError, match=r"k: expected float16 \(q's dtype\), got float32"):
        linattn.delta_rule_step(half["q"][:, 0], vals["k"][:, 0], half["v"][:, 0], half["beta"][:, 0],
                                half["g"][:, 0], state, gate="gated_delta_rule")


def test_bad_dtypes_are_refused_by_name():
    x = _problem(1, 4, 1, 4, 4, 0)
    bits, vals = _split(x, "bf16")
    with pytest.raises(ValueError, match='dtype: expected "bf16" or "f16", got "fp8"'):
        _linattn.half.delta_rule(bits["q"], bits["k"], bits["v"], bits["beta"], gate="delta_rule", dtype="fp8")
    with pytest.raises(TypeError, match="q: expected uint16"):
        _linattn.half.decayed_attention(vals["q"], bits["k"], bits["v"], decay="linear", dtype="bf16")
    with pytest.raises(ValueError, match=r'dtype: expected "float32" \(this module\'s\).*_linattn.half'):
        _linattn.decayed_attention(vals["q"], vals["k"], vals["v"], decay="linear", dtype="bf16")
    with pytest.raises(TypeError, match="state: expected"):  # states stay float32
        _linattn.half.decayed_recurrent(bits["q"], bits["k"], bits["v"], None, np.zeros((1, 1, 4, 4), np.float64),
                                        decay="linear", dtype="bf16")


def _rounded(x, dtype):
    """float32 values rounded once to the half type, as bits."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(_DTYPES[dtype]).view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("shape", [(2, 97, 3, 17, 9, 3, None), (1, 130, 2, 64, 64, 4, None),
                                   (1, 70, 2, 16, 8, 2, np.array([0, 30, 30, 70]))])
def test_chunked_forwards_are_the_float32_result_rounded_once(dtype, shape):
    """The chunked forwards read the half rows in place, widening each chunk's rows as they pack them (exact)
    and rounding out once as they write it: bit for bit the float32 operator's output on the widened inputs,
    rounded to nearest even, for every gate, grouped value heads (HV = 2·H) and packed sequences."""
    B, T, H, K, V, HV, cu = shape
    rng = np.random.default_rng(T)
    x = {"q": rng.standard_normal((B, T, H, K)) * 0.5, "k": rng.standard_normal((B, T, H, K)) * 0.5,
         "v": rng.standard_normal((B, T, HV, V)) * 0.5, "beta": rng.uniform(0, 1, (B, T, HV)),
         "gk": -np.abs(rng.standard_normal((B, T, HV, K))), "g1": -np.abs(rng.standard_normal((B, T, HV)))}
    bits, vals = _split({key: value.astype(np.float32) for key, value in x.items()}, dtype)
    for gate, g in (("kda", "gk"), ("gated_delta_rule", "g1"), ("delta_rule", None)):
        o, _ = _linattn.half.delta_rule(bits["q"], bits["k"], bits["v"], bits["beta"], bits.get(g), gate=gate,
                                        dtype=dtype, use_qk_l2norm=True, cu_seqlens=cu)
        o32, _ = _linattn.delta_rule(vals["q"], vals["k"], vals["v"], vals["beta"], vals.get(g), gate=gate,
                                     use_qk_l2norm=True, cu_seqlens=cu)
        np.testing.assert_array_equal(o, _rounded(o32, dtype), err_msg=gate)
    if HV != H:  # the decayed family without grouped value heads: v and g with q's heads
        bits = {key: value[:, :, :H] if key in ("v", "gk", "g1") else value for key, value in bits.items()}
        vals = {key: value[:, :, :H] if key in ("v", "gk", "g1") else value for key, value in vals.items()}
    for decay, g in (("gla", "gk"), ("simple_gla", "g1"), ("linear", None)):
        o, _ = _linattn.half.decayed_attention(bits["q"], bits["k"], bits["v"], bits.get(g), decay=decay,
                                               dtype=dtype, cu_seqlens=cu)
        o32, _ = _linattn.decayed_attention(vals["q"], vals["k"], vals["v"], vals.get(g), decay=decay,
                                            cu_seqlens=cu)
        np.testing.assert_array_equal(o, _rounded(o32, dtype), err_msg=decay)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("shape", [(2, 97, 3, 17, 9, 3, 3, None), (1, 130, 2, 64, 64, 2, 2, None),
                                   (1, 70, 2, 16, 8, 2, 6, np.array([0, 30, 30, 70])),
                                   (1, 33, 2, 8, 8, 4, 2, None)])
def test_chunked_backwards_are_the_float32_gradients_rounded_once(dtype, shape):
    """The chunked backwards read and write the half rows in place, query groups and grouped value heads included
    (HV = 2·H: dq and dk summed over a group in float32, then rounded once): every gradient bit for bit the
    float32 operator's on the widened inputs, rounded once, and dinitial_state the float32 one."""
    B, T, H, K, V, HV, HQ, cu = shape
    rng = np.random.default_rng(T + HQ)
    x = {"q": rng.standard_normal((B, T, HQ, K)) * 0.5, "k": rng.standard_normal((B, T, H, K)) * 0.5,
         "v": rng.standard_normal((B, T, HV, V)) * 0.5, "beta": rng.uniform(0, 1, (B, T, HV)),
         "gk": -np.abs(rng.standard_normal((B, T, HV, K))), "g1": -np.abs(rng.standard_normal((B, T, HV))),
         "dout": rng.standard_normal((B, T, max(HQ, HV), V))}
    bits, vals = _split({key: value.astype(np.float32) for key, value in x.items()}, dtype)
    states = B if cu is None else len(cu) - 1
    initial = rng.standard_normal((states, HV, K, V)).astype(np.float32)

    def expect_same(got, want, what):
        for name, a, b in zip(("dq", "dk", "dv", "dbeta or dg", "dg"), got[:-1], want[:-1]):
            if b is None:
                assert a is None, f"{what} {name}"
            else:
                np.testing.assert_array_equal(a, _rounded(b, dtype), err_msg=f"{what} {name}")
        np.testing.assert_array_equal(got[-1], want[-1], err_msg=f"{what} dinitial_state")

    if HQ == H:  # the delta rule takes grouped value heads; its backward's query groups run in Python
        for gate, g in (("kda", "gk"), ("gated_delta_rule", "g1"), ("delta_rule", None)):
            run = dict(gate=gate, use_qk_l2norm=True, cu_seqlens=cu, initial_state=initial)
            got = _linattn.half.delta_rule_backward(*[bits.get(key) for key in ("q", "k", "v", "beta")], bits.get(g),
                                                    bits["dout"], dtype=dtype, **run)
            want = _linattn.delta_rule_backward(*[vals.get(key) for key in ("q", "k", "v", "beta")], vals.get(g),
                                                vals["dout"], **run)
            expect_same(got, want, gate)
    # the decayed family: query groups and grouped value heads natively
    for decay, g in (("gla", "gk"), ("simple_gla", "g1"), ("linear", None)):
        run = dict(decay=decay, cu_seqlens=cu, initial_state=initial)
        got = _linattn.half.decayed_attention_backward(bits["q"], bits["k"], bits["v"], bits.get(g), bits["dout"],
                                                       dtype=dtype, **run)
        want = _linattn.decayed_attention_backward(vals["q"], vals["k"], vals["v"], vals.get(g), vals["dout"],
                                                   **run)
        expect_same(got, want, decay)


def _same_values(got_bits, want, dtype, what):
    """The half result is the float32 one rounded once, NaN where it is NaN."""
    np.testing.assert_array_equal(_values(got_bits, dtype), _values(_rounded(want, dtype), dtype), err_msg=what)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("g_wide", [False, True])
def test_half_paths_at_the_extremes_follow_float32(dtype, g_wide):
    """The numerics the fp32 paths are tested at, now through the half ones: log decays of −inf and −1e30 (a
    token that forgets all; f16 holds −1e30 as −inf), β near 2 (the delta rule's update flips the state along k)
    and a NaN in a later token's value. The chunked forwards and backwards stay the float32 results rounded
    once, NaN exactly where those are; the outputs before the NaN's token are finite; the token-by-token
    forwards are NaN where float32's are and within a few rounding steps of it elsewhere. g_wide: the log decays
    as float32 beside the half tensors (as the models pass them; −1e30 then stays −1e30 in f16 calls too), dg
    float32 and equal to the float32 call's; the token paths take g in q's type only, so they are not run."""
    B, T, H, K, V, nan_at = 1, 70, 2, 16, 8, 60
    rng = np.random.default_rng(7)
    x = {"q": rng.standard_normal((B, T, H, K)) * 0.5, "k": rng.standard_normal((B, T, H, K)),
         "v": rng.standard_normal((B, T, H, V)) * 0.5, "beta": rng.uniform(1.9, 1.99, (B, T, H)),
         "gk": -rng.uniform(0.01, 0.7, (B, T, H, K)), "g1": -rng.uniform(0.01, 0.7, (B, T, H)),
         "dout": rng.standard_normal((B, T, H, V))}
    x["k"] /= np.linalg.norm(x["k"], axis=-1, keepdims=True)
    x["gk"][0, 5, 0, :], x["gk"][0, 40, 1, 3], x["g1"][0, 5, 0], x["g1"][0, 40, 1] = -np.inf, -1e30, -np.inf, -1e30
    x["v"][0, nan_at, 1, 2] = np.nan
    bits, vals = _split({key: value.astype(np.float32) for key, value in x.items()}, dtype)
    if g_wide:
        for key in ("gk", "g1"):
            bits[key] = vals[key] = x[key].astype(np.float32)
    initial = rng.standard_normal((B, H, K, V)).astype(np.float32)
    families = [("delta_rule", "delta_rule_backward", "delta_rule_recurrent", ("q", "k", "v", "beta"),
                 dict(use_qk_l2norm=True), [("kda", "gk"), ("gated_delta_rule", "g1"), ("delta_rule", None)], "gate"),
                ("decayed_attention", "decayed_attention_backward", "decayed_recurrent", ("q", "k", "v"), {},
                 [("gla", "gk"), ("simple_gla", "g1"), ("linear", None)], "decay")]
    for forward, backward, recurrent, names, options, gates, gate_word in families:
        for gate, g in gates:
            run = {gate_word: gate, **options}
            what = f"{forward} {gate}"
            o, _ = getattr(_linattn.half, forward)(*[bits[n] for n in names], bits.get(g), dtype=dtype,
                                                     initial_state=initial, **run)
            o32, _ = getattr(_linattn, forward)(*[vals[n] for n in names], vals.get(g), initial_state=initial, **run)
            _same_values(o, o32, dtype, what)
            assert np.isfinite(_values(o, dtype)[:, :nan_at]).all(), f"{what}: a NaN before its token"
            assert np.isnan(_values(o, dtype)[0, nan_at:, 1]).any(), f"{what}: the NaN did not reach its head"
            got = getattr(_linattn.half, backward)(*[bits[n] for n in names], bits.get(g), bits["dout"], dtype=dtype,
                                                   initial_state=initial, **run)
            want = getattr(_linattn, backward)(*[vals[n] for n in names], vals.get(g), vals["dout"],
                                               initial_state=initial, **run)
            for i, (a, b) in enumerate(zip(got[:-1], want[:-1])):
                assert (a is None) == (b is None), f"{what} gradient {i}"
                if b is not None and a.dtype == np.float32:  # a float32 g's gradient
                    np.testing.assert_array_equal(a, b, err_msg=f"{what} gradient {i}")
                elif b is not None:
                    _same_values(a, b, dtype, f"{what} gradient {i}")
            np.testing.assert_array_equal(got[-1], want[-1], err_msg=f"{what} dinitial_state")
            if g_wide:
                assert g is None or got[-2].dtype == np.float32, f"{what}: dg of a float32 g"
                continue
            state, state32 = initial.copy(), initial.copy()
            o = getattr(_linattn.half, recurrent)(*[bits[n] for n in names], bits.get(g), state, dtype=dtype, **run)
            o32 = getattr(_linattn, recurrent)(*[vals[n] for n in names], vals.get(g), state32, **run)
            values = _values(o, dtype)
            np.testing.assert_array_equal(np.isnan(values), np.isnan(o32), err_msg=f"{recurrent} {gate}: NaNs")
            assert np.isnan(o32[0, nan_at:, 1]).any() and not np.isnan(o32[:, :nan_at]).any(), recurrent
            finite = ~np.isnan(o32)
            scale = float(np.abs(o32[finite]).max())
            err = float(np.abs(values[finite] - o32[finite]).max()) / scale
            assert err <= 4 * _STEP[dtype], f"{recurrent} {gate}: relative error {err:.3g}"
