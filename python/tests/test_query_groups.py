"""Query heads a multiple of the key/value heads (ONNX LinearAttention's grouped-query attention, opset 27)
through linattn.fla: q [B, T, R·H, K] over k [B, T, H, K] and v [B, T, H, V], query head i reading key/value
head i // R and its state; o [B, T, R·H, V], gates, beta and states [N, H, K, V] per key/value head.

Checked against ONNX's own reference implementation of the operator (onnx.reference, the four update
rules, prefill and decode), an fp64 recurrence written here from the operator's definition, and the
call with k, v and the gates repeated per query head (bit for bit, gradients summed over each group)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="linattn.fla takes torch tensors")
import linattn.fla as fla  # noqa: E402
from linattn import _fla_ops  # noqa: E402

# ONNX's update rules as linattn.fla calls: (chunked, token by token), each (q, k, v, g, beta, **state).
RULES = {
    "linear": (lambda q, k, v, g, b, **s: fla.chunk_linear_attn(q, k, v, normalize=False, **s),
               lambda q, k, v, g, b, **s: fla.fused_recurrent_linear_attn(q, k, v, **s)),
    "gated": (lambda q, k, v, g, b, **s: fla.chunk_simple_gla(q, k, v, g=g, **s),
              lambda q, k, v, g, b, **s: fla.fused_recurrent_simple_gla(q, k, v, g=g, **s)),
    "gated_per_key": (lambda q, k, v, g, b, **s: fla.chunk_gla(q, k, v, g, **s),
                      lambda q, k, v, g, b, **s: fla.fused_recurrent_gla(q, k, v, gk=g, **s)),
    "delta": (lambda q, k, v, g, b, **s: fla.chunk_delta_rule(q, k, v, b, **s),
              lambda q, k, v, g, b, **s: fla.fused_recurrent_delta_rule(q, k, v, b, **s)),
    "gated_delta": (lambda q, k, v, g, b, **s: fla.chunk_gated_delta_rule(q, k, v, g, b, **s),
                    lambda q, k, v, g, b, **s: fla.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=b, **s)),
}


def _inputs(rule, B, T, H, R, K, V, dtype=torch.float32, seed=0):
    """q [B, T, R·H, K], unit-norm keys (ONNX asks for L2-normalised keys with the delta rules), v, a log
    decay per head or per key dimension (or None), beta in (0, 1) (or None)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, R * H, K, generator=gen, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    g = None
    if rule in ("gated", "gated_delta"):
        g = -torch.rand(B, T, H, generator=gen, dtype=dtype)
    elif rule == "gated_per_key":
        g = -torch.rand(B, T, H, K, generator=gen, dtype=dtype)
    beta = torch.rand(B, T, H, generator=gen, dtype=dtype) if "delta" in rule else None
    return q, k, v, g, beta


def _oracle(rule, q, k, v, g, beta, scale, state=None):
    """ONNX LinearAttention's recurrence in fp64, token by token: S ← exp(g)·S; with the delta rules
    v ← β(v − Sᵀk); S ← S + k vᵀ; o_i = scale·Sᵀ q_i for each query head i of the key/value head."""
    q, k, v = (x.double() for x in (q, k, v))
    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    R = HQ // H
    S = torch.zeros(B, H, K, V, dtype=torch.float64) if state is None else state.double().clone()
    o = torch.zeros(B, T, HQ, V, dtype=torch.float64)
    for t in range(T):
        if g is not None:
            decay = g[:, t].double().exp()
            S = S * (decay[..., None, None] if decay.dim() == 2 else decay[..., None])
        vt = v[:, t]
        if beta is not None:
            vt = beta[:, t].double()[..., None] * (vt - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t, :, :, None] * vt[:, :, None, :]
        o[:, t] = scale * torch.einsum("bhrk,bhkv->bhrv", q[:, t].unflatten(1, (H, R)), S).flatten(1, 2)
    return o, S


def _repeat(x, R):
    return None if x is None else x.repeat_interleave(R, 2)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("mode", [0, 1], ids=["chunk", "fused_recurrent"])
@pytest.mark.parametrize("T, R", [(1, 2), (63, 3), (65, 2)])
def test_against_the_fp64_oracle(rule, mode, T, R):
    B, H, K, V = 2, 2, 7, 5
    q, k, v, g, beta = _inputs(rule, B, T, H, R, K, V, seed=T + R)
    h0 = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(1))
    o, final = RULES[rule][mode](q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert o.shape == (B, T, R * H, V) and final.shape == (B, H, K, V)
    o_ref, final_ref = _oracle(rule, q, k, v, g, beta, K ** -0.5, h0)
    torch.testing.assert_close(o.double(), o_ref, rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(final.double(), final_ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("rule", list(RULES))
def test_equals_the_call_with_keys_and_values_repeated(rule):
    """Bit for bit the ungrouped call on k, v, g, beta repeated per query head; its final state is the same
    for every head of a group."""
    B, T, H, R, K, V = 1, 97, 3, 2, 8, 6
    q, k, v, g, beta = _inputs(rule, B, T, H, R, K, V, seed=5)
    for run in RULES[rule]:
        o, final = run(q, k, v, g, beta, output_final_state=True)
        o_rep, final_rep = run(q, _repeat(k, R), _repeat(v, R), _repeat(g, R), _repeat(beta, R),
                               output_final_state=True)
        assert torch.equal(o, o_rep)
        for r in range(R):
            assert torch.equal(final, final_rep[:, r::R])


@pytest.mark.parametrize("mode", ["chunk", "fused_recurrent"])
def test_kda_equals_the_repeated_call(mode):
    B, T, H, R, K, V = 1, 65, 2, 3, 6, 4
    q, k, v, _, beta = _inputs("gated_delta", B, T, H, R, K, V, seed=9)
    gk = -torch.rand(B, T, H, K, generator=torch.Generator().manual_seed(3))
    run = getattr(fla, f"{mode}_kda")
    o, final = run(q, k, v, gk, beta, output_final_state=True)
    o_rep, final_rep = run(q, _repeat(k, R), _repeat(v, R), _repeat(gk, R), _repeat(beta, R), output_final_state=True)
    assert torch.equal(o, o_rep) and torch.equal(final, final_rep[:, ::R])


@pytest.mark.parametrize("name", ["chunk_dplr_delta_rule", "fused_recurrent_dplr_delta_rule"])
def test_dplr_equals_the_repeated_call_with_gradients_summed(name):
    """The generalized delta rule (RWKV-7's): a, b and gk belong to the key/value heads as k does."""
    B, T, H, R, K, V = 1, 33, 2, 2, 5, 4
    gen = torch.Generator().manual_seed(37)
    q = torch.randn(B, T, R * H, K, generator=gen)
    kk = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k, v = torch.randn(B, T, H, K, generator=gen) * 0.5, torch.randn(B, T, H, V, generator=gen)
    a, b = -kk, kk * torch.rand(B, T, H, K, generator=gen)
    gk = -torch.rand(B, T, H, K, generator=gen)
    h0 = torch.randn(B, H, K, V, generator=gen) * 0.1
    do, dht = torch.randn(B, T, R * H, V, generator=gen), torch.randn(B, H, K, V, generator=gen)
    run = getattr(fla, name)
    grouped = [x.clone().requires_grad_() for x in (q, k, v, a, b, gk, h0)]
    o, final = run(*grouped[:-1], initial_state=grouped[-1], output_final_state=True)
    ((o * do).sum() + (final * dht).sum()).backward()
    repeated = [x.clone().requires_grad_() for x in (q, k, v, a, b, gk, h0)]
    o_rep, final_rep = run(repeated[0], *(_repeat(x, R) for x in repeated[1:-1]),
                           initial_state=_repeat_state(repeated[-1], R), output_final_state=True)
    ((o_rep * do).sum() + (final_rep[:, ::R] * dht).sum()).backward()
    assert torch.equal(o, o_rep) and torch.equal(final, final_rep[:, ::R])
    for x, y in zip(grouped, repeated):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["chunk_retention", "fused_recurrent_retention", "chunk_lightning_attn",
                                  "fused_recurrent_lightning_attn", "chunk_simple_gla", "fused_recurrent_simple_gla"])
def test_decays_fixed_per_key_value_head(name):
    """Retention (1 − 2^(−5−h)), lightning attention (−8/H·(1 − 1/4)·h at layer 1 of 4) and g_gamma set
    their decays per head: with query groups, per key/value head h, as the fp64 oracle has them."""
    B, T, H, R, K, V = 1, 65, 2, 3, 6, 4
    q, k, v, _, _ = _inputs("gated", B, T, H, R, K, V, seed=9)
    heads = torch.arange(H, dtype=torch.float64)
    gamma = -torch.linspace(0.1, 1.0, H)
    run = getattr(fla, name)
    if "retention" in name:
        o, final = run(q, k, v, output_final_state=True)
        log_decay = torch.log1p(-torch.exp2(-5.0 - heads))
    elif "lightning" in name:
        o, final = run(q, k, v, 1, 4, output_final_state=True)
        log_decay = -(8 / H * (1 - 1 / 4)) * heads
    else:
        o, final = run(q, k, v, g_gamma=gamma, output_final_state=True)
        log_decay = gamma.double()
    o_ref, final_ref = _oracle("gated", q, k, v, log_decay.view(1, 1, H).expand(B, T, H), None, K ** -0.5)
    torch.testing.assert_close(o.double(), o_ref, rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(final.double(), final_ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("rule", ["linear", "gated_per_key", "gated_delta"])
def test_gradients_are_the_repeated_calls_summed_over_each_group(rule):
    """dq as the repeated call's; dk, dv, dg, dbeta and the initial state's gradient are the repeated call's
    summed over each group of query heads (the ONNX operator's graph: k, v and the gates feed R heads)."""
    B, T, H, R, K, V = 1, 65, 2, 2, 6, 5
    q, k, v, g, beta = _inputs(rule, B, T, H, R, K, V, seed=11)
    h0 = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(2)) * 0.1
    do = torch.randn(B, T, R * H, V, generator=torch.Generator().manual_seed(4))
    dht = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(6))
    leaves = [x for x in (q, k, v, g, beta, h0) if x is not None]
    for run in RULES[rule]:
        grouped = [x.clone().requires_grad_() for x in leaves]
        o, final = run(*_with_none(grouped, g, beta), initial_state=grouped[-1], output_final_state=True)
        ((o * do).sum() + (final * dht).sum()).backward()
        repeated = [x.clone().requires_grad_() for x in leaves]
        qr, kr, vr, gr, br = _with_none(repeated, g, beta)
        o_rep, final_rep = run(qr, _repeat(kr, R), _repeat(vr, R), _repeat(gr, R), _repeat(br, R),
                               initial_state=_repeat_state(repeated[-1], R), output_final_state=True)
        # The final state: one per key/value head, so the repeated call's first head of each group carries dht.
        ((o_rep * do).sum() + (final_rep[:, ::R] * dht).sum()).backward()
        for a, b in zip(grouped, repeated):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def _with_none(tensors, g, beta):
    """(q, k, v, g, beta) from the leaves, with None where the rule has no g or beta."""
    it = iter(tensors)
    q, k, v = next(it), next(it), next(it)
    return q, k, v, (next(it) if g is not None else None), (next(it) if beta is not None else None)


def _repeat_state(h0, R):
    return h0.repeat_interleave(R, 1)


@pytest.mark.parametrize("rule", ["gated_per_key", "gated_delta"])
@pytest.mark.parametrize("mode", [0, 1], ids=["chunk", "fused_recurrent"])
def test_fp64_gradcheck(rule, mode):
    """Gradients to q, k, v, g, beta and the initial state against finite differences (fp64: the oracle)."""
    q, k, v, g, beta = _inputs(rule, 1, 5, 1, 2, 3, 2, dtype=torch.float64, seed=13)
    h0 = torch.randn(1, 1, 3, 2, dtype=torch.float64) * 0.1
    leaves = [x.requires_grad_() for x in (q, k, v, g, beta, h0) if x is not None]

    def f(*xs):
        return RULES[rule][mode](*_with_none(xs[:-1], g, beta), initial_state=xs[-1], output_final_state=True)

    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-6)


def test_packed_sequences_with_an_empty_one():
    rule, H, R, K, V = "gated_delta", 2, 2, 5, 3
    cu = torch.tensor([0, 17, 17, 50])
    q, k, v, g, beta = _inputs(rule, 1, 50, H, R, K, V, seed=17)
    h0 = torch.randn(3, H, K, V, generator=torch.Generator().manual_seed(5))
    for run in RULES[rule]:
        o, final = run(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
        for n in range(3):
            s, e = int(cu[n]), int(cu[n + 1])
            o_ref, final_ref = _oracle(rule, q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], K ** -0.5,
                                       h0[n:n + 1])
            torch.testing.assert_close(o[:, s:e].double(), o_ref, rtol=2e-4, atol=2e-4)
            torch.testing.assert_close(final[n:n + 1].double(), final_ref, rtol=2e-4, atol=2e-4)


def test_bfloat16():
    rule = "gated_delta"
    q, k, v, g, beta = _inputs(rule, 1, 33, 2, 2, 8, 8, seed=19)
    half = [x.bfloat16() for x in (q, k, v, g, beta)]
    o, final = RULES[rule][0](*half, output_final_state=True)
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32
    o_ref, _ = _oracle(rule, *half, 8 ** -0.5)
    torch.testing.assert_close(o.double(), o_ref, rtol=2e-2, atol=2e-2)


def test_parallel_forms_score_per_query_head():
    B, T, H, R, K, V = 1, 9, 2, 3, 4, 3
    q, k, v, g, _ = _inputs("gated", B, T, H, R, K, V, seed=23)
    o, scores = fla.parallel_simple_gla(q, k, v, g, output_attentions=True)
    o_rep, scores_rep = fla.parallel_simple_gla(q, _repeat(k, R), _repeat(v, R), _repeat(g, R),
                                                output_attentions=True)
    assert scores.shape == (B, R * H, T, T)
    torch.testing.assert_close(o, o_rep, rtol=0, atol=0)
    torch.testing.assert_close(scores, scores_rep, rtol=1e-6, atol=1e-6)


def _spy(monkeypatch, name):
    """Records (q's storage, k, v, q's strides, q's heads) of each call of _fla_ops.<name>."""
    seen, forward = [], getattr(_fla_ops, name)

    def spy(q, k, v, *rest):
        seen.append((q.untyped_storage().data_ptr(), k.data_ptr(), v.data_ptr(), q.stride(), q.shape[2]))
        return forward(q, k, v, *rest)

    monkeypatch.setattr(_fla_ops, name, spy)
    return seen


def test_the_operators_take_query_groups_natively(monkeypatch):
    """No copy of q, k or v, and one state pass: the decayed family's operators take the grouped q themselves,
    forward and backward; the delta rule's forward too, and a call that records a graph (whose chunked backward
    does not take query groups) runs R passes over strided views of the caller's q."""
    q, k, v, g, beta = _inputs("gated_delta", 1, 20, 2, 3, 4, 4, seed=29)
    seen = _spy(monkeypatch, "decayed_forward")
    qg = q.clone().requires_grad_()
    o, _ = fla.chunk_simple_gla(qg, k, v, g=g)
    o.sum().backward()
    assert [(s[0], s[4]) for s in seen] == [(qg.untyped_storage().data_ptr(), 6)] and qg.grad.shape == q.shape
    seen = _spy(monkeypatch, "delta_forward")
    fla.chunk_gated_delta_rule(q, k, v, g, beta)
    assert [s[4] for s in seen] == [6] and seen[0][:3] == (q.untyped_storage().data_ptr(), k.data_ptr(), v.data_ptr())
    seen.clear()
    fla.chunk_gated_delta_rule(q.requires_grad_(), k, v, g, beta)
    assert len(seen) == 3
    for q_ptr, k_ptr, v_ptr, stride, heads in seen:
        assert (q_ptr, k_ptr, v_ptr, heads) == (q.untyped_storage().data_ptr(), k.data_ptr(), v.data_ptr(), 2)
        assert stride[2] == 3 * 4  # every third query head


def test_refusals_name_the_argument():
    q = torch.randn(1, 4, 4, 3)
    k = torch.randn(1, 4, 2, 3)
    with pytest.raises(ValueError, match=r"v: with q's 4 heads grouped over k's 2 .* together are not supported"):
        fla.chunk_gated_delta_rule(q, k, torch.randn(1, 4, 4, 3), -torch.rand(1, 4, 4), torch.rand(1, 4, 4))
    with pytest.raises(ValueError, match=r"k: expected q's 3 heads, got 2 .*; or a divisor of them"):
        fla.chunk_simple_gla(torch.randn(1, 4, 3, 3), k, torch.randn(1, 4, 2, 3))
    with pytest.raises(ValueError, match=r"g: expected shape \[B, T, HV\] = \[1, 4, 2\]"):
        fla.chunk_simple_gla(q, k, torch.randn(1, 4, 2, 3), g=-torch.rand(1, 4, 4))


# ---- against ONNX's reference implementation of the operator ----------------------------------------

onnx_rules = {"linear": "linear", "gated": "gated", "gated_per_key": "gated", "delta": "delta",
              "gated_delta": "gated_delta"}


def _onnx_linear_attention(update_rule, q, k, v, g, beta, past_state, R):
    """ONNX's LinearAttention (opset 27) by onnx.reference on [B, T, H·D] packed inputs: (o, present_state)
    as torch tensors in linattn's layout."""
    onnx = pytest.importorskip("onnx", reason="onnx (pinned in scripts/test.sh) has the reference "
                                              "LinearAttention operator")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    B, T, HQ, K = q.shape
    H, V = k.shape[2], v.shape[3]
    feeds = {"query": q.reshape(B, T, HQ * K), "key": k.reshape(B, T, H * K), "value": v.reshape(B, T, H * V),
             "past_state": past_state}
    if g is not None:
        feeds["decay"] = g.reshape(B, T, -1)
    if beta is not None:
        feeds["beta"] = beta
    names = ["query", "key", "value", "past_state", "decay" if g is not None else "", "beta" if beta is not None
             else ""]
    node = helper.make_node("LinearAttention", names, ["output", "present_state"], q_num_heads=HQ, kv_num_heads=H,
                            update_rule=update_rule)
    floats = TensorProto.FLOAT
    graph = helper.make_graph([node], "linear_attention",
                              [helper.make_tensor_value_info(n, floats, None) for n in feeds],
                              [helper.make_tensor_value_info(n, floats, None) for n in ("output", "present_state")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    out, state = ReferenceEvaluator(model).run(None, {n: x.numpy() for n, x in feeds.items()})
    return torch.from_numpy(out).reshape(B, T, HQ, V), torch.from_numpy(state)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("R", [1, 2, 4])
def test_against_onnx_reference_prefill_then_decode(rule, R):
    """A prompt of 40 tokens (chunked), then 3 decode steps (token by token with the state), each against
    onnx.reference's LinearAttention with past_state."""
    B, T, H, K, V = 2, 43, 2, 8, 6
    q, k, v, g, beta = _inputs(rule, B, T, H, R, K, V, seed=31 + R)
    state = torch.zeros(B, H, K, V)
    chunk, step = RULES[rule]
    o, state_fla = chunk(*(None if x is None else x[:, :40] for x in (q, k, v, g, beta)), output_final_state=True)
    o_onnx, state_onnx = _onnx_linear_attention(onnx_rules[rule], *(None if x is None else x[:, :40]
                                                                     for x in (q, k, v, g, beta)), state, R)
    torch.testing.assert_close(o, o_onnx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state_fla, state_onnx, rtol=1e-4, atol=1e-4)
    for t in range(40, T):
        sl = [None if x is None else x[:, t:t + 1] for x in (q, k, v, g, beta)]
        o, state_fla = step(*sl, initial_state=state_fla, output_final_state=True)
        o_onnx, state_onnx = _onnx_linear_attention(onnx_rules[rule], *sl, state_onnx, R)
        torch.testing.assert_close(o, o_onnx, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(state_fla, state_onnx, rtol=1e-4, atol=1e-4)


# ---- linattn.torch: softmax and linear attention, and the scaled_dot_product_attention drop-ins ---------


@pytest.mark.parametrize("name, options", [("softmax_attention", {}), ("softmax_attention", {"causal": True}),
                                           ("linear_attention", {}), ("linear_attention", {"causal": True}),
                                           ("linear_attention", {"feature_map": "favor", "n_features": 16})])
def test_torch_attention_equals_the_repeated_call(name, options):
    """q [B, N, R·H, D] over k, v [B, N, H, D]: the call with k and v repeated per query head, forward and
    gradients (dk, dv summed over each group)."""
    import linattn.torch as lt

    B, Nq, Nk, H, R, D, E = 2, 33, 40, 2, 3, 8, 5
    gen = torch.Generator().manual_seed(41)
    q, k, v = (torch.randn(B, n, h, d, generator=gen) for n, h, d in ((Nq, R * H, D), (Nk, H, D), (Nk, H, E)))
    do = torch.randn(B, Nq, R * H, E, generator=gen)
    run = getattr(lt, name)
    grouped = [x.clone().requires_grad_() for x in (q, k, v)]
    o = run(*grouped, layout="bnhd", **options)
    (o * do).sum().backward()
    repeated = [x.clone().requires_grad_() for x in (q, k, v)]
    o_rep = run(repeated[0], _repeat(repeated[1], R), _repeat(repeated[2], R), layout="bnhd", **options)
    (o_rep * do).sum().backward()
    assert o.shape == (B, Nq, R * H, E)
    torch.testing.assert_close(o, o_rep, rtol=1e-6, atol=1e-6)
    for x, y in zip(grouped, repeated):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_scaled_dot_product_attention_gqa_against_torch_without_repeating(is_causal, monkeypatch):
    """linattn.torch.scaled_dot_product_attention(enable_gqa=True) on the kernel path: torch's own result, and
    key and value go to the kernel unrepeated (repeat_interleave is not called)."""
    import linattn.torch as lt

    gen = torch.Generator().manual_seed(43)
    query, key, value = (torch.randn(2, h, n, 8, generator=gen) for h, n in ((6, 17), (2, 23), (2, 23)))
    want = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal, enable_gqa=True)

    def refuse(*args, **kwargs):
        raise AssertionError("key/value repeated per query head")

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", refuse)
    got = lt.scaled_dot_product_attention(query, key, value, is_causal=is_causal, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_torch_compile_traces_query_groups():
    """torch.compile(fullgraph=True): the operators' fake shapes have q's heads, so a grouped call traces without
    a graph break and gives the eager result."""
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile needs torch 2")
    q, k, v, g, beta = _inputs("gated_delta", 1, 33, 2, 2, 8, 8, seed=47)
    gla = torch.compile(lambda q, k, v, g: fla.chunk_simple_gla(q, k, v, g=g)[0], fullgraph=True)
    gdn = torch.compile(lambda q, k, v, g, b: fla.chunk_gated_delta_rule(q, k, v, g, b)[0], fullgraph=True)
    assert torch.equal(gla(q, k, v, g), fla.chunk_simple_gla(q, k, v, g=g)[0])
    assert torch.equal(gdn(q, k, v, g, beta), fla.chunk_gated_delta_rule(q, k, v, g, beta)[0])
