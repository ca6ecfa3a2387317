"""feature_map="favor" (Performer random features), routed to linattn::favor_feature_map."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt
from linattn_test_support import rel_err

pytestmark = pytest.mark.skipif(not linattn.has_favor, reason="built without include/linattn/performer.hpp")


def inputs(B=2, N=37, H=3, D=16, E=9, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, N, H, D)).astype(np.float32), rng.uniform(-1, 1, (B, N, H, D)).astype(np.float32),
            rng.uniform(-1, 1, (B, N, H, E)).astype(np.float32))


@pytest.mark.parametrize("causal", [False, True])
def test_favor_against_the_oracle(causal):
    q, k, v = inputs()
    kw = dict(feature_map="favor", n_features=40, seed=7, causal=causal, key_lengths=[37, 20])
    got = linattn.linear_attention(q, k, v, **kw)
    want = linattn.reference.linear_attention(*(x.astype(np.float64) for x in (q, k, v)), **kw)
    assert rel_err(got, want) < 1e-5
    dout = np.random.default_rng(1).uniform(-1, 1, got.shape).astype(np.float32)
    for g, w in zip(linattn.linear_attention_backward(q, k, v, dout, **kw),
                    linattn.reference.linear_attention_backward(*(x.astype(np.float64) for x in (q, k, v, dout)),
                                                                **kw)):
        assert rel_err(g, w) < 1e-4


def test_favor_draws_come_from_the_seed():
    q, k, v = inputs()
    a = linattn.linear_attention(q, k, v, feature_map="favor", seed=1)
    assert np.array_equal(a, linattn.linear_attention(q, k, v, feature_map="favor", seed=1))
    assert not np.array_equal(a, linattn.linear_attention(q, k, v, feature_map="favor", seed=2))
    assert not np.array_equal(a, linattn.linear_attention(q, k, v, feature_map="favor", seed=1, n_features=64))


def test_favor_recurrent_steps_equal_causal():
    q, k, v = inputs(N=12)
    state = linattn.RecurrentState(2, 3, 16, 9, "favor", n_features=33, seed=3)
    assert state.feature_dim == 33
    got = np.stack([state.step(q[:, t], k[:, t], v[:, t]) for t in range(12)], axis=1)
    want = linattn.linear_attention(q, k, v, feature_map="favor", n_features=33, seed=3, causal=True)
    assert rel_err(got, want) < 2e-6


def test_favor_gradcheck_fp64():
    g = torch.Generator().manual_seed(0)
    q, k, v = [(torch.rand(s, generator=g, dtype=torch.float64) - 0.5).requires_grad_()
               for s in ((1, 4, 2, 3), (1, 4, 2, 3), (1, 4, 2, 2))]
    fn = lambda q, k, v: lt.linear_attention(q, k, v, feature_map="favor", n_features=6, seed=5, causal=True, layout="bnhd")  # noqa
    assert torch.autograd.gradcheck(fn, (q, k, v))
