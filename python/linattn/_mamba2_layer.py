"""fla.layers.Mamba2 on the CPU: the scan and the decode step of linattn.mamba underneath."""

import numbers

import torch
from torch import nn
from torch.nn import functional as F

from ._delta_layers import time_step_bias
from ._layer_parts import (FLA_ACT2FN, ShortConvolution, activation, cache_seen, layer_cache, repad, unpad,
                           update_layer_cache)
from .mamba import _dt_limit, mamba_chunk_scan_combined, selective_state_update


class RMSNormGated(nn.Module):
    """fla.modules.RMSNormGated (mamba_ssm's): an RMS norm over groups of group_size channels (one group
    when None) times weight, with the gate silu(z) applied before the norm, or after it with
    norm_before_gate; computed in float32 and returned in x's dtype."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=False, device=None, dtype=None):
        super().__init__()
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)

    def forward(self, x, z=None):
        return fla_rmsnorm_fn(x, self.weight, self.bias, z, self.eps, self.group_size, self.norm_before_gate)


def fla_rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """fla.modules.layernorm_gated's rmsnorm_fn (RMSNormGated's forward; linattn.integrations.fla routes fla's
    to it on CPU tensors): the norm of RMSNormGated, with an optional bias."""
    dtype, x = x.dtype, x.float()
    gate = None if z is None else F.silu(z.float())
    if gate is not None and not norm_before_gate:
        x = x * gate
    size = group_size or x.shape[-1]
    out = F.rms_norm(x.unflatten(-1, (-1, size)), (size,), None, eps).flatten(-2) * weight.float()
    if bias is not None:
        out = out + bias.float()
    if gate is not None and norm_before_gate:
        out = out * gate
    return out.to(dtype)


class Mamba2(nn.Module):
    """fla.layers.Mamba2 (Mamba-2's SSD mixer): in_proj gives the gate z, xBC and dt; xBC goes through the
    depthwise causal conv1d and hidden_act, and splits into x [H, P], B and C [n_groups, N]; the scan

        dt_t = clamp(softplus(dt_t + dt_bias), dt_limit),  h_t = exp(dt_t·A)·h_{t−1} + dt_t·B_t x_tᵀ,
        y_t = C_tᵀ h_t + D·x_t,   A = −exp(A_log)

    then the gated RMS norm with z (rmsnorm) or y·hidden_act(z), then out_proj, as fla's CPU path
    (torch_forward) computes it, in float32 between the projections. The cache entry holds "conv_state"
    [B, conv_dim, conv_kernel] (the last conv_kernel inputs of the convolution) and "recurrent_state"
    [B, H, P, N] (mamba_ssm's layout, float32). Unlike fla, padding is removed rather than zeroed and
    cu_seqlens keeps packed sequences apart, and a call with a cache may carry several tokens."""

    def __init__(self, num_heads=None, head_dim=64, hidden_size=2048, state_size=128, expand=2, n_groups=1,
                 conv_kernel=4, conv_init=None, use_conv_bias=True, hidden_act="silu", A_init_range=(1, 16),
                 D_has_hdim=False, rmsnorm=True, norm_before_gate=False, dt_min=0.001, dt_max=0.1,
                 dt_init_floor=1e-4, dt_limit=(0.0, float("inf")), use_bias=False, norm_eps=1e-5, chunk_size=256,
                 layer_idx=None, backend="cuda"):
        super().__init__()
        self.hidden_size, self.expand, self.head_dim = hidden_size, expand, head_dim
        self.intermediate_size = int(expand * hidden_size)
        self.ssm_state_size, self.n_groups = state_size, n_groups
        if self.intermediate_size % head_dim:
            raise ValueError(f"head_dim: expand * hidden_size ({self.intermediate_size}) must be a multiple of "
                             f"head_dim ({head_dim})")
        inferred = self.intermediate_size // head_dim
        if num_heads not in (None, 0, inferred):
            raise ValueError(f"num_heads: num_heads * head_dim ({num_heads * head_dim}) must equal expand * "
                             f"hidden_size ({self.intermediate_size}); pass {inferred} or None")
        self.num_heads = inferred
        if self.num_heads % n_groups:
            raise ValueError(f"n_groups: {n_groups} does not divide num_heads ({self.num_heads})")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
        if backend not in ("cuda", "triton"):
            raise ValueError(f"backend: expected 'cuda' or 'triton' (fla's; both run the same here), got {backend!r}")
        self.conv_kernel_size, self.conv_init, self.use_conv_bias = conv_kernel, conv_init, use_conv_bias
        # fla's ACT2FN (its "bias_gelu" takes two arguments and fails in fla's Mamba2, so it is refused).
        self.activation, self.act = hidden_act, activation(hidden_act, "hidden_act", FLA_ACT2FN)
        self.A_init_range, self.D_has_hdim, self.rmsnorm = A_init_range, D_has_hdim, rmsnorm
        self.norm_before_gate, self.norm_eps, self.chunk_size = norm_before_gate, norm_eps, chunk_size
        self.dt_limit, self.dt_min, self.dt_max = _dt_limit(dt_limit), dt_min, dt_max
        self.use_bias, self.layer_idx, self.backend = use_bias, layer_idx, backend

        self.conv_dim = self.intermediate_size + 2 * n_groups * state_size
        # fla's conv1d is a plain nn.Conv1d (same parameters); ShortConvolution adds the windows of the cache
        # and of packed sequences. hidden_act is applied after it, as fla does.
        self.conv1d = ShortConvolution(self.conv_dim, conv_kernel, bias=use_conv_bias, activation=None)
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        self.in_proj = nn.Linear(hidden_size, self.intermediate_size + self.conv_dim + self.num_heads, bias=use_bias)
        self.dt_bias = time_step_bias(self.num_heads, dt_min, dt_max, dt_init_floor)
        self.A_log = nn.Parameter(torch.empty(self.num_heads).uniform_(*A_init_range).log())
        self.A_log._no_weight_decay = True
        self.norm = None
        if rmsnorm:
            self.norm = RMSNormGated(self.intermediate_size, eps=norm_eps, norm_before_gate=norm_before_gate,
                                     group_size=self.intermediate_size // n_groups)
        self.D = nn.Parameter(torch.ones(self.intermediate_size if D_has_hdim else self.num_heads))
        self.D._no_weight_decay = True
        self.out_proj = nn.Linear(self.intermediate_size, hidden_size, bias=use_bias)

    def _D(self):
        return self.D.view(self.num_heads, self.head_dim) if self.D_has_hdim else self.D

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, q_len, _ = hidden_states.shape
        if q_len == 0:  # as fla: nothing to compute, the cache as it was
            return hidden_states, None, past_key_values
        last = layer_cache(self, past_key_values)
        conv_state = last["conv_state"] if last is not None else None
        ssm_state = last["recurrent_state"] if last is not None else None
        x, indices, cu_seqlens = unpad(hidden_states, attention_mask, kwargs.get("cu_seqlens"),
                                       cache_seen(self, past_key_values))
        if cu_seqlens is not None:
            if x.shape[0] != 1:
                raise ValueError(f"cu_seqlens: packed sequences need hidden_states of batch 1, got batch {x.shape[0]}")
            cu_seqlens = torch.as_tensor(cu_seqlens, dtype=torch.int64)
            bad = cu_seqlens.dim() != 1 or len(cu_seqlens) < 2 or bool((cu_seqlens[1:] < cu_seqlens[:-1]).any())
            if bad or int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != x.shape[1]:
                raise ValueError(f"cu_seqlens: expected offsets ascending from 0 to the {x.shape[1]} tokens, got "
                                 f"{cu_seqlens.tolist()}")
        gate, xBC, dt = self.in_proj(x).split([self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        lengths = None if cu_seqlens is None else (cu_seqlens[1:] - cu_seqlens[:-1])
        decoding = ssm_state is not None and (q_len == 1 if lengths is None else bool((lengths <= 1).all()))
        if decoding:
            y, conv_state, ssm_state = self._step(xBC, dt, lengths, conv_state, ssm_state, use_cache)
        else:
            xBC, conv_state = self.conv1d(xBC, cache=conv_state, output_final_state=use_cache, cu_seqlens=cu_seqlens)
            y, ssm_state = self._scan(self.act(xBC), dt, cu_seqlens, ssm_state)
        work = y.dtype
        y = self.norm(y, gate.to(work)) if self.rmsnorm else y * self.act(gate.to(work))
        out = self.out_proj(y.to(hidden_states.dtype))
        if use_cache:
            update_layer_cache(self, past_key_values, recurrent_state=ssm_state, conv_state=conv_state, offset=q_len)
        else:
            update_layer_cache(self, past_key_values, offset=q_len)
        return repad(out, indices, batch_size, q_len), None, past_key_values

    def _split(self, xBC, work):
        """xBC [..., conv_dim] -> x [..., H, P], B and C [..., n_groups, N], in the working dtype."""
        groups = self.n_groups * self.ssm_state_size
        x, B, C = xBC.to(work).split([self.intermediate_size, groups, groups], dim=-1)
        return x.unflatten(-1, (self.num_heads, self.head_dim)), B.unflatten(-1, (self.n_groups, -1)), \
            C.unflatten(-1, (self.n_groups, -1))

    def _scan(self, xBC, dt, cu_seqlens, state):
        """The scan over [R, L] tokens (rows, or the packed sequences of cu_seqlens): y [R, L, intermediate]
        and the final state of each sequence [S, H, P, N] (from state, or zeros)."""
        work = torch.float64 if xBC.dtype == torch.float64 else torch.float32
        x, B, C = self._split(xBC, work)
        A = -torch.exp(self.A_log.to(work))
        options = dict(D=self._D(), dt_bias=self.dt_bias, dt_softplus=True, dt_limit=self.dt_limit,
                       state_dtype=work)

        def scan(rows, initial, **packing):
            sl = slice(*rows)
            return mamba_chunk_scan_combined(x[:, sl], dt[:, sl].to(work), A, B[:, sl], C[:, sl], self.chunk_size,
                                             initial_states=initial, return_final_states=not packing, **options,
                                             **packing)

        if x.shape[1] == 0:  # every token is padding: nothing to compute, the states as they were
            count = x.shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
            empty = x.new_zeros(count, self.num_heads, self.head_dim, self.ssm_state_size)
            return x.flatten(-2), empty if state is None else state
        if cu_seqlens is None:
            y, final = scan((None,), state)
        elif state is None:  # packed from zero: one pass, mamba_ssm's seq_idx restarting each sequence
            lengths = cu_seqlens[1:] - cu_seqlens[:-1]
            seq_idx = torch.repeat_interleave(torch.arange(len(lengths)), lengths).unsqueeze(0)
            y, final = scan((None,), None, seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_varlen_states=True)
        else:  # packed sequences continuing their own states (mamba_ssm gives a row one initial state)
            bounds, ys, finals = cu_seqlens.tolist(), [], []
            for n, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
                if a == b:
                    finals.append(state[n].to(work))
                    continue
                y_n, final_n = scan((a, b), state[n:n + 1])
                ys.append(y_n)
                finals.append(final_n[0])
            y, final = torch.cat(ys, dim=1), torch.stack(finals)
        return y.flatten(-2), final

    def _step(self, xBC, dt, lengths, conv_state, ssm_state, use_cache):
        """One token for each sequence that has one (all of them, or those of length 1 in lengths), through
        the convolution window and linattn.mamba.selective_state_update; returns y [R, 1 or tokens,
        intermediate] and the new windows and states (copies when use_cache is False: the cache keeps its own)."""
        rows = None if lengths is None else lengths.nonzero().squeeze(1)
        tokens = xBC if rows is None else xBC.transpose(0, 1)  # [R, 1, conv_dim]
        window = conv_state if rows is None else conv_state.index_select(0, rows)
        out, window = self.conv1d(tokens, cache=window, output_final_state=True)
        conv_state = window if rows is None else conv_state.index_copy(0, rows, window.to(conv_state.dtype))
        work = torch.float64 if xBC.dtype == torch.float64 else torch.float32
        x, B, C = self._split(self.act(out[:, 0]), work)
        dt = dt if rows is None else dt.transpose(0, 1)
        dt = F.softplus(dt[:, 0].to(work) + self.dt_bias.to(work)).clamp(*self.dt_limit)
        # dt and D as [.., H, P] broadcasts (the step narrows them back): the [H] forms are read as
        # mamba_ssm's one-head ones when H = 1.
        dt, D = dt.unsqueeze(-1).expand(*dt.shape, self.head_dim), self._D()
        D = D.unsqueeze(-1).expand(self.num_heads, self.head_dim) if D.dim() == 1 else D
        state = ssm_state if use_cache else ssm_state.clone()
        y = selective_state_update(state, x, dt, -torch.exp(self.A_log.to(work)), B, C, D=D,
                                   state_batch_indices=rows)
        y = y.flatten(-2).unsqueeze(1)
        return (y if rows is None else y.transpose(0, 1)), conv_state, state
