"""linattn.layers.RWKV7Attention, and fla's own RWKV7Attention on the CPU under linattn.integrations.fla.enable().

The independent check: linattn's layer against RWKV-7's time mixing written here token by token from the
published equations (Peng et al., 2025, "RWKV-7 Goose"), in fp64, over awkward shapes (3 heads of 3 keys and 5
values, 65 tokens, a later layer's value mixing). Then, where flash-linear-attention is installed: linattn's
layer loaded with fla's layer's state dict (strict) equals fla's layer run under enable() (output, v_first,
input gradients and every parameter gradient; a full batch, a left-padded one, packed sequences), packed
sequences equal the sequences run apart, decoding with a cache equals the whole sequence, bf16 runs, and
without enable() fla's layer fails in Triton again."""

import math

import pytest

torch = pytest.importorskip("torch", reason="linattn.layers are torch modules")

import linattn.layers as llayers  # noqa: E402
from linattn.integrations import fla as integration  # noqa: E402

# fla's RWKV7Attention warns on construction that its implementation may differ from RWKV-LM's.
pytestmark = pytest.mark.filterwarnings("ignore:According to Bo:UserWarning")
TRITON_ON_CPU = "active drivers"  # Triton's error for a kernel launched where it has no driver
D = 16
SMALL = dict(hidden_size=D, head_dim=4, num_hidden_layers=2, decay_low_rank_dim=4, gate_low_rank_dim=4,
             a_low_rank_dim=4, v_low_rank_dim=4)


@pytest.fixture(scope="module")
def fla_layers():
    return pytest.importorskip("fla.layers", reason="flash-linear-attention 0.6.0 (with Triton, einops) does not "
                               "import (pip install triton==3.9.0 flash-linear-attention==0.6.0)")


@pytest.fixture
def enabled():
    integration.enable()
    yield
    integration.disable()


def _randomise(layer, seed=0, scale=0.4):
    """Every parameter moved off its initial value (o_proj starts at zero, the mixes at simple ramps)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return layer


def _linattn_layer(seed=0, **kwargs):
    torch.manual_seed(seed)
    return _randomise(llayers.RWKV7Attention(**kwargs), seed)


def _pair(fla_layers, **kwargs):
    """fla's layer (randomised) and linattn's loaded with its state dict, strictly."""
    torch.manual_seed(0)
    fla_layer = _randomise(fla_layers.RWKV7Attention(**kwargs))
    linattn_layer = llayers.RWKV7Attention(**kwargs)
    linattn_layer.load_state_dict(fla_layer.state_dict(), strict=True)
    return fla_layer, linattn_layer


def _assert_close(got, want, what, tol=1e-5):
    error = (got - want).abs().max().item()
    assert error <= tol * max(want.abs().max().item(), 1e-3), f"{what}: max difference {error:.2e}"


# ------------------------------------------------------------------------------------------------
# RWKV-7 from its equations, in fp64.


def _lora(p, name, x, activation=lambda y: y):
    """A low-rank map from its weights: B·act(A·x) + bias (no bias where it has none)."""
    out = activation(x @ p[name + ".lora.0.weight"].T) @ p[name + ".lora.2.weight"].T
    return out + p[name + ".lora.2.bias"] if name + ".lora.2.bias" in p else out


def _rwkv7_reference(layer, x, v_first=None, l2_eps=0.0):
    """RWKV-7's time mixing, token by token, in fp64, from the layer's weights. x [B, T, C]; returns (out,
    v_first). l2_eps: the ε of κ's normalisation x/√(Σx² + ε) (fla's fused l2norm); 0 for x/‖x‖."""
    p = {name: t.detach().double() for name, t in layer.named_parameters()}
    x = x.double()
    B, T, C = x.shape
    H, K, V = layer.num_heads, layer.head_dim, layer.head_v_dim
    shifted = torch.cat([x.new_zeros(B, 1, C), x[:, :-1]], dim=1)
    mixed = {m: x + (shifted - x) * p["x_" + m].view(C) for m in "rwkvag"}
    r, k, v = mixed["r"] @ p["r_proj.weight"].T, mixed["k"] @ p["k_proj.weight"].T, mixed["v"] @ p["v_proj.weight"].T
    log_w = -math.exp(-0.5) * torch.sigmoid(_lora(p, "w_lora", mixed["w"], torch.tanh))
    if layer.layer_idx == 0:
        v_first = v
    else:
        v = v + (v_first.double() - v) * torch.sigmoid(_lora(p, "v_lora", mixed["v"]))
    a = torch.sigmoid(_lora(p, "a_lora", mixed["a"]))
    g = _lora(p, "g_lora", mixed["g"], torch.sigmoid)
    kappa = (k * p["k_k"]).view(B, T, H, K)
    kappa = kappa / (kappa.square().sum(-1, keepdim=True) + l2_eps).sqrt()
    k = k * (1 + (a - 1) * p["k_a"])
    r, k, a, log_w, v = r.view(B, T, H, K), k.view(B, T, H, K), a.view(B, T, H, K), log_w.view(B, T, H, K), \
        v.view(B, T, H, V)
    o = x.new_zeros(B, T, H, V)
    for b in range(B):
        for h in range(H):
            S = x.new_zeros(V, K)  # S_t = S_{t−1} (diag(w_t) − κ (κ ⊙ a)ᵀ) + v kᵀ,  o_t = S_t r_t
            for t in range(T):
                kap = kappa[b, t, h]
                transition = torch.diag(log_w[b, t, h].exp()) - torch.outer(kap, kap * a[b, t, h])
                S = S @ transition + torch.outer(v[b, t, h], k[b, t, h])
                o[b, t, h] = S @ r[b, t, h]
    eps = layer.head_dim * 1e-5  # norm_eps's default, times head_dim as RWKV-7 scales it
    normed = (o - o.mean(-1, keepdim=True)) / (o.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    normed = normed.reshape(B, T, H * V) * p["g_norm.weight"] + p["g_norm.bias"]
    bonus = ((r * k * p["r_k"]).sum(-1, keepdim=True) * v).reshape(B, T, H * V)
    return ((normed + bonus) * g) @ p["o_proj.weight"].T, v_first


AWKWARD = dict(hidden_size=9, head_dim=3, value_dim=15, num_hidden_layers=3, decay_low_rank_dim=5,
               gate_low_rank_dim=3, a_low_rank_dim=4, v_low_rank_dim=2)


@pytest.mark.parametrize("fuse_norm", [False, True])
@pytest.mark.parametrize("layer_idx", [0, 2])
def test_layer_against_rwkv7_equations_in_fp64(layer_idx, fuse_norm):
    """linattn's layer in float64 (linattn.fla's fp64 oracle underneath) equals the equations to 1e-10, and in
    float32 to 1e-5 of the output's size; 65 tokens (past the decoding form's 64), two sequences."""
    layer = _linattn_layer(seed=layer_idx, layer_idx=layer_idx, fuse_norm=fuse_norm, **AWKWARD)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 65, 9, generator=g)
    v_first = torch.randn(2, 65, 15, generator=g) if layer_idx else None
    want, want_first = _rwkv7_reference(layer, x, v_first, l2_eps=1e-6 if fuse_norm else 0.0)
    got, _, _, got_first = layer.double()(x.double(), v_first=None if v_first is None else v_first.double())
    _assert_close(got, want, "fp64 output", tol=1e-10)
    _assert_close(got_first, want_first, "fp64 v_first", tol=1e-10)
    got = layer.float()(x, v_first=v_first)[0]
    _assert_close(got, want, "fp32 output")


@pytest.mark.parametrize("kwargs, argument", [
    (dict(mode="fused_chunk"), "mode"),
    (dict(head_dim=None, num_heads=None), "head_dim"),
    (dict(head_dim=5), "head_dim"),
    (dict(head_dim=None, num_heads=3), "num_heads"),
    (dict(value_dim=18), "value_dim"),
    (dict(layer_idx=1, num_hidden_layers=None), "num_hidden_layers"),
    (dict(layer_idx=0, num_hidden_layers=1), "num_hidden_layers"),
])
def test_unsupported_arguments_are_refused_by_name(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        llayers.RWKV7Attention(**dict(SMALL, **kwargs))


def test_bad_forward_arguments_are_refused_by_name():
    later = llayers.RWKV7Attention(**dict(SMALL, layer_idx=1))
    with pytest.raises(ValueError, match="v_first"):
        later(torch.randn(1, 3, D))
    first = llayers.RWKV7Attention(**dict(SMALL, layer_idx=0))
    with pytest.raises(ValueError, match="attention_mask"):
        first(torch.randn(1, 3, D), attention_mask=torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match="layer_idx"):
        llayers.RWKV7Attention(**SMALL)(torch.randn(1, 3, D), past_key_values=llayers.Cache(), use_cache=True)


def test_packed_sequences_equal_the_sequences_apart():
    """cu_seqlens (an empty sequence among them): the token shift and the state restart at each sequence."""
    layer = _linattn_layer(layer_idx=1, **SMALL)
    lengths = [5, 0, 66, 9]
    x, v_first = torch.randn(1, 80, D), torch.randn(1, 80, D)
    cu = torch.tensor([0, 5, 5, 71, 80])
    packed, _, _, _ = layer(x, v_first=v_first, cu_seqlens=cu)
    for n, length in enumerate(lengths):
        if length:
            part = slice(cu[n].item(), cu[n + 1].item())
            _assert_close(packed[:, part], layer(x[:, part], v_first=v_first[:, part])[0], f"sequence {n}")


def _decode(layer, x, v_first, prompt):
    """The prompt, then one token at a time, with a linattn.layers.Cache; returns the outputs joined."""
    cache, outs = llayers.Cache(), []
    for part in [slice(0, prompt)] + [slice(t, t + 1) for t in range(prompt, x.shape[1])]:
        outs.append(layer(x[:, part], past_key_values=cache, use_cache=True,
                          v_first=None if v_first is None else v_first[:, part])[0])
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("layer_idx", [0, 1])
def test_decoding_with_a_cache_equals_the_whole_sequence(layer_idx):
    layer = _linattn_layer(layer_idx=layer_idx, **SMALL).eval()
    x = torch.randn(2, 12, D)
    v_first = torch.randn(2, 12, D) if layer_idx else None
    with torch.no_grad():
        whole = layer(x, v_first=v_first)[0]
        _assert_close(_decode(layer, x, v_first, prompt=5), whole, "decoded")


# ------------------------------------------------------------------------------------------------
# Against fla's own layer, under enable().


def _run(layer, x, v_first, **kwargs):
    """Output, v_first, and (after a backward of a fixed function of both) the input gradients and every
    parameter gradient, by name."""
    x = x.clone().requires_grad_()
    v_first = None if v_first is None else v_first.clone().requires_grad_()
    o, _, _, first = layer(x, v_first=v_first, **kwargs)
    (o.square().sum() + first.sin().sum()).backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    grads["x"] = x.grad
    if v_first is not None:
        grads["v_first"] = v_first.grad
    return o.detach(), first.detach(), grads


@pytest.mark.parametrize("batch", ["full", "left-padded", "packed"])
@pytest.mark.parametrize("fuse_norm", [False, True])
@pytest.mark.parametrize("layer_idx", [0, 1])
def test_fla_layer_under_enable_equals_linattn_s(fla_layers, layer_idx, fuse_norm, batch):
    fla_layer, linattn_layer = _pair(fla_layers, layer_idx=layer_idx, fuse_norm=fuse_norm, **SMALL)
    g = torch.Generator().manual_seed(1)
    shape = (1, 80, D) if batch == "packed" else (2, 70, D)
    x = torch.randn(*shape, generator=g)
    v_first = torch.randn(*shape, generator=g) if layer_idx else None
    kwargs = {}
    if batch == "left-padded":
        kwargs["attention_mask"] = torch.ones(2, 70, dtype=torch.long)
        kwargs["attention_mask"][0, :13] = 0
    if batch == "packed":
        kwargs["cu_seqlens"] = torch.tensor([0, 5, 5, 71, 80])
    integration.enable()
    try:
        want = _run(linattn_layer, x, v_first, **kwargs)
        got = _run(fla_layer, x, v_first, **kwargs)
    finally:
        integration.disable()
    _assert_close(got[0], want[0], "o")
    _assert_close(got[1], want[1], "v_first")
    assert got[2].keys() == want[2].keys()
    for name, grad in want[2].items():
        _assert_close(got[2][name], grad, name + ".grad")
    if batch == "left-padded":  # the padding changes nothing in the real tokens: the short row alone
        alone = linattn_layer(x[:1, 13:], v_first=None if v_first is None else v_first[:1, 13:])[0]
        _assert_close(want[0][:1, 13:], alone, "left-padded row")


def test_fla_layer_decodes_under_enable_with_a_cache(fla_layers, enabled):
    """fla's layer as it is (its fused_mul_recurrent_rwkv7 decoding path, its token-shift cache) with
    linattn.layers.Cache, fla's Cache API: a prompt then one token at a time gives the whole sequence."""
    fla_layer, _ = _pair(fla_layers, layer_idx=0, **SMALL)
    fla_layer.eval()
    x = torch.randn(2, 9, D)
    with torch.no_grad():
        _assert_close(_decode(fla_layer, x, None, prompt=5), fla_layer(x)[0], "decoded")


def test_bf16(fla_layers, enabled):
    """bf16 weights and inputs: linattn's layer within bf16 rounding of its float32 self, and fla's under
    enable() equal to it (the same torch helpers and operator, computed in float32 inside)."""
    fla_layer, linattn_layer = _pair(fla_layers, layer_idx=0, fuse_norm=True, **SMALL)
    x = torch.randn(2, 70, D)
    reference = linattn_layer(x)[0].detach()
    fla_layer, linattn_layer = fla_layer.bfloat16(), linattn_layer.bfloat16()
    got = linattn_layer(x.bfloat16())[0]
    assert got.dtype == torch.bfloat16
    _assert_close(got.float(), reference, "bf16 against float32", tol=5e-2)
    _assert_close(fla_layer(x.bfloat16())[0].float(), got.float(), "fla's bf16", tol=1e-2)


@pytest.mark.parametrize("kwargs", [dict(), dict(layer_idx=0, num_hidden_layers=4, fuse_norm=True),
                                    dict(layer_idx=2, num_hidden_layers=4)])
def test_initialisation_is_fla_s(fla_layers, kwargs):
    """Every parameter fla initialises by formula (the mixes, k_k, k_a, r_k, the LoRA biases, the group norm,
    o_proj zero, the LoRAs' zero first maps) equals fla's; the random ones (orthogonal projections) have fla's
    shapes (the projections orthogonal with fla's gain where layer_idx is given). 64 channels in heads of 16."""
    kwargs = dict(hidden_size=64, head_dim=16, **kwargs)
    fla_state, state = fla_layers.RWKV7Attention(**kwargs).state_dict(), llayers.RWKV7Attention(**kwargs).state_dict()
    assert fla_state.keys() == state.keys()
    gains = {"r_proj.weight": 1.0, "k_proj.weight": 0.1, "v_proj.weight": 1.0}  # orthogonal with layer_idx
    random = {*gains, *(f"{lora}.lora.2.weight" for lora in ("w_lora", "v_lora", "a_lora", "g_lora"))}
    if "layer_idx" not in kwargs:  # o_proj too keeps torch's default initialisation
        random.add("o_proj.weight")
    for name, want in fla_state.items():
        assert state[name].shape == want.shape, name
        if name not in random:
            _assert_close(state[name], want, name, tol=1e-6)
        elif name in gains and "layer_idx" in kwargs:  # square: W Wᵀ = gain² I
            _assert_close(state[name] @ state[name].T, gains[name]**2 * torch.eye(64), name, tol=1e-5)


def test_routed_helpers_against_fla_s_torch_references(fla_layers, enabled):
    """What fla's layers call, called as they call it under enable(), against the torch references fla ships
    beside its Triton kernels (token_shift_ref: packed, with an empty and a one-token sequence;
    torch_addcmul_rwkv7, k_update_ref, gate_output_correction_ref, group_norm_ref (layer and RMS, with a
    residual), layernorm_gated's rms_norm_ref (groups, bias, the gate before and after)); the token shift's
    cache (the last token per sequence) against its definition."""
    from fla.modules import token_shift as shift
    from fla.modules.norm import layernorm, layernorm_gated
    from fla.ops.rwkv7 import fused_addcmul, fused_k_update, gate_output_correction as correction
    g = torch.Generator().manual_seed(8)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    x, cu = randn(1, 12, 6), torch.tensor([0, 4, 4, 5, 12])
    delta, last = shift.token_shift(x, cu, output_cache=True)
    _assert_close(delta, shift.token_shift_ref(x, cu), "token_shift packed")
    _assert_close(last, x[0, [3, 3, 4, 11]] * torch.tensor([1.0, 0, 1, 1])[:, None], "token_shift's cache")
    cache = randn(2, 6)
    y = randn(2, 5, 6)
    want = torch.cat([cache[:, None], y[:, :-1]], dim=1) - y
    _assert_close(shift.token_shift(y, None, cache, True)[0], want, "token_shift from a cache")
    mixes = [randn(1, 1, 6) for _ in range(6)]
    for got, want in zip(fused_addcmul.fused_addcmul_rwkv7(y, want, *mixes),
                         fused_addcmul.torch_addcmul_rwkv7(y, want, *mixes)):
        _assert_close(got, want, "fused_addcmul_rwkv7")
    k, a, ka = randn(2, 5, 6), torch.rand(2, 5, 6, generator=g), randn(6)
    _assert_close(fused_k_update.fused_k_rwkv7(k, a, ka), fused_k_update.k_update_ref(k, a, ka), "fused_k_rwkv7")
    o, gate, r_k = randn(2, 5, 6), randn(2, 5, 6), randn(2, 3)
    r, kh, v = randn(2, 5, 2, 3), randn(2, 5, 2, 3), randn(2, 5, 2, 3)
    _assert_close(correction.gate_output_correction(o, r, kh, r_k, v, gate),
                  correction.gate_output_correction_ref(o, r, kh, r_k, v, gate), "gate_output_correction")
    weight, bias, residual = randn(6), randn(6), randn(2, 5, 6)
    for rms in (False, True):
        _assert_close(layernorm.group_norm(o, weight, bias, residual, num_groups=3, is_rms_norm=rms),
                      layernorm.group_norm_ref(o, weight, bias, 3, residual, is_rms_norm=rms, upcast=True), "group_norm")
    for before in (False, True):
        _assert_close(layernorm_gated.rmsnorm_fn(o, weight, bias, gate, 1e-5, 3, before),
                      layernorm_gated.rms_norm_ref(o, weight, bias, gate, 1e-5, 3, before), "rmsnorm_fn")


def test_without_enable_fla_layer_fails_in_triton_again(fla_layers):
    fla_layer, _ = _pair(fla_layers, layer_idx=0, **SMALL)
    x = torch.randn(1, 9, D)
    integration.enable()
    try:
        fla_layer(x)
        assert integration.routed(fla_layers.rwkv7.token_shift) == "token_shift"
    finally:
        integration.disable()
    assert integration.routed(fla_layers.rwkv7.token_shift) is None
    with pytest.raises(RuntimeError, match=TRITON_ON_CPU):
        fla_layer(x)


# ------------------------------------------------------------------------------------------------
# fla's Mamba2 under enable(): its torch path (fla's own SSD in torch) with its Triton activation and gated
# norm routed to linattn's torch forms, against linattn.layers.Mamba2 (linattn.mamba's scan).

M = 32  # expand 2: 64 inner channels, 4 heads of 16
MAMBA2 = dict(hidden_size=M, num_heads=4, head_dim=16, state_size=8)


def _mamba2_pair(fla_layers, **kwargs):
    torch.manual_seed(0)
    fla_layer = _randomise(fla_layers.Mamba2(**dict(MAMBA2, **kwargs)), scale=0.2)
    linattn_layer = llayers.Mamba2(**dict(MAMBA2, **kwargs))
    linattn_layer.load_state_dict(fla_layer.state_dict(), strict=True)
    return fla_layer, linattn_layer


@pytest.mark.parametrize("kwargs", [dict(), dict(n_groups=4, norm_before_gate=True, layer_idx=0),
                                    dict(rmsnorm=False, hidden_act="sigmoid")])
def test_fla_mamba2_under_enable_equals_linattn_s(fla_layers, enabled, kwargs):
    """Output, input gradient and every parameter gradient; the gated norm per group, before the gate, and
    y·act(z) without the norm (fla's sigmoid Function routed too). n_groups 1 or num_heads only: in between,
    fla 0.6.0's torch path gives head h the group h mod n_groups (B.repeat), where mamba_ssm's kernels, fla's
    GPU path and linattn give it group h // (num_heads / n_groups); with n_groups=2 of 4 heads the two differ
    by 2.4 on outputs of size 14."""
    fla_layer, linattn_layer = _mamba2_pair(fla_layers, **kwargs)
    x = torch.randn(2, 70, M, generator=torch.Generator().manual_seed(5))
    got, want = [_run_plain(layer, x) for layer in (fla_layer, linattn_layer)]
    _assert_close(got[0], want[0], "o")
    for name, grad in want[1].items():
        _assert_close(got[1][name], grad, name + ".grad", tol=1e-4)


def _run_plain(layer, x):
    x = x.clone().requires_grad_()
    o = layer(x)[0]
    o.square().sum().backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    grads["x"] = x.grad
    return o.detach(), grads


def test_fla_mamba2_decodes_under_enable_with_a_cache(fla_layers, enabled):
    """fla's own decoding step (its convolution window and its state update in torch) with
    linattn.layers.Cache: a prompt then one token at a time gives the whole sequence, and linattn's layer."""
    fla_layer, linattn_layer = _mamba2_pair(fla_layers, layer_idx=0)
    x = torch.randn(2, 9, M, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        whole = linattn_layer(x)[0]
        _assert_close(fla_layer(x)[0], whole, "whole")
        _assert_close(_decode(fla_layer, x, None, prompt=5), whole, "decoded")


def test_fla_mamba2_bf16_under_enable(fla_layers, enabled):
    fla_layer, linattn_layer = _mamba2_pair(fla_layers)
    x = torch.randn(2, 70, M, generator=torch.Generator().manual_seed(7))
    reference = linattn_layer(x)[0].detach()
    got = fla_layer.bfloat16()(x.bfloat16())[0]
    assert got.dtype == torch.bfloat16
    _assert_close(got.float(), reference, "fla's bf16 against linattn's float32", tol=5e-2)
    _assert_close(got.float(), linattn_layer.bfloat16()(x.bfloat16())[0].float(), "fla's bf16 against linattn's",
                  tol=5e-2)
