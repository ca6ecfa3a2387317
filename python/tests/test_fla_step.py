"""The decode step of linattn.fla's fused_recurrent_* (T = 1 with the cache's state, as transformers' Qwen3.5 and
Qwen3-Next layers call it): the step reads the caller's initial_state and writes the final state into a new
array in the same pass (no copy of the state first). Checked bit for bit against the operator run in place on a
copy (the old path), against test_delta's naive float64 recurrence, with grouped value heads, packed one-token
sequences beside an empty one, the caller's state left as it was, and that the only state-sized memory the
step takes is the final state it returns."""

import tracemalloc

import numpy as np
import pytest
import torch

from linattn import _linattn, fla
from test_delta import assert_close, reference
from test_grouped_heads import grouped_inputs, repeated


def in_place(q, k, v, beta, g, h, gate, cu=None):
    """The delta rule token by token on a copy of h, advanced in place (the step's form before it went out of
    place): (o, final) as tensors."""
    state = h.numpy().copy()
    o = _linattn.delta_rule_recurrent(q.numpy(), k.numpy(), v.numpy(), beta.numpy(),
                                      None if g is None else g.numpy(), state, gate=gate,
                                      scale=q.shape[-1] ** -0.5, use_qk_l2norm=True,
                                      cu_seqlens=None if cu is None else cu.numpy())
    return torch.from_numpy(o), torch.from_numpy(state)


STEP_CASES = [("fused_recurrent_delta_rule", "delta_rule", None),
              ("fused_recurrent_gated_delta_rule", "gated_delta_rule", "token"),
              ("fused_recurrent_kda", "kda", "key")]


def step(name, q, k, v, beta, g, h, cu=None):
    kwargs = dict(initial_state=h, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    if name == "fused_recurrent_delta_rule":
        return fla.fused_recurrent_delta_rule(q, k, v, beta, **kwargs)
    if name == "fused_recurrent_kda":
        return fla.fused_recurrent_kda(q, k, v, g, beta, **kwargs)
    return fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, **kwargs)


@pytest.mark.parametrize("name, gate, kind", STEP_CASES, ids=[c[1] for c in STEP_CASES])
@pytest.mark.parametrize("H, group, K, V", [(4, 2, 16, 16), (1, 1, 7, 5), (2, 3, 9, 13)])
def test_step_equals_the_step_in_place_and_the_naive_recurrence(name, gate, kind, H, group, K, V):
    q, k, v, beta, g, h = grouped_inputs(kind or "none", 2, 1, H, H * group, K, V, seed=K + V)
    keep = h.clone()
    o, final = step(name, q, k, v, beta, g, h)
    assert torch.equal(h, keep), "the caller's initial_state was written"
    o_old, final_old = in_place(*repeated(q, k, H * group), v, beta, g, h, gate)
    assert torch.equal(o, o_old) and torch.equal(final, final_old)
    want_o, want_final = reference(kind or "none", *[None if x is None else x.double()
                                                     for x in (*repeated(q, k, H * group), v, beta, g, h)],
                                   normalize=True)
    assert_close(o, want_o, 3e-5, "o")
    assert_close(final, want_final, 3e-5, "final_state")


def test_packed_one_token_sequences_beside_an_empty_one():
    """cu_seqlens [0, 1, 1, 2]: two one-token sequences and an empty one, whose final state is its initial
    state unchanged (copied through, as nothing reads it)."""
    cu = torch.tensor([0, 1, 1, 2])
    q, k, v, beta, g, h = grouped_inputs("token", 1, 2, 2, 4, 8, 8, seed=3, N=3)
    keep = h.clone()
    o, final = step("fused_recurrent_gated_delta_rule", q, k, v, beta, g, h, cu=cu)
    assert torch.equal(h, keep)
    assert torch.equal(final[1], h[1])
    o_old, final_old = in_place(*repeated(q, k, 4), v, beta, g, h, "gated_delta_rule", cu=cu)
    assert torch.equal(o, o_old) and torch.equal(final, final_old)
    want_o, want_final = reference("token", *[x.double() for x in (*repeated(q, k, 4), v, beta, g, h)],
                                   cu=cu.tolist(), normalize=True)
    assert_close(o, want_o, 3e-5, "o")
    assert_close(final, want_final, 3e-5, "final_state")


@pytest.mark.parametrize("name", ["fused_recurrent_simple_gla", "fused_recurrent_gla", "fused_recurrent_retention"])
def test_decayed_step_leaves_the_state_and_equals_the_step_in_place(name):
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 1, 3, 8, generator=gen) for _ in range(3))
    h = torch.randn(2, 3, 8, 8, generator=gen)
    g = -torch.rand(2, 1, 3, 8 if name == "fused_recurrent_gla" else 1, generator=gen)
    gates = {"fused_recurrent_simple_gla": dict(g=g[..., 0]), "fused_recurrent_gla": dict(gk=g),
             "fused_recurrent_retention": {}}[name]
    keep = h.clone()
    o, final = getattr(fla, name)(q, k, v, initial_state=h, output_final_state=True, **gates)
    assert torch.equal(h, keep)
    state = h.numpy().copy()
    decay, gate = {"fused_recurrent_simple_gla": ("simple_gla", g[..., 0].numpy()),
                   "fused_recurrent_gla": ("gla", g.numpy()), "fused_recurrent_retention": ("retention", None)}[name]
    o_old = _linattn.decayed_recurrent(q.numpy(), k.numpy(), v.numpy(), gate, state, decay=decay, scale=8 ** -0.5)
    assert torch.equal(o, torch.from_numpy(o_old)) and torch.equal(final, torch.from_numpy(state))


def test_the_step_takes_no_copy_of_the_state(monkeypatch):
    """A state of 4 MiB: the step's returned state is a new tensor (no memory shared with initial_state, which
    is unchanged); nothing copies the state on the way to the operator (the old path's numpy.array(copy=True)
    of it is watched for, with numpy.copy and Tensor.clone); and the only state-sized memory the call takes is
    that tensor (tracemalloc sees numpy's allocations, the binding's included). That the operator reads the
    initial state and writes every element of the final one is recurrent_out_of_place_test's (a final state
    filled with NaN before the call)."""
    q, k, v, beta, g, h = grouped_inputs("token", 1, 1, 8, 16, 256, 256, seed=1)
    keep = h.clone()
    state_bytes = h.numel() * h.element_size()
    step("fused_recurrent_gated_delta_rule", q, k, v, beta, g, h)  # warm-up: first-call allocations
    copies = []

    def watch(copy, what):
        def watched(x, *args, **kwargs):
            if getattr(x, "nbytes", 0) >= state_bytes or (isinstance(x, torch.Tensor) and x.numel() == h.numel()):
                copies.append(what)
            return copy(x, *args, **kwargs)
        return watched

    monkeypatch.setattr(np, "array", watch(np.array, "numpy.array"))
    monkeypatch.setattr(np, "copy", watch(np.copy, "numpy.copy"))
    monkeypatch.setattr(torch.Tensor, "clone", watch(torch.Tensor.clone, "Tensor.clone"))
    tracemalloc.start()
    try:
        o, final = step("fused_recurrent_gated_delta_rule", q, k, v, beta, g, h)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    monkeypatch.undo()
    assert not copies, copies
    assert torch.equal(h, keep)
    assert final.untyped_storage().data_ptr() != h.untyped_storage().data_ptr()
    assert state_bytes <= held < state_bytes + state_bytes // 8, (held, state_bytes)  # the final state, held
    assert peak < 2 * state_bytes, (peak, state_bytes)


def test_a_read_only_initial_state_is_taken_as_it_is():
    """The binding reads initial_state only: a numpy array that may not be written is accepted."""
    q, k, v, beta, g, h = grouped_inputs("token", 1, 1, 2, 2, 4, 4, seed=2)
    state = h.numpy().copy()
    state.setflags(write=False)
    o, final = _linattn.delta_rule_recurrent_forward(q.numpy(), k.numpy(), v.numpy(), beta.numpy(), g.numpy(),
                                                     gate="gated_delta_rule", initial_state=state,
                                                     output_final_state=True, use_qk_l2norm=True)
    assert np.array_equal(state, h.numpy()) and not np.shares_memory(final, state)


def test_bad_initial_states_are_refused_by_name():
    q, k, v, beta, g, h = grouped_inputs("token", 1, 1, 2, 2, 4, 4, seed=2)
    with pytest.raises(ValueError, match=r"initial_state: expected shape \[N, H, K, V\]"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h[:, :1])
    with pytest.raises(TypeError, match=r"initial_state: expected float32"):
        _linattn.delta_rule_recurrent_forward(q.numpy(), k.numpy(), v.numpy(), beta.numpy(), g.numpy(),
                                              gate="gated_delta_rule", initial_state=h.double().numpy())
    with pytest.raises(ValueError, match=r"initial_state: expected shape"):
        _linattn.decayed_recurrent_forward(q.numpy(), k.numpy(), v.numpy(), decay="linear",
                                           initial_state=h.numpy()[:, :1])
