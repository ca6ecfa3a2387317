"""linattn.layers.Mamba2 against a reference written here from fla.layers.Mamba2's semantics (fla 0.6.0's
CPU path): the projections, the causal depthwise convolution, the selective scan token by token in
float64, the gated RMS norm over n_groups groups, D and dt_limit. State dicts load strictly both ways;
padded and packed batches, decoding with the cache and chunked prefill all give what each sequence
gives alone; the refusals name their argument."""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from linattn.layers import Cache, Mamba2

# Small configurations covering fla's options: groups between 1 and H, one head, no norm (the gate
# through hidden_act), D per channel, biases, a dt_limit that bites, norm_before_gate.
CONFIGS = {
    "groups": dict(hidden_size=8, head_dim=4, state_size=5, expand=2, n_groups=2, conv_kernel=4),
    "no_norm": dict(hidden_size=6, head_dim=3, state_size=4, expand=2, n_groups=1, conv_kernel=3, rmsnorm=False,
                    D_has_hdim=True, use_bias=True, use_conv_bias=False, hidden_act="gelu", dt_limit=(0.05, 0.6)),
    "one_head": dict(hidden_size=5, head_dim=5, state_size=3, expand=1, conv_kernel=2, norm_before_gate=True,
                     norm_eps=1e-3),
}


class Reference(nn.Module):
    """fla.layers.Mamba2's computation for rows that are whole sequences, written out in plain torch."""

    def __init__(self, hidden_size, head_dim, state_size, expand, n_groups=1, conv_kernel=4, rmsnorm=True,
                 D_has_hdim=False, use_bias=False, use_conv_bias=True, hidden_act="silu", norm_before_gate=False,
                 dt_limit=(0.0, math.inf), norm_eps=1e-5):
        super().__init__()
        inner = expand * hidden_size
        self.H, self.P, self.N, self.G, self.K = inner // head_dim, head_dim, state_size, n_groups, conv_kernel
        self.inner, self.rmsnorm, self.norm_before_gate, self.dt_limit, self.eps = inner, rmsnorm, \
            norm_before_gate, dt_limit, norm_eps
        # fla's ACT2FN: its "gelu" is the tanh approximation
        self.act = {"silu": F.silu, "gelu": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) *
                                                                               (x + 0.044715 * x ** 3)))}[hidden_act]
        conv_dim = inner + 2 * n_groups * state_size
        self.in_proj = nn.Linear(hidden_size, inner + conv_dim + self.H, bias=use_bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, conv_kernel, groups=conv_dim, bias=use_conv_bias,
                                padding=conv_kernel - 1)
        self.dt_bias = nn.Parameter(torch.randn(self.H) - 1)
        self.A_log = nn.Parameter(torch.rand(self.H) * 2 - 1)
        self.D = nn.Parameter(torch.randn(inner if D_has_hdim else self.H))
        if rmsnorm:
            self.norm = nn.Module()
            self.norm.weight = nn.Parameter(1 + 0.3 * torch.randn(inner))
        self.out_proj = nn.Linear(inner, hidden_size, bias=use_bias)

    def forward(self, u, h=None):
        """u [B, T, hidden] -> out [B, T, hidden], the final state [B, H, P, N] and conv window [B, conv_dim, K]."""
        batch, T, _ = u.shape
        H, P, N, G = self.H, self.P, self.N, self.G
        z, xBC, dt = self.in_proj(u).split([self.inner, self.conv1d.in_channels, H], dim=-1)
        window = F.pad(xBC.transpose(1, 2), (self.K, 0))[..., -self.K:]
        xBC = self.act(self.conv1d(xBC.transpose(1, 2))[..., :T].transpose(1, 2))
        x, B, C = xBC.split([self.inner, G * N, G * N], dim=-1)
        x = x.reshape(batch, T, H, P)
        per_head = H // G  # head i reads group i // (H / G)
        B = B.reshape(batch, T, G, 1, N).expand(-1, -1, -1, per_head, -1).reshape(batch, T, H, N)
        C = C.reshape(batch, T, G, 1, N).expand(-1, -1, -1, per_head, -1).reshape(batch, T, H, N)
        dt = F.softplus(dt + self.dt_bias).clamp(*self.dt_limit)
        A = -torch.exp(self.A_log)
        D = self.D.reshape(H, P) if self.D.numel() == H * P and self.D.numel() != H else self.D[:, None]
        h = u.new_zeros(batch, H, P, N) if h is None else h
        ys = []
        for t in range(T):
            h = torch.exp(dt[:, t] * A)[..., None, None] * h + \
                (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
            ys.append((h * C[:, t, :, None, :]).sum(-1) + D * x[:, t])
        y = torch.stack(ys, 1).reshape(batch, T, self.inner)
        if self.rmsnorm:
            if not self.norm_before_gate:
                y = y * F.silu(z)
            g = y.reshape(batch, T, G, -1)
            y = (g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)).reshape(batch, T, -1) * self.norm.weight
            if self.norm_before_gate:
                y = y * F.silu(z)
        else:
            y = y * self.act(z)
        return self.out_proj(y), h, window


def _pair(name, seed=0):
    """(reference in float64, linattn's layer in float32 holding the same weights)."""
    torch.manual_seed(seed)
    config = CONFIGS[name]
    ref = Reference(**config)
    layer = Mamba2(**config, layer_idx=0)
    layer.load_state_dict(ref.state_dict(), strict=True)
    return ref.double(), layer


def _close(got, want, tol=2e-5):
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_dicts_load_strictly_both_ways(name):
    torch.manual_seed(1)
    ref, layer = Reference(**CONFIGS[name]), Mamba2(**CONFIGS[name])
    theirs, ours = ref.state_dict(), layer.state_dict()
    assert {k: v.shape for k, v in theirs.items()} == {k: v.shape for k, v in ours.items()}
    layer.load_state_dict(theirs, strict=True)
    Reference(**CONFIGS[name]).load_state_dict(layer.state_dict(), strict=True)
    assert all(torch.equal(layer.state_dict()[k], v) for k, v in theirs.items())


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("T", [1, 9, 70])
def test_outputs_and_states_match_the_reference(name, T):
    ref, layer = _pair(name)
    u = torch.randn(2, T, layer.hidden_size)
    want, h, window = ref(u.double())
    cache = Cache()
    got, none, returned = layer(u, past_key_values=cache, use_cache=True)
    assert none is None and returned is cache and cache.get_seq_length(0) == T
    _close(got, want)
    _close(cache[0]["recurrent_state"], h)
    _close(cache[0]["conv_state"], window)
    _close(layer(u)[0], want)  # without a cache


def _alone(layer, rows):
    """Each sequence run by itself: its output, state and window."""
    results = []
    for row in rows:
        cache = Cache()
        out = layer(row[None], past_key_values=cache, use_cache=True)[0][0]
        results.append((out, cache[0]["recurrent_state"][0], cache[0]["conv_state"][0]))
    return results


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_padded_and_packed_batches_equal_each_sequence_alone(name):
    _, layer = _pair(name)
    lengths = [7, 1, 4]
    rows = [torch.randn(n, layer.hidden_size) for n in lengths]
    alone = _alone(layer, rows)
    T = max(lengths)
    for left in (True, False):
        u, mask = torch.randn(len(rows), T, layer.hidden_size), torch.zeros(len(rows), T)
        for b, row in enumerate(rows):
            span = slice(T - len(row), T) if left else slice(0, len(row))
            u[b, span], mask[b, span] = row, 1
        cache = Cache()
        out = layer(u, attention_mask=mask, past_key_values=cache, use_cache=True)[0]
        for b, (o, h, w) in enumerate(alone):
            span = slice(T - lengths[b], T) if left else slice(0, lengths[b])
            _close(out[b, span], o.double(), 1e-6)
            _close(cache[0]["recurrent_state"][b], h.double(), 1e-6)
            _close(cache[0]["conv_state"][b], w.double(), 1e-6)
        assert not out[mask == 0].any()
    # packed, with an empty sequence between two others
    packed = torch.cat([rows[0], rows[1], rows[2]])[None]
    cu = torch.tensor([0, 7, 7, 8, 12])
    cache = Cache()
    out = layer(packed, past_key_values=cache, use_cache=True, cu_seqlens=cu)[0]
    for n, (o, h, w) in zip([0, 2, 3], alone):
        _close(out[0, cu[n]:cu[n + 1]], o.double(), 1e-6)
        _close(cache[0]["recurrent_state"][n], h.double(), 1e-6)
        _close(cache[0]["conv_state"][n], w.double(), 1e-6)
    assert not cache[0]["recurrent_state"][1].any() and not cache[0]["conv_state"][1].any()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoding_and_chunked_prefill_equal_the_whole_sequence(name):
    _, layer = _pair(name)
    u = torch.randn(2, 11, layer.hidden_size)
    whole = layer(u)[0]
    cache = Cache()
    parts = [layer(u[:, :3], past_key_values=cache, use_cache=True)[0],
             layer(u[:, 3:7], past_key_values=cache, use_cache=True)[0]]  # a second chunk continues the state
    parts += [layer(u[:, t:t + 1], past_key_values=cache, use_cache=True)[0] for t in range(7, 11)]
    _close(torch.cat(parts, 1), whole.double(), 1e-6)
    assert cache.get_seq_length(0) == 11
    # a call with the cache but without use_cache counts its tokens and leaves the states as they were
    state, window = cache[0]["recurrent_state"].clone(), cache[0]["conv_state"].clone()
    layer(u[:, :1], past_key_values=cache, use_cache=False)
    assert torch.equal(cache[0]["recurrent_state"], state) and torch.equal(cache[0]["conv_state"], window)
    assert cache.get_seq_length(0) == 12


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoding_a_padded_batch_and_packed_continuations(name):
    _, layer = _pair(name)
    lengths, steps = [5, 2], 3
    rows = [torch.randn(n + steps, layer.hidden_size) for n in lengths]
    alone = [o for o, _, _ in _alone(layer, rows)]
    T = max(lengths)
    u, mask = torch.zeros(2, T, layer.hidden_size), torch.zeros(2, T)
    for b, n in enumerate(lengths):  # left padding, as generation pads
        u[b, T - n:], mask[b, T - n:] = rows[b][:n], 1
    cache = Cache()
    layer(u, attention_mask=mask, past_key_values=cache, use_cache=True)
    for s in range(steps):
        mask = torch.cat([mask, torch.ones(2, 1)], 1)
        token = torch.stack([row[n + s] for row, n in zip(rows, lengths)])[:, None]
        out = layer(token, attention_mask=mask, past_key_values=cache, use_cache=True)[0]
        for b, n in enumerate(lengths):
            _close(out[b, 0], alone[b][n + s].double(), 1e-6)
    # a decode step where row 1's token is padding: row 0 advances, row 1's states stay as they were
    state1, window1 = cache[0]["recurrent_state"][1].clone(), cache[0]["conv_state"][1].clone()
    out = layer(torch.randn(2, 1, layer.hidden_size), attention_mask=torch.cat([mask, torch.tensor([[1.], [0.]])], 1),
                past_key_values=cache, use_cache=True)[0]
    assert not out[1].any() and out[0].abs().sum() > 0
    assert torch.equal(cache[0]["recurrent_state"][1], state1) and torch.equal(cache[0]["conv_state"][1], window1)
    # packed sequences continuing their cached states (several tokens each; the middle one empty)
    firsts = [torch.randn(n, layer.hidden_size) for n in (4, 3, 2)]
    seconds = [torch.randn(n, layer.hidden_size) for n in (3, 0, 5)]
    alone = [o for o, _, _ in _alone(layer, [torch.cat(p) for p in zip(firsts, seconds)])]
    cache = Cache()
    layer(torch.cat(firsts)[None], cu_seqlens=torch.tensor([0, 4, 7, 9]), past_key_values=cache, use_cache=True)
    out = layer(torch.cat(seconds)[None], cu_seqlens=torch.tensor([0, 3, 3, 8]), past_key_values=cache,
                use_cache=True)[0]
    _close(out[0, :3], alone[0][4:].double(), 1e-6)
    _close(out[0, 3:], alone[2][2:].double(), 1e-6)


def test_backward_gives_finite_gradients_to_every_parameter():
    for name in sorted(CONFIGS):
        _, layer = _pair(name)
        u = torch.randn(2, 9, layer.hidden_size, requires_grad=True)
        mask = torch.ones(2, 9)
        mask[1, :3] = 0
        out = layer(u, attention_mask=mask)[0]
        (out * torch.randn_like(out)).sum().backward()
        for pname, p in list(layer.named_parameters()) + [("input", u)]:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, (name, pname)


def test_gradients_match_the_reference():
    ref, layer = _pair("groups")
    u = torch.randn(2, 13, layer.hidden_size)
    w = torch.randn(2, 13, layer.hidden_size)
    (ref(u.double())[0] * w.double()).sum().backward()
    (layer(u)[0] * w).sum().backward()
    theirs = dict(ref.named_parameters())
    for pname, p in layer.named_parameters():
        _close(p.grad, theirs[pname].grad, 1e-4)


@pytest.mark.parametrize("kwargs, name", [
    (dict(hidden_size=8, head_dim=3), "head_dim"),
    (dict(hidden_size=8, head_dim=4, num_heads=3), "num_heads"),
    (dict(hidden_size=8, head_dim=4, n_groups=3), "n_groups"),
    (dict(hidden_size=8, head_dim=4, hidden_act="nope"), "hidden_act"),
    (dict(hidden_size=8, head_dim=4, hidden_act="bias_gelu"), "hidden_act"),
    (dict(hidden_size=8, head_dim=4, backend="cpu"), "backend"),
    (dict(hidden_size=8, head_dim=4, chunk_size=0), "chunk_size"),
    (dict(hidden_size=8, head_dim=4, dt_limit=(0.5, 0.1)), "dt_limit"),
])
def test_unsupported_constructor_values_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Mamba2(**kwargs)


def test_unsupported_forward_values_are_refused_by_name():
    layer = Mamba2(hidden_size=8, head_dim=4, state_size=4)
    u = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="attention_mask"):
        layer(u, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="attention_mask"):
        layer(u, attention_mask=torch.ones(2, 5), cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(u, cu_seqlens=torch.tensor([0, 5]))
    for cu in ([0, 3], [0, 4, 2, 5], [1, 5]):
        with pytest.raises(ValueError, match="cu_seqlens"):
            layer(u[:1], cu_seqlens=torch.tensor(cu))
    with pytest.raises(ValueError, match="layer_idx"):
        layer(u, past_key_values=Cache())
    assert layer(u[:, :0])[0].shape == (2, 0, 8)  # T = 0, as fla: the input back
