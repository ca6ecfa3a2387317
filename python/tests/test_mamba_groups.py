"""Mamba-2's G groups of B and C reach linattn's operators as grouped value heads (q = C, k = B with G
heads, v = dt·x with H): no copy of B or C per head. The grouped scan and decode step give what the same
call with B and C materialized to one group per head gives (what linattn computed before, when it made
those copies), at G 1, 2 and H; and neither the scan (forward and backward) nor the step copies B or C out
per head. test_mamba checks both against the fp64 oracle at these G."""

import pytest
import torch

from linattn import mamba
from linattn_test_support import assert_close
from test_mamba import ALL, draw, run


def per_head(t, H):
    """B or C [..., G, N] with each group repeated for its H / G heads: G = H, the ungrouped call."""
    return t.repeat_interleave(H // t.shape[-2], dim=-2)


@pytest.mark.parametrize("T", [1, 63, 65])
@pytest.mark.parametrize("G", [1, 2, 6])
def test_scan_equals_the_call_with_one_group_per_head(T, G):
    H = 6
    t = draw(2, T, H, 5, G, 7, seed=T + G)
    runs = []
    for ungroup in (False, True):
        u = dict(t, B=per_head(t["B"], H), C=per_head(t["C"], H)) if ungroup else dict(t)
        runs.append(run(u, **ALL))
    assert_close(runs[0][0], runs[1][0], 1e-6, "out")
    assert_close(runs[0][1], runs[1][1], 1e-6, "final_states")


@pytest.mark.parametrize("G", [1, 2, 6])
def test_gradients_of_B_and_C_are_the_per_head_ones_summed_per_group(G):
    H = 6
    t = {k: v.float() for k, v in draw(1, 40, H, 4, G, 5, seed=G).items()}
    grads = []
    for ungroup in (False, True):
        B, C = (t["B"].clone().requires_grad_(), t["C"].clone().requires_grad_())
        b, c = (per_head(B, H), per_head(C, H)) if ungroup else (B, C)
        out, final = mamba.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], b, c, 64, D=t["D"], z=t["z"],
                                                     dt_bias=t["dt_bias"], dt_softplus=True,
                                                     initial_states=t["h0"], return_final_states=True)
        (out.sum() + final.square().sum()).backward()
        grads.append((B.grad, C.grad))
    assert_close(grads[0][0], grads[1][0], 2e-5, "dB")
    assert_close(grads[0][1], grads[1][1], 2e-5, "dC")


@pytest.mark.parametrize("G", [1, 2, 6])
def test_step_equals_the_step_with_one_group_per_head(G):
    batch, H, P, N = 3, 6, 4, 5
    t = {k: v.float() for k, v in draw(batch, 1, H, P, G, N, seed=20 + G).items()}
    outs, states = [], []
    for ungroup in (False, True):
        state = t["h0"].clone()
        B, C = t["B"][:, 0], t["C"][:, 0]
        if ungroup:
            B, C = per_head(B, H), per_head(C, H)
        outs.append(mamba.selective_state_update(state, t["x"][:, 0], t["dt"][:, 0], t["A"], B, C, D=t["D1"],
                                                 z=t["z"][:, 0], dt_bias=t["dt_bias"], dt_softplus=True))
        states.append(state)
    assert_close(outs[0], outs[1], 1e-6, "out")
    assert_close(states[0], states[1], 1e-6, "state")


def test_no_copy_of_B_and_C_per_head(monkeypatch):
    """Neither repeat_interleave nor an expand of B or C to [..., G, H / G, N] happens, in the scan (forward
    and backward) or the step; the only expands left are of one value per head (dt over headdim)."""
    H, G, N = 8, 2, 6

    def refuse(*args, **kwargs):
        raise AssertionError("repeat_interleave called")

    expand = torch.Tensor.expand

    def expand_no_groups(self, *sizes):
        shape = sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes
        assert not (len(shape) >= 2 and tuple(shape[-2:]) == (H // G, N)), f"B/C expanded per head: {shape}"
        return expand(self, *sizes)

    t = {k: v.float() for k, v in draw(1, 30, H, 4, G, N, seed=4).items()}
    leaves = {k: v.clone().requires_grad_() for k, v in t.items()}
    monkeypatch.setattr(torch.Tensor, "repeat_interleave", refuse)
    monkeypatch.setattr(torch.Tensor, "expand", expand_no_groups)
    out, _ = mamba.mamba_chunk_scan_combined(leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], 64,
                                             D=leaves["D"], initial_states=leaves["h0"], return_final_states=True)
    out.sum().backward()
    assert leaves["B"].grad.shape == (1, 30, G, N) and leaves["C"].grad.shape == (1, 30, G, N)
    state = t["h0"].clone()
    mamba.selective_state_update(state, t["x"][:, 0], t["dt"][:, 0], t["A"], t["B"][:, 0], t["C"][:, 0])
