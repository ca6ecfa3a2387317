"""Grouped value heads in linattn.fla's delta rule: q, k [B, T, H, K] against v [B, T, HV, V] with HV a
multiple of H, value head j reading q/k head j // (HV / H) (flash-linear-attention's and transformers'
convention: q and k repeat_interleave'd to HV heads). linattn hands the grouped tensors to its operators as
they are (no copy of q and k). Checked against the repeated call (forward and final state bit for bit,
gradients with dq and dk summed over each group by autograd), against test_delta's naive float64
recurrence, by finite differences through the fp64 oracle, with packed sequences (one empty), one decode
step, bf16 inputs, and the refusal of HV not a multiple of H."""

import pytest
import torch

from linattn import fla
from test_delta import CASES, IDS, call, make_inputs, reference, assert_close


def repeated(q, k, HV):
    group = HV // q.shape[2]
    return q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)


def grouped_inputs(kind, B, T, H, HV, K, V, seed, dtype=torch.float32, N=None):
    """test_delta's inputs in dtype, the initial state of N sequences (B without packing)."""
    q, k, v, beta, g, h = make_inputs(kind, B, T, H, K, V, seed, True, HV=HV)
    if N is not None:
        h = torch.randn(N, HV, K, V, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64) * 0.5
    return [None if x is None else x.to(dtype) for x in (q, k, v, beta, g, h)]


@pytest.mark.parametrize("name, kind", CASES, ids=IDS)
@pytest.mark.parametrize("T, group", [(1, 2), (63, 3), (65, 2), (97, 3)])
def test_grouped_call_equals_the_repeated_call(name, kind, T, group):
    """Forward and final state bit for bit (the same arithmetic on the same values); every gradient, dq
    and dk of H heads against autograd's sum over repeat_interleave (the chunked backward's)."""
    H = 2
    q, k, v, beta, g, h = grouped_inputs(kind, 2, T, H, H * group, 7, 5, seed=T)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    o, final = call(name, *leaves, g, h, use_qk_l2norm_in_kernel=True)
    (o.sum() + final.square().sum()).backward()
    rep = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    o_rep, final_rep = call(name, *repeated(*rep[:2], H * group), *rep[2:], g, h, use_qk_l2norm_in_kernel=True)
    (o_rep.sum() + final_rep.square().sum()).backward()
    assert torch.equal(o, o_rep) and torch.equal(final, final_rep)
    assert leaves[0].grad.shape == q.shape and leaves[1].grad.shape == k.shape
    if name.startswith("chunk"):
        for got, want, what in zip(leaves, rep, "q k v beta".split()):
            assert_close(got.grad, want.grad, 1e-5, f"d{what}")


@pytest.mark.parametrize("name, kind", CASES, ids=IDS)
def test_packed_sequences_with_an_empty_one_match_the_naive_recurrence(name, kind):
    cu = torch.tensor([0, 30, 30, 71])
    q, k, v, beta, g, h = grouped_inputs(kind, 1, 71, 1, 3, 5, 7, seed=5, dtype=torch.float64, N=3)
    want_o, want_final = reference(kind, *repeated(q, k, 3), v, beta, g, h, cu=cu.tolist(), normalize=True)
    for dtype, tol in ((torch.float32, 3e-5), (torch.float64, 1e-12)):
        x = [None if t is None else t.to(dtype) for t in (q, k, v, beta, g, h)]
        o, final = call(name, *x, cu=cu, use_qk_l2norm_in_kernel=True)
        assert_close(o, want_o, tol, f"{name} o, {dtype}")
        assert_close(final, want_final, tol, f"{name} final_state, {dtype}")


@pytest.mark.parametrize("name, kind", [c for c in CASES if c[0].startswith("chunk")])
def test_gradients_of_the_fp64_oracle_match_finite_differences(name, kind):
    q, k, v, beta, g, h = grouped_inputs(kind, 1, 6, 1, 3, 3, 2, seed=2, dtype=torch.float64)
    leaves = [x.requires_grad_() for x in (q, k, v, beta)]
    assert torch.autograd.gradcheck(lambda *x: call(name, *x, g, h, use_qk_l2norm_in_kernel=True), leaves)


def test_no_copy_of_queries_and_keys(monkeypatch):
    """The grouping reaches the operator: repeat_interleave is never called, forward or backward."""
    q, k, v, beta, g, _ = grouped_inputs("token", 1, 20, 2, 4, 8, 8, seed=1)
    leaves = [x.requires_grad_() for x in (q, k, v)]

    def refuse(*args, **kwargs):
        raise AssertionError("repeat_interleave called")

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", refuse)
    o, _ = fla.chunk_gated_delta_rule(*leaves, g, beta, use_qk_l2norm_in_kernel=True)
    o.sum().backward()
    assert leaves[0].grad.shape == (1, 20, 2, 8)


def test_decode_step_equals_the_repeated_step():
    """One token (T = 1) against a state of HV heads, as when decoding Qwen3.5 (q/k heads serving two value
    heads each); the caller's state is left as it was."""
    q, k, v, beta, g, h = grouped_inputs("token", 1, 1, 4, 8, 16, 16, seed=9)
    keep = h.clone()
    o, final = fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
    o_rep, final_rep = fla.fused_recurrent_gated_delta_rule(*repeated(q, k, 8), v, g, beta=beta, initial_state=h,
                                                            output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, o_rep) and torch.equal(final, final_rep) and torch.equal(h, keep)


def test_bf16_grouped_call_equals_the_repeated_call():
    q, k, v, beta, g, _ = grouped_inputs("token", 1, 40, 2, 6, 8, 8, seed=4, dtype=torch.bfloat16)
    o, _ = fla.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    o_rep, _ = fla.chunk_gated_delta_rule(*repeated(q, k, 6), v, g, beta, use_qk_l2norm_in_kernel=True)
    assert o.dtype == torch.bfloat16 and torch.equal(o, o_rep)


def test_value_heads_not_a_multiple_of_the_query_heads_are_refused_naming_both():
    q, k, v, beta, g, _ = grouped_inputs("token", 1, 4, 2, 3, 4, 4, seed=3)
    with pytest.raises(ValueError, match=r"v: expected a multiple of q's 2 heads .*got 3"):
        fla.chunk_gated_delta_rule(q, k, v, g, beta)
