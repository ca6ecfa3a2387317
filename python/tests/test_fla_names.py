"""linattn.fla's names and keywords against flash-linear-attention's (issue 39 items 1 and 4) and its
messages for bad input (issue 42 item 15): the fused_chunk_*, parallel_* and lightning attention forms
against the fp64 naive recurrences (written from the maths in test_fla.py and test_delta.py),
keywords accepted and ignored exactly where flash-linear-attention's functions take **kwargs, and each
refusal naming its argument."""

import inspect
import math

import pytest

torch = pytest.importorskip("torch", reason="linattn.fla takes torch tensors")

from linattn import fla  # noqa: E402
from test_delta import naive as naive_delta  # noqa: E402
from test_fla import assert_close, naive, retention_log_decay  # noqa: E402

# flash-linear-attention's functions of the families linattn.fla has (fla/ops/*/{chunk,fused_chunk,
# fused_recurrent,parallel}.py), and whether each takes **kwargs.
FLA_KWARGS = {
    "chunk_linear_attn": False, "fused_chunk_linear_attn": False, "fused_recurrent_linear_attn": False,
    "chunk_retention": True, "fused_chunk_retention": True, "fused_recurrent_retention": True,
    "parallel_retention": True,
    "chunk_simple_gla": True, "fused_chunk_simple_gla": False, "fused_recurrent_simple_gla": True,
    "parallel_simple_gla": True,
    "chunk_gla": False, "fused_chunk_gla": True, "fused_recurrent_gla": True,
    "chunk_lightning_attn": True, "fused_recurrent_lightning_attn": True,
    "chunk_delta_rule": True, "fused_chunk_delta_rule": True, "fused_recurrent_delta_rule": False,
    "chunk_gated_delta_rule": True, "fused_recurrent_gated_delta_rule": True,
    "chunk_kda": True, "fused_recurrent_kda": True,
}
# What transformers passes along to the kernels of its linear-attention models.
MODEL_KEYWORDS = dict(use_cache=True, output_router_logits=False, position_embeddings=None, input_ids=None,
                      cu_seq_lens_q=None, cu_seq_lens_k=None, max_length_q=7, max_length_k=7)
F64 = torch.float64


def inputs(B=2, T=13, H=3, K=5, V=4, seed=0, dtype=F64):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, n, generator=generator, dtype=dtype) * 0.5 for n in (K, K, V))
    g = -torch.rand(B, T, H, generator=generator, dtype=dtype) * 0.3
    gk = -torch.rand(B, T, H, K, generator=generator, dtype=dtype) * 0.3
    beta = torch.rand(B, T, H, generator=generator, dtype=dtype)
    h0 = torch.randn(B, H, K, V, generator=generator, dtype=dtype) * 0.5
    return q, k, v, g, gk, beta, h0


def per_key(g, K):
    return g.unsqueeze(-1).expand(*g.shape, K)


def constant(decays, q):
    """A constant log decay per head as [B, T, H, K]."""
    B, T, H, K = q.shape
    return decays.to(q.dtype).view(1, 1, H, 1).expand(B, T, H, K)


def test_every_name_of_the_families_is_there_with_kwargs_exactly_where_fla_has_them():
    for name, takes_kwargs in FLA_KWARGS.items():
        assert name in fla.__all__, name
        kinds = [p.kind for p in inspect.signature(getattr(fla, name)).parameters.values()]
        assert (inspect.Parameter.VAR_KEYWORD in kinds) == takes_kwargs, name


def test_model_keywords_are_ignored_where_fla_takes_kwargs():
    q, k, v, g, gk, beta, h0 = inputs(dtype=torch.float32)
    calls = {
        "chunk_retention": lambda **kw: fla.chunk_retention(q, k, v, **kw),
        "fused_chunk_retention": lambda **kw: fla.fused_chunk_retention(q, k, v, **kw),
        "fused_recurrent_retention": lambda **kw: fla.fused_recurrent_retention(q, k, v, **kw),
        "parallel_retention": lambda **kw: fla.parallel_retention(q, k, v, **kw),
        "chunk_simple_gla": lambda **kw: fla.chunk_simple_gla(q, k, v, g=g, **kw),
        "fused_recurrent_simple_gla": lambda **kw: fla.fused_recurrent_simple_gla(q, k, v, g=g, **kw),
        "parallel_simple_gla": lambda **kw: fla.parallel_simple_gla(q, k, v, g=g, **kw),
        "fused_chunk_gla": lambda **kw: fla.fused_chunk_gla(q, k, v, gk, **kw),
        "fused_recurrent_gla": lambda **kw: fla.fused_recurrent_gla(q, k, v, gk=gk, **kw),
        "chunk_lightning_attn": lambda **kw: fla.chunk_lightning_attn(q, k, v, layer_idx=1, num_layers=4, **kw),
        "fused_recurrent_lightning_attn": lambda **kw: fla.fused_recurrent_lightning_attn(q, k, v, 1, 4, **kw),
        "chunk_delta_rule": lambda **kw: fla.chunk_delta_rule(q, k, v, beta, **kw),
        "fused_chunk_delta_rule": lambda **kw: fla.fused_chunk_delta_rule(q, k, v, beta, **kw),
        "chunk_gated_delta_rule": lambda **kw: fla.chunk_gated_delta_rule(q, k, v, g, beta, **kw),
        "fused_recurrent_gated_delta_rule": lambda **kw: fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta,
                                                                                              **kw),
        "chunk_kda": lambda **kw: fla.chunk_kda(q, k, v, gk, beta, **kw),
        "fused_recurrent_kda": lambda **kw: fla.fused_recurrent_kda(q, k, v, gk, beta, **kw),
    }
    assert set(calls) == {name for name, takes in FLA_KWARGS.items() if takes}
    for name, call in calls.items():
        want, got = call()[0], call(**MODEL_KEYWORDS)[0]
        assert torch.equal(got, want), name


def test_unknown_keywords_are_refused_where_fla_takes_none():
    q, k, v, g, gk, beta, _ = inputs(dtype=torch.float32)
    for call in (lambda: fla.chunk_linear_attn(q, k, v, use_cache=True),
                 lambda: fla.fused_chunk_linear_attn(q, k, v, use_cache=True),
                 lambda: fla.fused_recurrent_linear_attn(q, k, v, use_cache=True),
                 lambda: fla.fused_chunk_simple_gla(q, k, v, g, use_cache=True),
                 lambda: fla.chunk_gla(q, k, v, gk, use_cache=True),
                 lambda: fla.fused_recurrent_delta_rule(q, k, v, beta, use_cache=True)):
        with pytest.raises(TypeError, match="use_cache"):
            call()


def test_what_cannot_be_honoured_is_still_refused_by_name():
    q, k, v, g, gk, beta, _ = inputs(dtype=torch.float32)
    with pytest.raises(NotImplementedError, match="gv"):
        fla.fused_recurrent_gla(q, k, v, gk=gk, gv=torch.zeros_like(v), use_cache=True)
    with pytest.raises(NotImplementedError, match="cp_context"):
        fla.chunk_gated_delta_rule(q, k, v, g, beta, cp_context=object(), use_cache=True)
    with pytest.raises(NotImplementedError, match="return_intermediate_states"):
        fla.chunk_kda(q, k, v, gk, beta, return_intermediate_states=True, use_cache=True)
    with pytest.raises(DeprecationWarning, match="head_first"):
        fla.parallel_simple_gla(q, k, v, g, head_first=False)
    with pytest.raises(ValueError, match="chunk_size"):
        fla.chunk_lightning_attn(q, k, v, 0, 2, chunk_size=48)
    with pytest.raises(ValueError, match="output_attentions"):
        fla.parallel_retention(q[:1], k[:1], v[:1], output_attentions=True, cu_seqlens=torch.tensor([0, 4, 13]))


# ----------------------------------------------------------------------------------------------
# The new names against the fp64 naive recurrences.


@pytest.mark.parametrize("final", [False, True])
def test_fused_chunk_forms(final):
    q, k, v, g, gk, beta, h0 = inputs()
    scale = 0.7
    H, K = q.shape[2], q.shape[3]
    cases = [
        ("fused_chunk_linear_attn", fla.fused_chunk_linear_attn(q, k, v, scale, h0, final, normalize=False),
         naive(q, k, v, torch.zeros_like(q), scale, h0)),
        ("fused_chunk_retention", fla.fused_chunk_retention(q, k, v, scale, h0, final),
         naive(q, k, v, constant(retention_log_decay(H), q), scale, h0)),
        ("fused_chunk_simple_gla", fla.fused_chunk_simple_gla(q, k, v, g, None, scale, h0, final),
         naive(q, k, v, per_key(g, K), scale, h0)),
        ("fused_chunk_gla", fla.fused_chunk_gla(q, k, v, gk, scale, h0, final), naive(q, k, v, gk, scale, h0)),
        ("fused_chunk_delta_rule", fla.fused_chunk_delta_rule(q, k, v, beta, scale, h0, final),
         naive_delta(q, k, v, beta, None, scale, h0)),
    ]
    for name, (o, state), (want_o, want_state) in cases:
        assert_close(o, want_o, 1e-10, f"{name} o")
        if final:
            assert_close(state, want_state, 1e-10, f"{name} final state")
        else:
            assert state is None, name


def test_fused_chunk_forms_packed_float32():
    q, k, v, g, gk, beta, _ = inputs(B=1, dtype=torch.float32)
    cu = torch.tensor([0, 4, 4, 13])
    o, _ = fla.fused_chunk_gla(q, k, v, gk, cu_seqlens=cu)
    want, _ = naive(*(x.double() for x in (q, k, v, gk)), q.shape[-1] ** -0.5, cu=cu.tolist())
    assert_close(o, want, 2e-4, "fused_chunk_gla packed")
    o, _ = fla.fused_chunk_delta_rule(q, k, v, beta, cu_seqlens=cu)
    want, _ = naive_delta(*(x.double() for x in (q, k, v, beta)), None, q.shape[-1] ** -0.5, cu=cu.tolist())
    assert_close(o, want, 2e-4, "fused_chunk_delta_rule packed")


def naive_scores(q, k, log_decay, scale):
    """scale·q_i·k_j·exp(Σ_{j<s≤i} log_decay_s) for j ≤ i, else 0, entry by entry [B, H, T, T]."""
    B, T, H, _ = q.shape
    scores = torch.zeros(B, H, T, T, dtype=F64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(i + 1):
                    decay = math.exp(float(log_decay[b, j + 1:i + 1, h].sum())) if log_decay is not None else 1.0
                    scores[b, h, i, j] = scale * float(q[b, i, h] @ k[b, j, h]) * decay
    return scores


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_parallel_forms(dtype):
    q, k, v, g, *_ = inputs(T=9, dtype=dtype)
    tol = 1e-10 if dtype == F64 else 2e-4
    wide = [x.double() for x in (q, k, v, g)]
    scale = q.shape[-1] ** -0.5
    o, scores = fla.parallel_simple_gla(q, k, v, g, output_attentions=True)
    assert_close(o, naive(*wide[:3], per_key(wide[3], q.shape[-1]), scale)[0], tol, "parallel_simple_gla o")
    assert scores.dtype == dtype
    assert_close(scores, naive_scores(wide[0], wide[1], wide[3], scale), tol, "parallel_simple_gla scores")
    H = q.shape[2]
    o, scores = fla.parallel_retention(q, k, v, scale=0.5, output_attentions=True)
    log_decay = retention_log_decay(H).view(1, 1, H).expand(q.shape[:3])
    assert_close(o, naive(*wide[:3], constant(retention_log_decay(H), wide[0]), 0.5)[0], tol, "parallel_retention o")
    assert_close(scores, naive_scores(wide[0], wide[1], log_decay, 0.5), tol, "parallel_retention scores")
    o, none = fla.parallel_simple_gla(q, k, v)  # no decay, no scores
    assert none is None
    assert_close(o, naive(*wide[:3], torch.zeros_like(wide[0]), scale)[0], tol, "parallel_simple_gla without g")
    # Packed sequences: each one alone.
    cu = torch.tensor([0, 5, 9])
    o, none = fla.parallel_simple_gla(q[:1], k[:1], v[:1], g[:1], cu_seqlens=cu)
    want = naive(*(x[:1] for x in wide[:3]), per_key(wide[3][:1], q.shape[-1]), scale, cu=cu.tolist())[0]
    assert none is None
    assert_close(o, want, tol, "parallel_simple_gla packed")


def lightning_log_decays(H, layer_idx, num_layers):
    """flash-linear-attention's slope rule, from its definition: head h decays by −8/H·(1 − l/L)·h."""
    return torch.tensor([-(8 / H) * (1 - layer_idx / num_layers) * h for h in range(H)], dtype=F64)


@pytest.mark.parametrize("layer_idx, num_layers", [(0, 1), (1, 4), (3, 4)])
def test_lightning_attention(layer_idx, num_layers):
    q, k, v, _, _, _, h0 = inputs(H=4, T=11)
    decays = constant(lightning_log_decays(4, layer_idx, num_layers), q)
    want_o, want_state = naive(q, k, v, decays, q.shape[-1] ** -0.5, h0)
    for name in ("chunk_lightning_attn", "fused_recurrent_lightning_attn"):
        o, state = getattr(fla, name)(q, k, v, layer_idx=layer_idx, num_layers=num_layers, initial_state=h0,
                                      output_final_state=True)
        assert_close(o, want_o, 1e-10, f"{name} o")
        assert_close(state, want_state, 1e-10, f"{name} state")
    o, _ = fla.fused_recurrent_lightning_attn(q, k, v, layer_idx, num_layers, reverse=True)
    flipped = naive(q.flip(1), k.flip(1), v.flip(1), decays, q.shape[-1] ** -0.5)[0].flip(1)
    assert_close(o, flipped, 1e-10, "fused_recurrent_lightning_attn reverse")
    with pytest.raises(ValueError, match="num_layers"):
        fla.chunk_lightning_attn(q, k, v, 0, 0)
    with pytest.raises(TypeError, match="layer_idx"):
        fla.chunk_lightning_attn(q, k, v, 0.5, 4)


def test_chunk_kda_use_graph_and_max_num_seqs():
    q, k, v, _, gk, beta, h0 = inputs()
    want = naive_delta(q, k, v, beta, gk, q.shape[-1] ** -0.5, h0)
    o, state = fla.chunk_kda(q, k, v, gk, beta, initial_state=h0, output_final_state=True, use_graph=True,
                             max_num_seqs=2)
    assert_close(o, want[0], 1e-10, "chunk_kda o")
    assert_close(state, want[1], 1e-10, "chunk_kda state")
    params = inspect.signature(fla.chunk_kda).parameters
    assert params["use_graph"].default is False and params["max_num_seqs"].default is None


# ----------------------------------------------------------------------------------------------
# Issue 42 item 15: messages that name the argument.

CHUNK_AND_RECURRENT = [
    ("chunk_simple_gla", lambda q, k, v, g, beta, **kw: fla.chunk_simple_gla(q, k, v, g, **kw)),
    ("fused_recurrent_simple_gla", lambda q, k, v, g, beta, **kw: fla.fused_recurrent_simple_gla(q, k, v, g, **kw)),
    ("chunk_gated_delta_rule", lambda q, k, v, g, beta, **kw: fla.chunk_gated_delta_rule(q, k, v, g, beta, **kw)),
    ("fused_recurrent_gated_delta_rule",
     lambda q, k, v, g, beta, **kw: fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, **kw)),
]
NAMES = [name for name, _ in CHUNK_AND_RECURRENT]


@pytest.mark.parametrize("name, call", CHUNK_AND_RECURRENT, ids=NAMES)
def test_zero_key_dim_or_heads_names_the_argument(name, call):
    q, k, v, g, _, beta, _ = inputs(dtype=torch.float32)
    no_k = q[..., :0]
    with pytest.raises(ValueError, match=r"q: the key dimension K is 0"):
        call(no_k, no_k, v, g, beta)
    no_heads = [x[:, :, :0] for x in (q, k, v, g, beta)]
    with pytest.raises(ValueError, match=r"q: the number of heads H is 0"):
        call(*no_heads)


@pytest.mark.parametrize("name, call", CHUNK_AND_RECURRENT, ids=NAMES)
def test_scale_not_a_number_names_scale(name, call):
    q, k, v, g, _, beta, _ = inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"scale: expected a number.*'abc'"):
        call(q, k, v, g, beta, scale="abc")
    with pytest.raises(TypeError, match=r"scale: expected a number"):
        call(q, k, v, g, beta, scale=[1.0])


@pytest.mark.parametrize("name", ["fused_recurrent_linear_attn", "fused_recurrent_retention",
                                  "fused_recurrent_simple_gla", "fused_recurrent_gla", "fused_recurrent_delta_rule",
                                  "fused_recurrent_gated_delta_rule", "fused_recurrent_kda",
                                  "fused_recurrent_lightning_attn"])
def test_fused_recurrent_wrong_initial_state_names_initial_state(name):
    q, k, v, g, gk, beta, h0 = inputs(dtype=torch.float32)
    extra = {"fused_recurrent_simple_gla": dict(g=g), "fused_recurrent_gla": dict(gk=gk),
             "fused_recurrent_delta_rule": dict(beta=beta), "fused_recurrent_gated_delta_rule": dict(g=g, beta=beta),
             "fused_recurrent_kda": dict(g=gk, beta=beta),
             "fused_recurrent_lightning_attn": dict(layer_idx=0, num_layers=2)}.get(name, {})
    wrong = h0.transpose(-1, -2).contiguous()  # [B, H, V, K]: the other layout
    with pytest.raises(ValueError, match=r"^initial_state: expected shape \[N, H, K, V\] = \[2, 3, 5, 4\], got "
                                         r"\[2, 3, 4, 5\]"):
        getattr(fla, name)(q, k, v, initial_state=wrong, **extra)
    if "state_v_first" in inspect.signature(getattr(fla, name)).parameters:  # the message in the caller's layout
        with pytest.raises(ValueError, match=r"^initial_state: expected shape \[N, H, V, K\] = \[2, 3, 4, 5\], got "
                                             r"\[2, 3, 5, 4\]"):
            getattr(fla, name)(q, k, v, initial_state=h0, state_v_first=True, **extra)


@pytest.mark.parametrize("name, call", CHUNK_AND_RECURRENT, ids=NAMES)
@pytest.mark.parametrize("cu", [[], [0], torch.tensor([], dtype=torch.long), torch.tensor([0])],
                         ids=["empty list", "[0]", "empty tensor", "tensor [0]"])
def test_cu_seqlens_empty_or_one_offset_is_refused(name, call, cu):
    q, k, v, g, _, beta, _ = (x[:1] for x in inputs(dtype=torch.float32))
    with pytest.raises(ValueError, match=r"^cu_seqlens: expected N \+ 1 ≥ 2 offsets"):
        call(q, k, v, g, beta, cu_seqlens=cu)
