"""linattn.mamba (mamba_ssm's mamba_chunk_scan_combined and selective_state_update) against an fp64 oracle
written here from Mamba-2's recurrence, token by token:

    dt_t = clamp(softplus(dt_t + dt_bias), dt_limit)
    h_t  = exp(dt_t·A)·h_{t−1} + dt_t·B_t x_tᵀ          (h: [N, P] per head)
    y_t  = (C_tᵀ h_t + D·x_t)·silu(z_t)

forward, final and per-sequence states, gradients (gradcheck in fp64; fp32 against the oracle's
autograd), the decode step against the chunked scan, extreme gates, half precision, the refusals, and
(with transformers) its torch fallbacks and tiny models of the six Mamba-2 families."""

import importlib
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from linattn import mamba
from linattn_test_support import rel_err

INF = float("inf")

# ----------------------------------------------------------------------------------------------
# The oracle.


def oracle(x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, dt_limit=(0.0, INF), h0=None,
           starts=None):
    """y [batch, L, H, P] and the state after every token [batch, L, H, P, N], in fp64 (differentiable).
    starts [batch, L] (bool): where a sequence begins; the state restarts from zero there (from h0[b] at
    t = 0). h0 [batch, H, P, N]."""
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    batch, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    group = torch.arange(H) // (H // G)  # the group each head reads
    rows, states = [], []
    for b in range(batch):
        h = x.new_zeros(H, N, P) if h0 is None else h0[b].double().transpose(-1, -2)
        ys, hs = [], []
        for t in range(L):
            if t > 0 and starts is not None and starts[b, t]:
                h = x.new_zeros(H, N, P)
            step = dt[b, t] + (0 if dt_bias is None else dt_bias.double())
            if dt_softplus:
                step = torch.log1p(torch.exp(step))
            step = step.clamp(min=dt_limit[0], max=dt_limit[1])
            decay = torch.exp(step * A)
            h = decay[:, None, None] * h + step[:, None, None] * B[b, t, group][:, :, None] * x[b, t][:, None, :]
            y = torch.einsum("hn,hnp->hp", C[b, t, group], h)
            if D is not None:
                y = y + (D.double()[:, None] if D.dim() == 1 else D.double()) * x[b, t]
            if z is not None:
                zt = z[b, t].double()
                y = y * zt * torch.sigmoid(zt)
            ys.append(y)
            hs.append(h.transpose(-1, -2))
        rows.append(torch.stack(ys))
        states.append(torch.stack(hs))
    return torch.stack(rows), torch.stack(states)


def starts_of(seq_idx):
    new = torch.ones_like(seq_idx, dtype=torch.bool)
    new[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
    return new


# ----------------------------------------------------------------------------------------------
# Inputs.


def draw(batch, L, H, P, G, N, seed=0, dt_lo=0.01, dt_hi=1.0, A_lo=-2.0, A_hi=-0.1):
    """Every tensor input in float64: x, dt (raw, before bias and softplus), A, B, C, D [H, P], D1 [H], z,
    dt_bias, h0."""
    gen = torch.Generator().manual_seed(seed)

    def u(*shape, lo=-1.0, hi=1.0):
        return torch.rand(*shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo

    return dict(x=u(batch, L, H, P), dt=u(batch, L, H, lo=dt_lo, hi=dt_hi), A=u(H, lo=A_lo, hi=A_hi),
                B=u(batch, L, G, N), C=u(batch, L, G, N), D=u(H, P), D1=u(H), z=u(batch, L, H, P, lo=-3, hi=3),
                dt_bias=u(H, lo=-2, hi=0.5), h0=u(batch, H, P, N))


def run(t, dtype=torch.float32, grad=False, **options):
    """mamba_chunk_scan_combined on the tensors of draw() (as `dtype`), with `options`; grad=True makes the
    inputs require gradients (the call then goes through autograd's custom operators)."""
    cast = {k: v.detach().to(dtype).requires_grad_(grad) for k, v in t.items()}
    chunk_size = options.pop("chunk_size", 64)
    return mamba.mamba_chunk_scan_combined(cast["x"], cast["dt"], cast["A"], cast["B"], cast["C"], chunk_size,
                                           **{k: (cast[v] if isinstance(v, str) else v) for k, v in options.items()})


# The options of a full Mamba-2 call, by the names of draw()'s tensors.
ALL = dict(D="D", z="z", dt_bias="dt_bias", dt_softplus=True, dt_limit=(0.05, 1.5), initial_states="h0",
           return_final_states=True)


def oracle_options(t, options):
    """The oracle's keyword arguments for a call's options: tensors by their draw() names, initial_states
    as h0, and what only shapes the call's return left out."""
    out = {}
    for k, v in options.items():
        if k in ("return_final_states", "return_varlen_states", "seq_idx", "cu_seqlens", "chunk_size", "state_dtype"):
            continue
        out["h0" if k == "initial_states" else k] = t[v] if isinstance(v, str) else v
    return out


def oracle_of(t, options, **extra):
    """The oracle over draw()'s tensors with the options of a call (as ALL names them)."""
    return oracle(**{k: t[k] for k in ("x", "dt", "A", "B", "C")}, **oracle_options(t, options), **extra)


# ----------------------------------------------------------------------------------------------
# Forward.


@pytest.mark.parametrize("T", [1, 63, 65, 97])
@pytest.mark.parametrize("H,G", [(3, 1), (4, 4), (6, 2)])
@pytest.mark.parametrize("grad", [False, True])
def test_forward_and_final_state_match_the_oracle(T, H, G, grad):
    t = draw(2, T, H, 5, G, 7, seed=T * 10 + H)
    out, final = run(t, grad=grad, **ALL)
    want, states = oracle_of(t, ALL)
    assert out.dtype == torch.float32 and final.dtype == torch.float32
    assert final.shape == (2, H, 5, 7)
    assert rel_err(out.detach(), want) < 2e-5
    assert rel_err(final.detach(), states[:, -1]) < 2e-5


@pytest.mark.parametrize("options", [
    {},
    dict(D="D1"),
    dict(D="D", z="z"),
    dict(dt_bias="dt_bias", dt_softplus=True),
    dict(dt_limit=(0.2, 0.6)),
    dict(initial_states="h0", return_final_states=True),
], ids=["plain", "D_per_head", "D_and_z", "softplus", "dt_limit", "initial_states"])
def test_each_option_alone(options):
    t = draw(2, 65, 4, 3, 2, 5, seed=7)
    t["dt"] = t["dt"] * 2 - 0.5  # some negative raw time steps: the default dt_limit clamps them to 0
    got = run(t, **options)
    out = got[0] if isinstance(got, tuple) else got
    want, states = oracle_of(t, options)
    assert rel_err(out, want) < 2e-5
    if isinstance(got, tuple):
        assert rel_err(got[1], states[:, -1]) < 2e-5


def test_float64_runs_the_oracle():
    t = draw(2, 37, 4, 3, 2, 5, seed=3)
    out, final = run(t, dtype=torch.float64, **ALL)
    want, states = oracle_of(t, ALL)
    assert out.dtype == torch.float64
    assert rel_err(out, want) < 1e-12 and rel_err(final, states[:, -1]) < 1e-12


@pytest.mark.parametrize("chunk_size", [1, 16, np.int64(17), 256])  # any integer type, as a config may hold it
def test_any_chunk_size_gives_the_oracles_result(chunk_size):
    t = draw(1, 97, 4, 3, 1, 5, seed=4)
    out, final = run(t, chunk_size=chunk_size, grad=True, **ALL)
    want, states = oracle_of(t, ALL)
    assert rel_err(out.detach(), want) < 2e-5 and rel_err(final.detach(), states[:, -1]) < 2e-5


@pytest.mark.parametrize("grad", [False, True])
def test_strided_views_as_the_models_pass_them(grad):
    """x, z, B, C and dt split out of one projection (strides differing from extents), A and D
    broadcast views: the same result as contiguous copies."""
    batch, L, H, P, G, N = 2, 65, 4, 3, 2, 5
    t = draw(batch, L, H, P, G, N, seed=23)
    proj = torch.cat([t["z"].reshape(batch, L, -1), t["x"].reshape(batch, L, -1), t["B"].reshape(batch, L, -1),
                      t["C"].reshape(batch, L, -1), t["dt"]], -1).float().requires_grad_(grad)
    z, x, B, C, dt = proj.split([H * P, H * P, G * N, G * N, H], dim=-1)
    options = dict(dt_bias=t["dt_bias"].float(), dt_softplus=True, initial_states=t["h0"].float(),
                   return_final_states=True)
    D = t["D1"].float()[:, None].expand(H, P)
    got = mamba.mamba_chunk_scan_combined(x.view(batch, L, H, P), dt, t["A"].float(), B.view(batch, L, G, N),
                                          C.view(batch, L, G, N), 64, D=D, z=z.view(batch, L, H, P), **options)
    want = run(t, grad=grad, D="D1", z="z", dt_bias="dt_bias", dt_softplus=True, initial_states="h0",
               return_final_states=True)
    assert not x.is_contiguous()
    assert rel_err(got[0].detach(), want[0].detach()) < 1e-6 and rel_err(got[1].detach(), want[1].detach()) < 1e-6


# ----------------------------------------------------------------------------------------------
# Packed sequences.


@pytest.mark.parametrize("grad", [False, True])
def test_seq_idx_restarts_each_sequence(grad):
    t = draw(2, 65, 4, 3, 2, 5, seed=5)
    seq_idx = torch.zeros(2, 65, dtype=torch.int32)
    seq_idx[0, 20:] = 1
    seq_idx[0, 21:] = 2  # a sequence of one token
    seq_idx[1, 64:] = 3  # the last token alone; numbers may skip
    out, final = run(t, grad=grad, seq_idx=seq_idx, **ALL)
    want, states = oracle_of(t, ALL, starts=starts_of(seq_idx))
    assert rel_err(out.detach(), want) < 2e-5
    assert rel_err(final.detach(), states[:, -1]) < 2e-5


@pytest.mark.parametrize("with_seq_idx", [True, False])
def test_varlen_states_with_an_empty_sequence(with_seq_idx):
    t = draw(1, 97, 4, 3, 2, 5, seed=6)
    cu = torch.tensor([0, 30, 30, 64, 65, 97, 97])  # empty ones inside and at the end, and one of one token
    lengths = cu[1:] - cu[:-1]
    seq_idx = torch.repeat_interleave(torch.arange(6), lengths)[None] if with_seq_idx else None
    out, final, varlen = run(t, seq_idx=seq_idx, cu_seqlens=cu, return_varlen_states=True, **ALL)
    starts = torch.zeros(1, 97, dtype=torch.bool)
    starts[0, cu[:-1][lengths > 0]] = True
    apart, apart_states = oracle_of(t, ALL, starts=starts)
    # Each sequence's own final state; an empty one's is zero (only the first starts from h0), and the
    # final state is the last token's, not the empty last sequence's.
    want_varlen = torch.stack([apart_states[0, e - 1] if e > b else torch.zeros(4, 3, 5)
                               for b, e in zip(cu[:-1].tolist(), cu[1:].tolist())])
    assert varlen.shape == (6, 4, 3, 5)
    assert rel_err(varlen, want_varlen) < 2e-5
    # mamba_ssm reads cu_seqlens for the varlen states only: without seq_idx the output runs across them.
    want, states = (apart, apart_states) if with_seq_idx else oracle_of(t, ALL)
    assert rel_err(out, want) < 2e-5
    assert rel_err(final, states[:, -1]) < 2e-5


def test_varlen_first_sequence_empty_keeps_the_initial_state():
    t = draw(1, 20, 2, 3, 1, 4, seed=8)
    cu = torch.tensor([0, 0, 12, 20])
    seq_idx = torch.repeat_interleave(torch.arange(3), cu[1:] - cu[:-1])[None]
    out, varlen = run(t, seq_idx=seq_idx, cu_seqlens=cu, return_varlen_states=True, initial_states="h0")
    starts = torch.zeros(1, 20, dtype=torch.bool)
    starts[0, [0, 12]] = True
    want, states = oracle_of(t, {}, starts=starts)
    assert rel_err(out, want) < 2e-5
    assert rel_err(varlen[0], t["h0"][0]) < 1e-7
    assert rel_err(varlen[1:], states[0, [11, 19]]) < 2e-5


# ----------------------------------------------------------------------------------------------
# Gradients.


def _differentiable(t, dtype, options):
    names = ["x", "dt", "A", "B", "C"] + [v for v in options.values() if isinstance(v, str)]
    return names, [t[n].detach().to(dtype).requires_grad_(True) for n in names]


def _call(names, tensors, options, **extra):
    by_name = dict(zip(names, tensors))
    return mamba.mamba_chunk_scan_combined(
        by_name["x"], by_name["dt"], by_name["A"], by_name["B"], by_name["C"], 64,
        **{k: (by_name[v] if isinstance(v, str) else v) for k, v in options.items()}, **extra)


@pytest.mark.parametrize("packed", [False, True])
def test_gradcheck_every_input(packed):
    t = draw(2, 5, 4, 3, 2, 2, seed=9)
    extra = {}
    if packed:
        extra["seq_idx"] = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]])
    names, tensors = _differentiable(t, torch.float64, ALL)
    assert torch.autograd.gradcheck(lambda *ts: _call(names, ts, ALL, **extra), tensors, eps=1e-6, atol=1e-7)


def test_gradcheck_varlen_and_per_head_D():
    t = draw(1, 6, 2, 2, 1, 3, seed=10)
    options = dict(D="D1", dt_bias="dt_bias", dt_softplus=True, initial_states="h0", return_final_states=True)
    extra = dict(cu_seqlens=torch.tensor([0, 2, 2, 6]), return_varlen_states=True)
    names, tensors = _differentiable(t, torch.float64, options)
    assert torch.autograd.gradcheck(lambda *ts: _call(names, ts, options, **extra), tensors, eps=1e-6, atol=1e-7)


def gradient_errors(t, options):
    """rel_err of each input's float32 gradient against the oracle's autograd in fp64, for a random linear
    loss on out and final_states."""
    names, tensors = _differentiable(t, torch.float32, options)
    out, final = _call(names, tensors, options)
    gen = torch.Generator().manual_seed(1)
    w_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    w_fin = torch.randn(final.shape, generator=gen, dtype=torch.float64)
    ((out.double() * w_out).sum() + (final.double() * w_fin).sum()).backward()
    names64, exact = _differentiable(t, torch.float64, options)
    want, states = oracle_of(dict(t, **dict(zip(names64, exact))), options)
    ((want * w_out).sum() + (states[:, -1] * w_fin).sum()).backward()
    return {name: rel_err(got.grad, ref.grad) for name, got, ref in zip(names, tensors, exact)}


@pytest.mark.parametrize("T", [1, 65, 97])
def test_float32_gradients_match_the_oracles_autograd(T):
    errors = gradient_errors(draw(2, T, 6, 5, 2, 7, seed=11 + T), ALL)
    assert max(errors.values()) < 1e-4, errors


# ----------------------------------------------------------------------------------------------
# The decode step.


def test_selective_state_update_token_by_token_equals_the_scan():
    batch, L, H, P, G, N = 2, 9, 6, 5, 3, 7
    t = draw(batch, L, H, P, G, N, seed=12)
    f32 = {k: v.float() for k, v in t.items()}
    pool = torch.randn(4, H, P, N, generator=torch.Generator().manual_seed(3))
    slots = torch.tensor([2, 0])
    untouched = pool[[1, 3]].clone()
    want, final = mamba.mamba_chunk_scan_combined(
        f32["x"], f32["dt"], f32["A"], f32["B"], f32["C"], 64, D=f32["D"], z=f32["z"], dt_bias=f32["dt_bias"],
        dt_softplus=True, initial_states=pool[slots].clone(), return_final_states=True)
    where = pool.data_ptr()
    # As the models pass them: A, dt, D and dt_bias broadcast over headdim (and A over dstate).
    A = f32["A"][:, None, None].expand(H, P, N)
    D = f32["D"]
    dt_bias = f32["dt_bias"][:, None].expand(H, P)
    outs = []
    for i in range(L):
        outs.append(mamba.selective_state_update(
            pool, f32["x"][:, i], f32["dt"][:, i, :, None].expand(batch, H, P), A, f32["B"][:, i], f32["C"][:, i],
            D, z=f32["z"][:, i], dt_bias=dt_bias, dt_softplus=True, state_batch_indices=slots))
    assert pool.data_ptr() == where  # in place
    assert torch.equal(pool[[1, 3]], untouched)
    assert rel_err(torch.stack(outs, 1), want) < 2e-5
    assert rel_err(pool[slots], final) < 2e-5


def test_selective_state_update_forms_agree():
    """One value per head ([H] for A, D, dt_bias; [batch, H] for dt) and mamba_ssm's materialized
    broadcast give the same step; the one-head form equals the scan with H = 1."""
    batch, H, P, G, N = 3, 4, 3, 2, 5
    t = {k: v.float() for k, v in draw(batch, 1, H, P, G, N, seed=13).items()}
    args = (t["x"][:, 0], t["B"][:, 0], t["C"][:, 0])
    s1 = t["h0"].clone()
    o1 = mamba.selective_state_update(s1, args[0], t["dt"][:, 0], t["A"], *args[1:], t["D1"], dt_bias=t["dt_bias"],
                                      dt_softplus=True)
    s2 = t["h0"].clone()
    o2 = mamba.selective_state_update(
        s2, args[0], t["dt"][:, 0, :, None].repeat(1, 1, P), t["A"][:, None, None].repeat(1, P, N), *args[1:],
        t["D1"][:, None].repeat(1, P), dt_bias=t["dt_bias"][:, None].repeat(1, P), dt_softplus=True)
    assert rel_err(o2, o1) < 1e-6 and rel_err(s2, s1) < 1e-6

    one = {k: v.float() for k, v in draw(batch, 1, 1, P, 1, N, seed=14).items()}
    s3 = one["h0"][:, 0].clone()  # [batch, headdim, dstate]
    o3 = mamba.selective_state_update(s3, one["x"][:, 0, 0], one["dt"][:, 0].expand(batch, P),
                                      one["A"][:, None].expand(P, N), one["B"][:, 0, 0], one["C"][:, 0, 0],
                                      one["D"][0], z=one["z"][:, 0, 0])
    want, final = run(one, D="D", z="z", initial_states="h0", return_final_states=True)
    assert o3.shape == (batch, P) and s3.shape == (batch, P, N)
    assert rel_err(o3, want[:, 0, 0]) < 2e-5 and rel_err(s3, final[:, 0]) < 2e-5


def step_oracle(state, x, dt, A, B, C, D, z, dt_bias):
    """mamba_ssm's step elementwise in fp64: A [H, P, N], dt [batch, H, P], dt_bias and D [H, P]; softplus."""
    H, G = x.shape[1], B.shape[1]
    group = torch.arange(H) // (H // G)
    step = F.softplus(dt.double() + dt_bias.double())[..., None]  # [batch, H, P, 1]
    new = torch.exp(step * A.double()) * state.double() + step * B.double()[:, group, None, :] * x.double()[..., None]
    y = (new * C.double()[:, group, None, :]).sum(-1) + D.double() * x.double()
    return y * F.silu(z.double()), new


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float64, 1e-13)])
def test_selective_state_update_takes_A_dt_and_dt_bias_varying_over_headdim_and_dstate(dtype, tol):
    """mamba_ssm's general step (A [H, P, N], dt and dt_bias per head dim; Mamba-1's one-head form is the
    same with H = 1), against the step written elementwise; the state a strided view (a slice of a
    larger cache), updated through it."""
    gen = torch.Generator().manual_seed(24)
    for batch, H, P, G, N, heads in ((2, 4, 3, 2, 5, True), (3, 1, 6, 1, 4, False)):
        state = torch.randn(batch, H, P + 1, N + 2, generator=gen, dtype=dtype)[:, :, 1:, 2:]
        x, z, dt = (torch.randn(batch, H, P, generator=gen, dtype=dtype) for _ in range(3))
        A = -torch.rand(H, P, N, generator=gen, dtype=dtype) * 2
        B, C = (torch.randn(batch, G, N, generator=gen, dtype=dtype) for _ in range(2))
        D, dt_bias = (torch.randn(H, P, generator=gen, dtype=dtype) for _ in range(2))
        want_y, want_state = step_oracle(state, x, dt, A, B, C, D, z, dt_bias)
        args = (state, x, dt, A, B, C, D, z, dt_bias)
        if not heads:  # mamba_ssm's one-head form: the head axis left out everywhere
            args = tuple(t.squeeze(0) if t.dim() in (2, 3) and t.shape[0] == 1 else t.squeeze(1) for t in args)
        got = mamba.selective_state_update(*args[:7], z=args[7], dt_bias=args[8], dt_softplus=True)
        assert got.shape == ((batch, H, P) if heads else (batch, P))
        assert got.dtype == dtype and not state.is_contiguous()
        assert rel_err(got.reshape(want_y.shape), want_y) < tol
        assert rel_err(state, want_state) < tol


def test_selective_state_update_half_state_is_rounded_in_place():
    t = {k: v.float() for k, v in draw(2, 1, 2, 3, 1, 4, seed=15).items()}
    state = t["h0"].to(torch.bfloat16)
    start = state.float()
    out = mamba.selective_state_update(state, t["x"][:, 0], t["dt"][:, 0], t["A"], t["B"][:, 0], t["C"][:, 0])
    want, states = oracle(t["x"], t["dt"], t["A"], t["B"], t["C"], h0=start)
    assert state.dtype == torch.bfloat16 and out.dtype == torch.float32
    assert rel_err(state, states[:, 0]) < 1e-2
    assert rel_err(out, want[:, 0]) < 2e-5


# ----------------------------------------------------------------------------------------------
# Extreme gates and half precision.


@pytest.mark.parametrize("grad", [False, True])
def test_decay_of_minus_30_per_token(grad):
    """dt·A = −30 every token: the state keeps only its last token (e^−30 ≈ 1e−13 of the one before)."""
    t = draw(2, 97, 4, 3, 2, 5, seed=16)
    t["dt"] = torch.ones_like(t["dt"])
    t["A"] = torch.full_like(t["A"], -30.0)
    options = dict(D="D", z="z", initial_states="h0", return_final_states=True)
    out, final = run(t, grad=grad, **options)
    want, states = oracle_of(t, options)
    assert rel_err(out.detach(), want) < 2e-6
    assert rel_err(final.detach(), states[:, -1]) < 2e-6


def test_decay_spread_to_minus_30_gradients():
    """dt·A drawn in [−30, 0] per token: the fp32 gradients still follow the oracle's."""
    t = draw(1, 65, 2, 3, 1, 4, seed=17, dt_lo=0.0, dt_hi=1.0, A_lo=-30.0, A_hi=-29.0)
    errors = gradient_errors(t, dict(D="D", initial_states="h0", return_final_states=True))
    assert max(errors.values()) < 2e-4, errors


@pytest.mark.parametrize("grad", [False, True])
def test_time_steps_near_zero(grad):
    """dt ≈ 1e−6: decays of 1 − 1e−6 and updates a million times smaller than x; the state is a long
    sum of tiny terms, held to fp32's relative precision."""
    t = draw(2, 97, 4, 3, 2, 5, seed=18, dt_lo=1e-7, dt_hi=2e-6)
    options = dict(initial_states="h0", return_final_states=True)
    out, final = run(t, grad=grad, **options)
    want, states = oracle_of(t, options)
    assert rel_err(out.detach(), want) < 2e-6
    assert rel_err(final.detach(), states[:, -1]) < 2e-6
    t["h0"].zero_()  # without an initial state the output is the tiny updates alone
    out, _ = run(t, grad=grad, **options)
    want, _ = oracle_of(t, {})
    assert rel_err(out.detach(), want) < 2e-5


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(half):
    t = draw(2, 65, 4, 3, 2, 5, seed=19)
    rounded = {k: v.to(half).double() for k, v in t.items()}
    out, final = run(rounded, dtype=half, **ALL)
    want, states = oracle_of(rounded, ALL)
    assert out.dtype == half and final.dtype == half  # states in C's dtype, as in mamba_ssm
    assert rel_err(out, want) < 1e-2 and rel_err(final, states[:, -1]) < 1e-2
    out, final = run(rounded, dtype=half, state_dtype=torch.float32, **ALL)
    assert final.dtype == torch.float32 and rel_err(final, states[:, -1]) < 2e-5


# ----------------------------------------------------------------------------------------------
# The torch path transformers' Mamba-2 family falls back to (the code the hook replaces).


def test_matches_transformers_torch_path():
    mixer = pytest.importorskip("transformers.models.mamba2.modeling_mamba2",
                                reason="transformers is optional (its torch Mamba-2 path is the comparison)")
    t = {k: v.float() for k, v in draw(2, 70, 4, 3, 2, 5, seed=20).items()}
    common = dict(D=t["D1"], dt_bias=t["dt_bias"], dt_softplus=True, dt_limit=(0.0, 2.0),
                  initial_states=t["h0"], return_final_states=True)
    want, want_final = inspect.unwrap(mixer.mamba2_chunk_scan)(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=16,
                                                           **common)
    got, final = mamba.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, **common)
    assert rel_err(got, want) < 2e-5 and rel_err(final, want_final) < 2e-5
    H, P, N = 4, 3, 5
    s1, s2 = t["h0"].clone(), t["h0"].clone()
    step = (t["x"][:, 0], t["dt"][:, 0, :, None].expand(2, H, P), t["A"][:, None, None].expand(H, P, N),
            t["B"][:, 0], t["C"][:, 0], t["D1"][:, None].expand(H, P))
    want = inspect.unwrap(mixer.mamba2_selective_state_update)(s1, *step, z=t["z"][:, 0], dt_softplus=True,
                                                           dt_bias=t["dt_bias"][:, None].expand(H, P))
    got = mamba.selective_state_update(s2, *step, z=t["z"][:, 0], dt_softplus=True,
                                       dt_bias=t["dt_bias"][:, None].expand(H, P))
    assert rel_err(got, want) < 2e-5 and rel_err(s2, s1) < 2e-5


_SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
# The six families whose mixers call mamba_ssm's two functions, as tiny configs: 8 heads of 8, 2 groups,
# state 16, chunks of 16, one Mamba-2 layer beside an attention layer where the family is hybrid.
FAMILIES = {
    "mamba2": ("Mamba2", dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8,
                              state_size=16, n_groups=2, expand=2, chunk_size=16)),
    "bamba": ("Bamba", dict(_SMALL, num_hidden_layers=2, attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=8,
                            mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=16)),
    "falcon_h1": ("FalconH1", dict(_SMALL, num_hidden_layers=2, head_dim=8, mamba_d_ssm=64, mamba_n_heads=8,
                                   mamba_d_head=8, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=16)),
    "granitemoehybrid": ("GraniteMoeHybrid", dict(_SMALL, num_hidden_layers=2, layer_types=["mamba", "attention"],
                                                  mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=16,
                                                  mamba_chunk_size=16, num_local_experts=2, num_experts_per_tok=1,
                                                  shared_intermediate_size=32)),
    "zamba2": ("Zamba2", dict(_SMALL, num_hidden_layers=2, layers_block_type=["mamba", "hybrid"], mamba_d_state=16,
                              mamba_ngroups=2, n_mamba_heads=8, chunk_size=16)),
    "nemotron_h": ("NemotronH", dict(_SMALL, head_dim=8, layers_block_type=["mamba", "attention"], ssm_state_size=16,
                                     mamba_num_heads=8, mamba_head_dim=8, n_groups=2, chunk_size=16)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_transformers_families_match_their_torch_path(family, monkeypatch):
    """A tiny random model of each family, its two scan functions replaced by linattn.mamba's (called as
    transformers' hub wrapper calls an implementation: only the keyword arguments its signature names),
    gives its own torch path's logits and greedy tokens."""
    transformers = pytest.importorskip("transformers", reason="transformers is optional (the models compared)")
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    prefix, config = FAMILIES[family]
    torch.manual_seed(0)
    model = getattr(transformers, prefix + "ForCausalLM")(getattr(transformers, prefix + "Config")(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the initialisation's zeros, so that every mixer path counts
            p.normal_(0, 0.3)
    ids = torch.randint(0, 64, (2, 37), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = model(ids).logits
        want_tokens = model.generate(ids[:, :10], attention_mask=mask[:, :10], max_new_tokens=6, do_sample=False)
    calls = []

    def as_the_hub_calls(f):
        names = set(inspect.signature(f).parameters)

        def call(*args, **kwargs):
            calls.append(f.__name__)
            return f(*args, **{k: v for k, v in kwargs.items() if k in names})

        return call

    monkeypatch.setattr(modeling, "mamba2_chunk_scan", as_the_hub_calls(mamba.mamba_chunk_scan_combined))
    monkeypatch.setattr(modeling, "mamba2_selective_state_update", as_the_hub_calls(mamba.selective_state_update))
    with torch.no_grad():
        got = model(ids).logits
        tokens = model.generate(ids[:, :10], attention_mask=mask[:, :10], max_new_tokens=6, do_sample=False)
    assert {"mamba_chunk_scan_combined", "selective_state_update"} <= set(calls)
    assert rel_err(got, want) < 1e-5
    assert torch.equal(tokens, want_tokens)


# ----------------------------------------------------------------------------------------------
# Refusals, by name.


def _good():
    t = {k: v.float() for k, v in draw(1, 8, 4, 3, 2, 5, seed=21).items()}
    return dict(x=t["x"], dt=t["dt"], A=t["A"], B=t["B"], C=t["C"], chunk_size=64), t


SCAN_REFUSALS = [
    (dict(x=torch.zeros(8, 4, 3)), ValueError, "x: expected 4 dims"),
    (dict(x=torch.zeros(1, 8, 4, 3, dtype=torch.int32)), TypeError, "x: expected float32"),
    (dict(x=torch.zeros(1, 8, 4, 3, device="meta")), TypeError, "x: expected a CPU tensor"),
    (dict(x=torch.zeros(1, 0, 4, 3), dt=torch.zeros(1, 0, 4), B=torch.zeros(1, 0, 2, 5), C=torch.zeros(1, 0, 2, 5)),
     ValueError, "x: expected at least one token"),
    (dict(dt=torch.zeros(1, 8, 3)), ValueError, r"dt: expected shape \[batch, seqlen, nheads\]"),
    (dict(A=torch.zeros(4, 1)), ValueError, r"A: expected shape \[nheads\]"),
    (dict(B=torch.zeros(1, 8, 3, 5), C=torch.zeros(1, 8, 3, 5)), ValueError, "B: .*ngroups dividing nheads = 4"),
    (dict(C=torch.zeros(1, 8, 2, 6)), ValueError, "C: expected shape"),
    (dict(D=torch.zeros(3)), ValueError, "D: expected shape"),
    (dict(z=torch.zeros(1, 8, 4, 2)), ValueError, "z: expected shape"),
    (dict(dt_bias=torch.zeros(4, 3)), ValueError, "dt_bias: expected shape"),
    (dict(initial_states=torch.zeros(1, 4, 5, 3)), ValueError, "initial_states: expected shape"),
    (dict(chunk_size=0), ValueError, "chunk_size: expected a positive int"),
    (dict(dt_limit=(1.0, 0.5)), ValueError, "dt_limit: expected min ≤ max"),
    (dict(dt_limit=3.0), TypeError, "dt_limit: expected a pair"),
    (dict(seq_idx=torch.zeros(1, 8)), TypeError, "seq_idx: expected integers"),
    (dict(seq_idx=torch.zeros(1, 7, dtype=torch.int32)), ValueError, "seq_idx: expected shape"),
    (dict(seq_idx=torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1]])), ValueError, "seq_idx: expected non-decreasing"),
    (dict(seq_idx=torch.tensor([[1] * 8]), initial_states=torch.zeros(1, 4, 3, 5)), ValueError,
     "initial_states with seq_idx"),
    (dict(return_varlen_states=True), ValueError, "cu_seqlens: return_varlen_states=True needs cu_seqlens"),
    (dict(return_varlen_states=True, cu_seqlens=torch.tensor([0, 3, 7])), ValueError,
     "cu_seqlens: expected .* ascending from 0 to seqlen = 8"),
    (dict(return_varlen_states=True, cu_seqlens=torch.tensor([0, 3, 8]), seq_idx=torch.tensor([[0] * 4 + [1] * 4])),
     ValueError, "seq_idx: its sequences must start where cu_seqlens"),
    (dict(state_dtype=torch.int32), TypeError, "state_dtype"),
]


@pytest.mark.parametrize("change,error,match", SCAN_REFUSALS, ids=[m.split(":")[0] + str(i)
                                                                    for i, (_, _, m) in enumerate(SCAN_REFUSALS)])
def test_scan_refuses_bad_arguments_by_name(change, error, match):
    args, _ = _good()
    args.update(change)
    with pytest.raises(error, match=match):
        mamba.mamba_chunk_scan_combined(**args)


def test_varlen_needs_batch_one():
    args, _ = _good()
    args.update(x=args["x"].expand(2, -1, -1, -1), dt=args["dt"].expand(2, -1, -1), B=args["B"].expand(2, -1, -1, -1),
                C=args["C"].expand(2, -1, -1, -1), cu_seqlens=torch.tensor([0, 8]), return_varlen_states=True)
    with pytest.raises(ValueError, match="x: return_varlen_states .* needs batch 1"):
        mamba.mamba_chunk_scan_combined(**args)


def _step_args():
    H, P, N = 4, 3, 5
    t = {k: v.float() for k, v in draw(2, 1, H, P, 2, N, seed=22).items()}
    return dict(state=t["h0"].clone(), x=t["x"][:, 0], dt=t["dt"][:, 0, :, None].expand(2, H, P),
                A=t["A"][:, None, None].expand(H, P, N), B=t["B"][:, 0], C=t["C"][:, 0])


STEP_REFUSALS = [
    (dict(state=torch.zeros(2, 4, 3)), ValueError, "x: expected shape"),
    (dict(state=torch.zeros(3, 4, 3, 5)), ValueError, "state: expected batch 2"),
    (dict(state_batch_indices=torch.tensor([0, 2])), ValueError, r"state_batch_indices: expected slots in \[0, 2\)"),
    (dict(state_batch_indices=torch.tensor([1, 1])), ValueError, "state_batch_indices: a slot appears twice"),
    (dict(state_batch_indices=torch.tensor([0.0, 1.0])), TypeError, "state_batch_indices: expected integers"),
    (dict(B=torch.zeros(2, 3, 5)), ValueError, "B: .*ngroups dividing nheads = 4"),
    (dict(C=torch.zeros(2, 2, 4)), ValueError, "C: expected shape"),
    (dict(D=torch.zeros(5)), ValueError, "D: expected shape"),
    (dict(z=torch.zeros(2, 4, 2)), ValueError, "z: expected shape"),
    (dict(x=torch.zeros(2, 4, 3, dtype=torch.complex64)), TypeError, "x: expected float32"),
]


@pytest.mark.parametrize("change,error,match", STEP_REFUSALS, ids=[m.split(":")[0] + str(i)
                                                                    for i, (_, _, m) in enumerate(STEP_REFUSALS)])
def test_step_refuses_bad_arguments_by_name(change, error, match):
    args = _step_args()
    args.update(change)
    before = args["state"].clone()
    with pytest.raises(error, match=match):
        mamba.selective_state_update(**args)
    assert torch.equal(args["state"], before)  # nothing written
