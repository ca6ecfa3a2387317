"""A favor RecurrentState records its draw (D, m, seed, orthogonal) in feature_map, so a state file saved
under one draw is refused by a state with another and accepted by the same one."""

import numpy as np
import pytest

import linattn

pytestmark = pytest.mark.skipif(not linattn.has_favor, reason="built without include/linattn/performer.hpp")


def test_favor_state_names_its_draw():
    state = linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=33, seed=3)
    assert state.feature_map == "favor(d=16,m=33,seed=3,orthogonal)"
    assert linattn.RecurrentState(1, 1, 4, 2).feature_map == "elu"


def test_favor_state_file_needs_the_same_draw(tmp_path):
    rng = np.random.default_rng(0)
    q, k, v = (rng.uniform(-1, 1, (2, 3, d)).astype(np.float32) for d in (16, 16, 9))
    saved = linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=33, seed=1)
    saved.step(q, k, v)
    saved.save(tmp_path / "s")
    same = linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=33, seed=1)
    same.load(tmp_path / "s")
    assert same.position == 1 and np.array_equal(same.S, saved.S)
    other = linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=33, seed=2)
    with pytest.raises(ValueError, match=r'feature_map is "favor\(d=16,m=33,seed=1,orthogonal\)", expected '
                                         r'"favor\(d=16,m=33,seed=2,orthogonal\)"'):
        other.load(tmp_path / "s")
    assert other.position == 0
    with pytest.raises(ValueError, match="feature_dim is 33, expected 34"):
        linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=34, seed=1).load(tmp_path / "s")
