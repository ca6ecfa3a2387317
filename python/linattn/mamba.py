"""Mamba-2's state space duality (SSD) with mamba_ssm's interface, on the CPU, computed by linattn.

The names, arguments, defaults, layouts and returns are mamba_ssm's (mamba_ssm.ops.triton.ssd_combined.
mamba_chunk_scan_combined and mamba_ssm.ops.triton.selective_state_update.selective_state_update), so
that a Mamba-2 mixer ports by changing one import. Per head h, with P the head dim, N the state size and
G groups of B and C, each read by H/G consecutive heads (head h reads group h // (H/G)):

    dt_t = softplus(dt_t + dt_bias_h) (dt_softplus), then clamped to dt_limit
    h_t  = exp(dt_t·A_h)·h_{t−1} + dt_t·B_t x_tᵀ          h: [N, P]
    y_t  = C_tᵀ h_t + D_h·x_t, then y_t·silu(z_t) if z is given

This is simple GLA (linattn.fla.chunk_simple_gla) with q = C, k = B, v = dt·x, g = dt·A (a log decay
per head and token), scale 1, K = N and V = P, the G groups being fla's grouped value heads (q and k with
G heads, v with H: B and C are never copied out per head); mamba_ssm's states [batch, H, P, N] are flash-linear-
attention's [N, H, K, V] transposed, which fla's state_v_first=True takes and gives. mamba_chunk_scan_combined
runs the recurrence in linattn.fla (its token-by-token forward, the faster one on the CPU, and its
chunked backward); the time step, D and the z gate are torch ops, so autograd
reaches x, dt, A, B, C, D, z, dt_bias and initial_states. selective_state_update advances mamba_ssm's
[P, N] state in place with torch's batched products (the decode step, where the transposes to fla's
layout would cost more than the step).

float32 inputs run linattn's fast operators; float64 (x's dtype decides) runs the fp64 oracle, token by
token, for gradcheck; bfloat16 and float16 are widened to float32 and the output rounded back to x's
dtype, as in mamba_ssm. docs/mamba.md has the mapping, what is refused and the fp32 error at extreme
gates.
"""

import numbers

import torch
import torch.nn.functional as F

from . import fla

__all__ = ["mamba_chunk_scan_combined", "selective_state_update"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ---- argument checks ------------------------------------------------------------------------------


def _tensor(name, t, layout, dims=None):
    """t, checked to be a floating CPU tensor (with `dims` dimensions when given)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor {layout}, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise TypeError(f"{name}: expected a CPU tensor (linattn runs on the CPU), got device {t.device}")
    if t.dtype not in _FLOATS:
        raise TypeError(f"{name}: expected float32 (float64 runs the fp64 oracle; bfloat16 and float16 run in "
                        f"float32), got {t.dtype}")
    if dims is not None and t.dim() != dims:
        raise ValueError(f"{name}: expected {dims} dims {layout}, got {t.dim()} (shape {list(t.shape)})")
    return t


def _shaped(name, t, shape, layout):
    """t, checked to be a floating CPU tensor of exactly `shape` (a tuple, or a list of allowed ones)."""
    _tensor(name, t, layout)
    allowed = shape if isinstance(shape, list) else [shape]
    if tuple(t.shape) not in [tuple(s) for s in allowed]:
        want = " or ".join(str(list(s)) for s in allowed)
        raise ValueError(f"{name}: expected shape {layout} = {want}, got {list(t.shape)}")
    return t


def _indices(name, t, shape, layout):
    """An integer CPU tensor of `shape`, as int64."""
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    if t.device.type != "cpu":
        raise TypeError(f"{name}: expected a CPU tensor, got device {t.device}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name}: expected integers, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {layout} = {list(shape)}, got {list(t.shape)}")
    return t.to(torch.int64)


def _dt_limit(dt_limit):
    try:
        lo, hi = (float(v) for v in dt_limit)
    except (TypeError, ValueError):
        raise TypeError(f"dt_limit: expected a pair (min, max) of numbers, got {dt_limit!r}") from None
    if not lo <= hi:
        raise ValueError(f"dt_limit: expected min ≤ max, got {dt_limit!r}")
    return lo, hi


def _narrowed(t):
    """t with each broadcast axis (stride 0, as the models pass A, dt, D and dt_bias to the step) narrowed to
    size 1: the same values under broadcasting, computed once instead of once per element."""
    return t[tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(t.stride(), t.shape))]


# ---- the arithmetic shared by both functions ------------------------------------------------------


def _time_steps(dt, dt_bias, dt_softplus, dt_limit, work):
    """dt [..., H] after its bias, softplus (mamba_ssm's: x above 20 kept as is, as F.softplus does) and
    clamp, in the working dtype."""
    dt = dt.to(work)
    if dt_bias is not None:
        dt = dt + dt_bias.to(work)
    if dt_softplus:
        dt = F.softplus(dt)
    if dt_limit is not None:
        dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    return dt


def _recurrence(x, dt, A, B, C, initial, cu_seqlens, want_final, work):
    """(y [batch, L, H, P], final states [S, H, P, N] or None) of h_t = exp(dt_t·A)·h_{t−1} + dt_t·B_t x_tᵀ,
    y_t = C_tᵀ h_t, through linattn.fla's simple GLA; dt is the time step after bias, softplus and clamp.
    The forward runs token by token (fused_recurrent_simple_gla, the faster forward on the CPU:
    docs/decayed-attention.md, "Speed"); its gradient is the chunked backward, which fla's autograd runs
    for either forward."""
    # dt scales x rather than B (k vᵀ = B (dt·x)ᵀ): x is the smaller of the two when P < N, as in the models.
    # The G groups are fla's grouped value heads (q = C and k = B with G heads, v with H, head h reading
    # group h // (H / G)): B and C stay the caller's memory, never copied out to H heads.
    v = x.to(work) * dt.unsqueeze(-1)
    g = dt * A.to(work)
    initial = None if initial is None else initial.to(work)
    return fla.fused_recurrent_simple_gla(C.to(work), B.to(work), v, g=g, scale=1.0,
                                          initial_state=initial, output_final_state=want_final,
                                          state_v_first=True, cu_seqlens=cu_seqlens)


def _skip_and_gate(y, x, D, z, work):
    """y + D·x, then y·silu(z); D [H] or [H, P]."""
    if D is not None:
        D = D.to(work)
        y = y + x.to(work) * (D.unsqueeze(-1) if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z.to(work))
    return y


# ---- packed sequences -----------------------------------------------------------------------------


class _Packing:
    """Sequences packed along the time axis: cu [S + 1] over the flattened batch·L tokens, first[b] the
    segment whose initial state is initial_states[b] and last[b] the one whose final state is row b's."""

    def __init__(self, cu, first, last):
        self.cu, self.first, self.last = cu, first, last

    def initial(self, initial_states, like_shape, work):
        """[S, H, P, N]: initial_states[b] for segment first[b], zeros for the others."""
        if initial_states is None:
            return None
        zeros = torch.zeros((self.cu.numel() - 1, *like_shape), dtype=work)
        return zeros.index_copy(0, self.first, initial_states.to(work))


def _runs(seq_idx, L, initial_given):
    """The packing of seq_idx [batch, L]: a new sequence wherever seq_idx changes along a row, each row's
    first run starting from initial_states[b] (mamba_ssm gives them to the sequence numbered 0)."""
    if seq_idx.shape[1] > 1 and bool((seq_idx[:, 1:] < seq_idx[:, :-1]).any()):
        raise ValueError("seq_idx: expected non-decreasing sequence numbers along each row (one number per "
                         "packed sequence, in order)")
    if initial_given and bool((seq_idx[:, 0] != 0).any()):
        raise ValueError("initial_states with seq_idx: mamba_ssm gives initial_states to the sequence numbered "
                         "0, and a row of seq_idx starts with another; number each row's sequences from 0")
    batch = seq_idx.shape[0]
    new = torch.ones_like(seq_idx, dtype=torch.bool)
    new[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
    starts = new.flatten().nonzero().squeeze(1)
    cu = torch.cat([starts, torch.tensor([batch * L])])
    first = torch.searchsorted(starts, torch.arange(batch) * L)
    last = torch.cat([first[1:] - 1, torch.tensor([starts.numel() - 1])])
    return _Packing(cu, first, last)


def _varlen(cu_seqlens, seq_idx, L):
    """The packing of cu_seqlens (batch 1): its sequences, the first from initial_states, row 0's final
    state the last non-empty one's. seq_idx, when given, must start a sequence exactly where cu_seqlens does."""
    cu = torch.as_tensor(cu_seqlens)
    cu = _indices("cu_seqlens", cu, tuple(cu.shape[:1]), "[num_sequences + 1]")
    if cu.dim() != 1 or cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != L or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"cu_seqlens: expected [num_sequences + 1] offsets ascending from 0 to seqlen = {L}, "
                         f"got {cu.tolist()}")
    nonempty = (cu[1:] > cu[:-1]).nonzero().squeeze(1)
    if seq_idx is not None:
        new = torch.ones(L, dtype=torch.bool)
        new[1:] = seq_idx[0, 1:] != seq_idx[0, :-1]
        if not torch.equal(new.nonzero().squeeze(1), cu[nonempty]):
            raise ValueError("seq_idx: its sequences must start where cu_seqlens's non-empty ones do (mamba_ssm "
                             "builds seq_idx from cu_seqlens)")
    return _Packing(cu, torch.zeros(1, dtype=torch.int64), nonempty[-1:])


# ---- the two functions ----------------------------------------------------------------------------


def _check_scan(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_limit,
                return_varlen_states, state_dtype):
    """mamba_chunk_scan_combined's argument checks; returns (dt_limit as floats, seq_idx as int64 or None)."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    _tensor("x", x, "[batch, seqlen, nheads, headdim]", 4)
    batch, L, H, P = x.shape
    if L == 0:
        raise ValueError("x: expected at least one token (seqlen ≥ 1), got seqlen 0")
    _shaped("dt", dt, (batch, L, H), "[batch, seqlen, nheads]")
    _shaped("A", A, (H,), "[nheads]")
    _tensor("B", B, "[batch, seqlen, ngroups, dstate]", 4)
    G, N = B.shape[2], B.shape[3]
    if B.shape[:2] != (batch, L) or G == 0 or H % G != 0:
        raise ValueError(f"B: expected shape [batch, seqlen, ngroups, dstate] with batch, seqlen = {batch}, {L} "
                         f"and ngroups dividing nheads = {H}, got {list(B.shape)}")
    _shaped("C", C, tuple(B.shape), "[batch, seqlen, ngroups, dstate] (B's shape)")
    if D is not None:
        _shaped("D", D, [(H,), (H, P)], "[nheads] or [nheads, headdim]")
    if z is not None:
        _shaped("z", z, tuple(x.shape), "[batch, seqlen, nheads, headdim] (x's shape)")
    if dt_bias is not None:
        _shaped("dt_bias", dt_bias, (H,), "[nheads]")
    if initial_states is not None:
        _shaped("initial_states", initial_states, (batch, H, P, N), "[batch, nheads, headdim, dstate]")
    if state_dtype is not None and state_dtype not in _FLOATS:
        raise TypeError(f"state_dtype: expected a floating torch dtype or None, got {state_dtype!r}")
    limit = _dt_limit(dt_limit)
    if seq_idx is not None:
        seq_idx = _indices("seq_idx", seq_idx, (batch, L), "[batch, seqlen]")
    if return_varlen_states:
        if cu_seqlens is None:
            raise ValueError("cu_seqlens: return_varlen_states=True needs cu_seqlens [num_sequences + 1]")
        if batch != 1:
            raise ValueError(f"x: return_varlen_states (with cu_seqlens) needs batch 1, got batch {batch}; pack the "
                             "sequences along seqlen")
    return limit, seq_idx


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False, state_dtype=None):
    """Mamba-2's SSD over whole sequences (prefill, training).

    x [batch, seqlen, nheads, headdim], dt [batch, seqlen, nheads], A [nheads], B and C [batch, seqlen,
    ngroups, dstate], D [nheads] or [nheads, headdim], z like x, dt_bias [nheads], initial_states [batch,
    nheads, headdim, dstate], seq_idx [batch, seqlen] (sequence numbers, non-decreasing along a row: the
    recurrence restarts from zero wherever it changes; initial_states belong to sequence 0), cu_seqlens
    [num_sequences + 1] (read only with return_varlen_states, as in mamba_ssm; batch must be 1).

    Returns out [batch, seqlen, nheads, headdim] in x's dtype, then final_states [batch, nheads, headdim,
    dstate] (the state after each row's last token) with return_final_states, then varlen_states
    [num_sequences, nheads, headdim, dstate] (each cu_seqlens sequence's final state) with
    return_varlen_states; states in state_dtype, default C's dtype. chunk_size is checked and otherwise
    unused: the result does not depend on it beyond rounding, and linattn picks its own chunks.
    """
    limit, seq_idx = _check_scan(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
                                 dt_limit, return_varlen_states, state_dtype)
    batch, L, H, P = x.shape
    N = B.shape[3]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    step = _time_steps(dt, dt_bias, dt_softplus, limit, work)

    def packed(packing):
        """The recurrence over the packed sequences: (y, each segment's final state)."""
        flat = [t.reshape(1, batch * L, *t.shape[2:]) for t in (x, step, B, C)]
        initial = packing.initial(initial_states, (H, P, N), work)
        y, finals = _recurrence(flat[0], flat[1], A, flat[2], flat[3], initial, packing.cu, True, work)
        return y.reshape(batch, L, H, P), finals

    varlen_states = None
    if return_varlen_states and seq_idx is None:
        # mamba_ssm reads cu_seqlens for the varlen states only: without seq_idx the output runs across the
        # sequences, and each sequence's state is its own (a second pass, with the sequences apart).
        y, final_states = _recurrence(x, step, A, B, C, initial_states, None, return_final_states, work)
        varlen = _varlen(cu_seqlens, None, L)
        _, varlen_states = packed(varlen)
    elif return_varlen_states:
        varlen = _varlen(cu_seqlens, seq_idx, L)
        y, varlen_states = packed(varlen)
        final_states = varlen_states[varlen.last]
    elif seq_idx is not None:
        runs = _runs(seq_idx, L, initial_states is not None)
        y, finals = packed(runs)
        final_states = finals[runs.last]
    else:
        y, final_states = _recurrence(x, step, A, B, C, initial_states, None, return_final_states, work)

    out = _skip_and_gate(y, x, D, z, work).to(x.dtype)
    states_dtype = C.dtype if state_dtype is None else state_dtype
    result = (out,)
    if return_final_states:
        result += (final_states.to(states_dtype),)
    if return_varlen_states:
        result += (varlen_states.to(states_dtype),)
    return result[0] if len(result) == 1 else result


def _lift(name, t, layout, dims, axis):
    """t (checked), with the axis that mamba_ssm's one-head form leaves out added where t has `dims` dims."""
    _tensor(name, t, layout)
    return t.unsqueeze(axis) if t.dim() == dims else t


def _per_head_or_dim(name, t, H, P, layout):
    """D or dt_bias of selective_state_update as [H, P] (a view): [nheads] is one value per head (with
    several heads; linattn's extension), [headdim] mamba_ssm's one-head form, [nheads, headdim] its own."""
    if t.dim() == 1 and H > 1:
        return _shaped(name, t, (H,), layout).unsqueeze(-1).expand(H, P)
    return _shaped(name, _lift(name, t, layout, 1, 0), (H, P), layout)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    """One token of Mamba-2 per sequence (decoding), updating `state` in place.

    state [batch_state, nheads, headdim, dstate], x [batch, nheads, headdim], dt [batch, nheads, headdim]
    or [batch, nheads], A [nheads, headdim, dstate] or [nheads], B and C [batch, ngroups, dstate], D
    [nheads, headdim] or [nheads], z like x, dt_bias [nheads, headdim] or [nheads], state_batch_indices
    [batch] (row b reads and updates state[state_batch_indices[b]]; without it batch_state = batch).
    mamba_ssm's one-head form (state [batch_state, headdim, dstate], x, dt and z [batch, headdim], A
    [headdim, dstate], B and C [batch, dstate], D and dt_bias [headdim]) is taken too. A, dt and dt_bias
    may vary over headdim and dstate as in mamba_ssm; broadcast ones (stride 0, as the models pass them)
    cost one value per head. No dt_limit: mamba_ssm's step takes none. Returns out [batch, nheads,
    headdim] (or [batch, headdim]) in x's dtype; state then holds the state after the token, in its own
    dtype.

    The step is torch's in-place batched products on mamba_ssm's [P, N] state: linattn's decayed step keeps
    the transposed [N, P] state, and the two transposes a call would need cost several times the step
    (docs/mamba.md). Token by token it gives what mamba_chunk_scan_combined gives (tested).
    """
    _tensor("state", state, "[batch, nheads, headdim, dstate]")
    if state.dim() not in (3, 4):
        raise ValueError(f"state: expected 4 dims [batch, nheads, headdim, dstate] (or 3 with one head), got "
                         f"{state.dim()} (shape {list(state.shape)})")
    has_heads = state.dim() == 4
    state4 = state if has_heads else state.unsqueeze(1)
    _, H, P, N = state4.shape
    x = _lift("x", x, "[batch, nheads, headdim]", 2, 1)
    batch = x.shape[0] if x.dim() == 3 else -1
    _shaped("x", x, (batch, H, P), "[batch, nheads, headdim]")
    dt_layout = "[batch, nheads, headdim] or [batch, nheads]"
    if _tensor("dt", dt, dt_layout).dim() == 2 and H > 1:
        dt = _shaped("dt", dt, (batch, H), dt_layout).unsqueeze(-1)
    else:
        dt = _narrowed(_shaped("dt", _lift("dt", dt, dt_layout, 2, 1), (batch, H, P), dt_layout))
    A_layout = "[nheads, headdim, dstate] or [nheads]"
    if _tensor("A", A, A_layout).dim() == 1:
        A = _shaped("A", A, (H,), A_layout).view(H, 1, 1)
    else:
        A = _narrowed(_shaped("A", _lift("A", A, A_layout, 2, 0), (H, P, N), A_layout))
    B = _lift("B", B, "[batch, ngroups, dstate]", 2, 1)
    G = B.shape[1] if B.dim() == 3 else 0
    if B.dim() != 3 or B.shape[0] != batch or B.shape[2] != N or G == 0 or H % G != 0:
        raise ValueError(f"B: expected shape [batch, ngroups, dstate] with batch = {batch}, dstate = {N} and "
                         f"ngroups dividing nheads = {H}, got {list(B.shape)}")
    C = _shaped("C", _lift("C", C, "[batch, ngroups, dstate]", 2, 1), tuple(B.shape),
                "[batch, ngroups, dstate] (B's shape)")
    if D is not None:
        D = _per_head_or_dim("D", D, H, P, "[nheads, headdim] or [nheads]")
    if z is not None:
        z = _shaped("z", _lift("z", z, "[batch, nheads, headdim]", 2, 1), (batch, H, P), "[batch, nheads, headdim]")
    if dt_bias is not None:
        dt_bias = _narrowed(_per_head_or_dim("dt_bias", dt_bias, H, P, "[nheads, headdim] or [nheads]"))
    if state_batch_indices is None:
        if state4.shape[0] != batch:
            raise ValueError(f"state: expected batch {batch} (x's) without state_batch_indices, got "
                             f"{state4.shape[0]}")
        slots = None
    else:
        slots = _indices("state_batch_indices", state_batch_indices, (batch,), "[batch]")
        if batch and (int(slots.min()) < 0 or int(slots.max()) >= state4.shape[0]):
            raise ValueError(f"state_batch_indices: expected slots in [0, {state4.shape[0]}) (state's batch), got "
                             f"{slots.tolist()}")
        if slots.unique().numel() != batch:
            raise ValueError(f"state_batch_indices: a slot appears twice ({slots.tolist()}); each row needs its own")

    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    step = _time_steps(dt, dt_bias, dt_softplus, None, work)  # [batch, H, 1 or P]
    with torch.no_grad():  # in place, as mamba_ssm's kernel (decoding keeps no graph through the state)
        # The rows of the state this call advances, as a contiguous tensor of the working dtype: the state
        # itself where it is one, else a copy written back once (one rounding for a bf16 state).
        in_place = slots is None and state4.dtype == work and state4.is_contiguous()
        S = state4 if in_place else (state4 if slots is None else state4[slots]).to(work).contiguous()
        S.mul_(torch.exp(step.unsqueeze(-1) * A.to(work)))
        # The H / G heads of a group are adjacent: their rows form one [H / G · P, N] block per group, which
        # takes the group's B and C as they are (no copy to H heads).
        rows = S.view(batch * G, H // G * P, N)
        rows.baddbmm_((step * x.to(work)).reshape(batch * G, H // G * P, 1), B.to(work).reshape(batch * G, 1, N))
        y = torch.bmm(rows, C.to(work).reshape(batch * G, N, 1)).view(batch, H, P)
        if not in_place:
            if slots is None:
                state4.copy_(S)
            else:
                state4[slots] = S.to(state.dtype)
    out = _skip_and_gate(y, x, D, z, work).to(x.dtype)
    return out if has_heads else out.squeeze(1)
