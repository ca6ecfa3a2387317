"""RecurrentState: stepping token by token equals causal linear attention; save and load round-trip."""

import pathlib

import numpy as np
import pytest

import linattn
from linattn_test_support import rel_err

B, H, D, E, N = 2, 3, 5, 7, 33


def sequence(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, N, H, D)).astype(np.float32), rng.uniform(-1, 1, (B, N, H, D)).astype(np.float32),
            rng.uniform(-1, 1, (B, N, H, E)).astype(np.float32))


def steps(state, q, k, v, tokens):
    return np.stack([state.step(q[:, t], k[:, t], v[:, t]) for t in tokens], axis=1)


@pytest.mark.parametrize("feature_map", ["elu", "relu", "identity"])
def test_steps_equal_causal_attention(feature_map):
    q, k, v = sequence()
    if feature_map == "identity":
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
    state = linattn.RecurrentState(B, H, D, E, feature_map)
    got = steps(state, q, k, v, range(N))
    want = linattn.linear_attention(q, k, v, feature_map=feature_map, causal=True)
    assert rel_err(got, want) < 2e-6
    assert state.position == N
    phi = {"elu": lambda x: np.where(x > 0, x + 1, np.exp(x)), "relu": lambda x: np.maximum(x, 0),
           "identity": lambda x: x}[feature_map]
    fk = phi(k.astype(np.float64))
    assert rel_err(state.S, np.einsum("bnhm,bnhe->bhme", fk, v)) < 2e-6
    assert rel_err(state.z, fk.sum(axis=1)) < 2e-6
    assert state.S.shape == (B, H, D, E) and state.z.shape == (B, H, D)


def test_state_properties_and_reset():
    state = linattn.RecurrentState(B, H, D, E, eps=1e-3)
    assert (state.batch, state.heads, state.dim, state.feature_dim, state.value_dim) == (B, H, D, D, E)
    assert state.feature_map == "elu" and state.eps == pytest.approx(1e-3)
    q, k, v = sequence()
    steps(state, q, k, v, range(3))
    copy = state.S
    copy[...] = 0  # a copy: the state is unchanged
    assert np.abs(state.S).max() > 0
    state.reset()
    assert state.position == 0 and not state.S.any() and not state.z.any()
    assert "position=0" in repr(state)


def test_save_load_round_trip(tmp_path):
    q, k, v = sequence(1)
    first = linattn.RecurrentState(B, H, D, E)
    steps(first, q, k, v, range(10))
    path = tmp_path / "state.bin"
    first.save(path)
    second = linattn.RecurrentState(B, H, D, E)
    steps(second, q, k, v, range(3))  # other contents, replaced by load
    second.load(str(path))
    assert second.position == 10
    assert np.array_equal(second.S, first.S) and np.array_equal(second.z, first.z)
    rest = range(10, N)
    np.testing.assert_array_equal(steps(second, q, k, v, rest), steps(first, q, k, v, rest))


def test_load_mismatch_leaves_the_state_as_it_was(tmp_path):
    q, k, v = sequence(2)
    other = linattn.RecurrentState(B, H, D, E + 1)
    other.save(tmp_path / "other")
    linattn.RecurrentState(B + 1, H, D, E).save(tmp_path / "batch")
    relu = linattn.RecurrentState(B, H, D, E, "relu")
    relu.save(tmp_path / "relu")
    state = linattn.RecurrentState(B, H, D, E)
    steps(state, q, k, v, range(4))
    S, z = state.S, state.z
    with pytest.raises(ValueError, match="batch is 3, expected 2"):
        state.load(tmp_path / "batch")
    with pytest.raises(ValueError, match="value_dim is 8, expected 7"):
        state.load(tmp_path / "other")
    with pytest.raises(ValueError, match='feature_map is "relu", expected "elu"'):
        state.load(tmp_path / "relu")
    corrupt = bytearray((tmp_path / "other").read_bytes())
    corrupt[len(corrupt) // 2] ^= 0xFF
    pathlib.Path(tmp_path / "corrupt").write_bytes(bytes(corrupt))
    with pytest.raises(ValueError):
        state.load(tmp_path / "corrupt")
    assert state.position == 4 and np.array_equal(state.S, S) and np.array_equal(state.z, z)


@pytest.mark.parametrize("eps", [-1.0, float("nan"), float("inf")])
def test_defect13_bad_eps_is_refused_at_construction(eps):
    """Issue 17, defect 13: a state that cannot step was built, and refused only at its first step."""
    with pytest.raises(ValueError, match="eps: expected a finite value ≥ 0"):
        linattn.RecurrentState(1, 1, 4, 4, eps=eps)
    assert linattn.RecurrentState(1, 1, 4, 4, eps=0.0).eps == 0.0
