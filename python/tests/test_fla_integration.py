"""linattn.integrations.fla: flash-linear-attention's operators, and its layers where fla allows, on CPU tensors
through linattn.fla (docs/models.md, "flash-linear-attention on a CPU").

Each operator linattn has is called as fla's user calls it (fla.ops.<family>.<name>) under enable() and must
equal linattn.fla's result; disable() must leave fla exactly as it was. Each fla layer of the families
linattn has is run on the CPU under enable(): as it is (its Triton helpers routed by enable()), and with its
helper modules swapped for linattn.layers' (same parameters), it must run forward and backward and equal
linattn.layers' layer of the same state dict, and must fail without enable()."""

import copy
import importlib
import inspect
import sys
import traceback
import types

import pytest

torch = pytest.importorskip("torch", reason="linattn.fla takes torch tensors")
# fla's layers import only with Triton and einops; without them this whole file is skipped.
fla_layers = pytest.importorskip("fla.layers", reason="flash-linear-attention 0.6.0 (with Triton, einops) does "
                                 "not import (pip install triton==3.9.0 flash-linear-attention==0.6.0)")
import fla  # noqa: E402
import fla.backends  # noqa: E402

import linattn.fla as lfla  # noqa: E402
import linattn.layers as llayers  # noqa: E402
from linattn.integrations import fla as integration  # noqa: E402

TRITON_ON_CPU = "active drivers"  # Triton's error for a kernel launched where it has no driver


@pytest.fixture
def enabled():
    integration.enable()
    yield
    integration.disable()


def _fla_state():
    """Every attribute of every loaded fla module (by identity) and every registry's backends."""
    modules = {name: dict(vars(m)) for name, m in list(sys.modules.items())
               if m is not None and (name == "fla" or name.startswith("fla."))}
    registries = {op: dict(r._backends) for op, r in fla.backends._operation_registries.items()}
    return modules, registries


def _same_state(a, b):
    (modules_a, registries_a), (modules_b, registries_b) = a, b
    if registries_a.keys() != registries_b.keys():
        return False
    if any(registries_a[op].keys() != registries_b[op].keys() for op in registries_a):
        return False
    for name, attrs in modules_a.items():
        now = modules_b.get(name, {})
        if any(now.get(attr) is not value for attr, value in attrs.items() if callable(value)):
            return False
    return True


# ------------------------------------------------------------------------------------------------
# The operators.

B, T, H, K, V = 2, 7, 2, 4, 3


def _inputs(family, name):
    """(positional, keywords) for fla.ops.<family>.<name>: random q, k, v and the family's gates, decays in
    log space, keys unit-norm where the delta rule needs it."""
    g = torch.Generator().manual_seed(len(name))

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def log_decay(*shape):
        return torch.nn.functional.logsigmoid(randn(*shape) + 3)

    q, k, v = randn(B, T, H, K), torch.nn.functional.normalize(randn(B, T, H, K), dim=-1), randn(B, T, H, V)
    beta = torch.rand(B, T, H, generator=g)
    keywords = {"output_final_state": True}
    if family == "rwkv7":
        kk = torch.nn.functional.normalize(randn(B, T, H, K), dim=-1)
        a = torch.rand(B, T, H, K, generator=g)
        w = log_decay(B, T, H, K)
        if name == "fused_mul_recurrent_rwkv7":
            return (q, w, k, v, kk, a), keywords
        return (q, w, k, v, -kk, kk * a), keywords
    if family == "generalized_delta_rule":
        kk = torch.nn.functional.normalize(randn(B, T, H, K), dim=-1)
        return (q, k, v, -kk, kk * beta.unsqueeze(-1), log_decay(B, T, H, K)), keywords
    positional = {"linear_attn": (q, k, v), "retention": (q, k, v), "delta_rule": (q, k, v, beta),
                  "gated_delta_rule": (q, k, v, log_decay(B, T, H), beta),
                  "kda": (q, k, v, log_decay(B, T, H, K), beta)}.get(family, (q, k, v))
    if family == "simple_gla":
        keywords["g"] = log_decay(B, T, H)
    elif family == "gla":
        keywords["gk" if name == "fused_recurrent_gla" else "g"] = log_decay(B, T, H, K)
    elif family == "lightning_attn":
        keywords.update(layer_idx=1, num_layers=4)
    if name in ("fused_recurrent_gated_delta_rule", "fused_recurrent_gdn"):  # fla's order is q, k, v, g, gk, gv, beta
        positional, keywords["beta"] = positional[:4], beta
    if name.startswith("parallel_"):
        del keywords["output_final_state"]
    return positional, keywords


OPS = [(family, name) for family, names in integration.FAMILIES.items() for name in names]


def test_every_linattn_fla_function_is_routed():
    assert sorted(name for _, name in OPS) == sorted(lfla.__all__)


@pytest.mark.parametrize("family,name", OPS)
def test_parameters_are_fla_s_in_fla_s_order(family, name):
    """The wrappers hand fla's call to linattn.fla unchanged: that is right only while linattn's function has
    fla's parameters in fla's order (fla's deprecated stubs, which take only **kwargs, aside)."""
    fla_params = [p.name for p in inspect.signature(inspect.unwrap(getattr(importlib.import_module(
        f"fla.ops.{family}"), name))).parameters.values() if p.kind is not p.VAR_KEYWORD]
    linattn_params = [p.name for p in inspect.signature(getattr(lfla, name)).parameters.values()
                      if p.kind is not p.VAR_KEYWORD]
    assert fla_params == linattn_params or fla_params == []


@pytest.mark.parametrize("family,name", OPS)
def test_each_op_on_cpu_is_linattn_s(family, name, enabled):
    positional, keywords = _inputs(family, name)
    got = getattr(importlib.import_module(f"fla.ops.{family}"), name)(*positional, **keywords)
    want = getattr(lfla, name)(*positional, **keywords)
    assert _flat(got) is not None and len(_flat(got)) == len(_flat(want))
    for g, w in zip(_flat(got), _flat(want)):
        assert (g is None and w is None) or torch.equal(g, w)


def _flat(outputs):
    """The tensors (and Nones) of an op's nested output tuples, in order."""
    if isinstance(outputs, (tuple, list)):
        return [x for item in outputs for x in _flat(item)]
    return [outputs]


@pytest.mark.parametrize("name", sorted(integration.DISPATCHED))
def test_dispatched_ops_go_through_fla_s_registry(name, enabled):
    """chunk_gated_delta_rule and chunk_dplr_delta_rule stay fla's own functions: linattn is a backend in
    their registry, taking CPU tensors only (meta tensors, like a GPU's, go on to fla's backends)."""
    registry = fla.backends._operation_registries[integration.DISPATCHED[name]]
    backend = registry._backends["linattn"]
    assert registry._get_sorted_backends()[0] is backend
    family = integration.DISPATCHED[name].split(".")[0]
    assert integration.routed(getattr(importlib.import_module(f"fla.ops.{family}"), name)) is None
    positional, keywords = _inputs(family, name)
    assert backend.verify(name, *positional, **keywords) == (True, None)
    on_meta = [x.to("meta") for x in positional]
    accepted, reason = backend.verify(name, *on_meta, **keywords)
    assert not accepted and "CPU" in reason


def test_other_ops_are_wrapped_in_every_fla_module_that_holds_them(enabled):
    import fla.layers.gla
    import fla.ops.gla.chunk
    for holder in (fla.ops, fla.ops.gla, fla.ops.gla.chunk, fla.layers.gla):
        assert integration.routed(holder.chunk_gla) == "chunk_gla"
    assert integration.routed(fla.ops.kda.fused_recurrent_kda) == "fused_recurrent_kda"


def test_a_wrapper_sends_other_devices_to_fla():
    seen = []
    wrapper = integration._wrapper("chunk_gla", lambda *args, **kwargs: seen.append(args[0].device.type) or "fla")
    positional, keywords = _inputs("gla", "chunk_gla")
    assert wrapper(*[x.to("meta") for x in positional], **{k: v for k, v in keywords.items() if k != "g"}) == "fla"
    assert seen == ["meta"]
    assert torch.equal(wrapper(*positional, **keywords)[0], lfla.chunk_gla(*positional, **keywords)[0])


def test_disable_leaves_fla_exactly_as_it_was():
    before = _fla_state()
    positional, keywords = _inputs("gated_delta_rule", "chunk_gated_delta_rule")
    with pytest.raises(RuntimeError, match=TRITON_ON_CPU):
        fla.ops.chunk_gated_delta_rule(*positional, **keywords)
    integration.enable()
    integration.enable()  # a second call changes nothing
    assert integration.is_enabled() and not _same_state(before, _fla_state())
    # A module imported while enabled binds the wrappers; disable() restores it too.
    late = types.ModuleType("fla._linattn_test_late_import")
    late.chunk_gla = fla.ops.gla.chunk_gla
    sys.modules[late.__name__] = late
    try:
        fla.ops.chunk_gated_delta_rule(*positional, **keywords)
        integration.disable()
        integration.disable()
        assert not integration.is_enabled() and _same_state(before, _fla_state())
        assert integration.routed(late.chunk_gla) is None and late.chunk_gla is fla.ops.gla.chunk_gla
    finally:
        del sys.modules[late.__name__]
    with pytest.raises(RuntimeError, match=TRITON_ON_CPU):
        fla.ops.chunk_gated_delta_rule(*positional, **keywords)


def test_fla_that_does_not_import_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "fla.backends", None)  # as when a dependency (einops, Triton) is missing
    with pytest.raises(ImportError, match=r"pip install triton==3\.9\.0 flash-linear-attention==0\.6\.0"):
        integration.enable()
    assert not integration.is_enabled()


def test_other_fla_versions_are_refused(monkeypatch):
    monkeypatch.setattr(fla, "__version__", "0.7.0")
    with pytest.raises(RuntimeError, match=r"flash-linear-attention 0\.7\.0.*>= 0\.6, < 0\.7.*"
                                           r"flash-linear-attention==0\.6\.0"):
        integration.enable()
    assert not integration.is_enabled()


# ------------------------------------------------------------------------------------------------
# The layers.

D = 32
# fla layer: (constructor keywords, the Triton-only helper it fails in on the CPU as it is under enable() (a
#             path in fla; None: it runs as it is, its Triton helpers all routed by enable()), whether it runs
#             through linattn once its helper modules are swapped for linattn.layers' (GatedDeltaNet calls the
#             convolution function, not its modules))
LAYERS = {
    "GatedDeltaNet": (dict(hidden_size=D, head_dim=8, num_heads=2, expand_v=2), None, False),
    "GatedDeltaNet(use_short_conv=False)": (dict(hidden_size=D, head_dim=8, num_heads=2, expand_v=2,
                                                 use_short_conv=False), None, True),
    "KimiDeltaAttention": (dict(hidden_size=D, head_dim=8, num_heads=2), None, True),
    "GatedLinearAttention": (dict(hidden_size=D, num_heads=2), None, True),
    "SimpleGatedLinearAttention": (dict(hidden_size=D, num_heads=2), None, True),
    "DeltaNet": (dict(hidden_size=D, num_heads=2), None, True),
    "LinearAttention": (dict(hidden_size=D, num_heads=2), None, True),
    "MultiScaleRetention": (dict(hidden_size=D, num_heads=2), None, True),
    "Mamba2": (dict(hidden_size=D, num_heads=4, head_dim=16, state_size=8), None, False),
    "RWKV7Attention": (dict(hidden_size=D, head_dim=8, num_heads=4, layer_idx=0, num_hidden_layers=2,
                            decay_low_rank_dim=8, gate_low_rank_dim=8, a_low_rank_dim=8, v_low_rank_dim=8),
                       None, False),
}


def _build(key, cls_from):
    name = key.split("(")[0]
    kwargs = LAYERS[key][0]
    torch.manual_seed(0)
    if cls_from is llayers:
        return getattr(llayers, name)(**kwargs)
    cls = getattr(fla_layers, name, None) or getattr(importlib.import_module("fla.layers.simple_gla"), name)
    return cls(**kwargs)


def _failing_fla_frame(error):
    """What fla's layer called that failed, as 'path:function': the first frame of fla's own code (not its
    decorators nor its backend dispatch) below the layer's code in error's traceback."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/fla/" in f.filename
              and "/fla/utils/" not in f.filename and not f.filename.endswith("/fla/backends.py")]
    below = [i for i, f in enumerate(frames) if "/fla/layers/" in f.filename]
    called = frames[below[-1] + 1] if below and below[-1] + 1 < len(frames) else None
    return f"{called.filename.split('/fla/')[-1]}:{called.name}" if called else ""


def _swap_triton_modules(fla_layer, linattn_layer):
    """fla_layer with each of its fla.modules submodules (Triton-only norms, convolutions, feature maps,
    rotary embedding) replaced by a copy of linattn_layer's submodule of the same name."""
    swapped = []
    for path, module in list(fla_layer.named_modules()):
        if path and type(module).__module__.startswith("fla.modules"):
            parent, _, attr = path.rpartition(".")
            setattr(fla_layer.get_submodule(parent), attr, copy.deepcopy(linattn_layer.get_submodule(path)))
            swapped.append(path)
    return swapped


RUNNING = [key for key, (_, _, runs) in LAYERS.items() if runs]


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("key", RUNNING)
def test_layers_whose_helpers_are_modules_run_through_linattn(key, padded):
    """With its helper modules swapped, the fla layer runs its own code and, under enable(), linattn's
    operator: forward and backward equal linattn.layers' layer of the same state dict, also for a left-padded
    batch (fla's layer unpads it and gives the operator cu_seqlens); without enable() its operator is
    Triton's and fails."""
    fla_layer, linattn_layer = _build(key, fla_layers), _build(key, llayers)
    linattn_layer.load_state_dict(fla_layer.state_dict(), strict=True)
    assert _swap_triton_modules(fla_layer, linattn_layer)
    x = torch.randn(2, 70, D, generator=torch.Generator().manual_seed(1))
    mask = None
    if padded:
        mask = torch.ones(2, 70, dtype=torch.long)
        mask[0, :13] = 0
    with pytest.raises((RuntimeError, AssertionError)) as error:  # Triton's, or fla's own refusal of float32
        fla_layer(x, attention_mask=mask)
    assert _failing_fla_frame(error.value).startswith("ops/"), _failing_fla_frame(error.value)
    _assert_same_layer(fla_layer, linattn_layer, x, mask)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("key", [key for key, (_, fails_in, _) in LAYERS.items() if fails_in is None])
def test_layers_whose_helpers_linattn_routes_run_as_they_are(key, padded):
    """Under enable() fla's RMSNorm, FusedRMSNormGated and short convolution compute through linattn too
    (their module-level rms_norm, rms_norm_gated, causal_conv1d wrapped), so these layers run unchanged on
    the CPU: forward and backward equal linattn.layers' layer of the same state dict, full and left-padded;
    without enable() they fail in fla's Triton norm, convolution or operator."""
    fla_layer, linattn_layer = _build(key, fla_layers), _build(key, llayers)
    linattn_layer.load_state_dict(fla_layer.state_dict(), strict=True)
    x = torch.randn(2, 70, D, generator=torch.Generator().manual_seed(2))
    mask = None
    if padded:
        mask = torch.ones(2, 70, dtype=torch.long)
        mask[0, :13] = 0
    with pytest.raises((RuntimeError, AssertionError)) as error:
        fla_layer(x, attention_mask=mask)
    assert _failing_fla_frame(error.value).startswith(("modules/norm/", "modules/causal_conv1d/", "modules/rotary/",
                                                       "modules/token_shift.py", "modules/activations/", "ops/")), \
        _failing_fla_frame(error.value)
    _assert_same_layer(fla_layer, linattn_layer, x, mask)


@pytest.mark.parametrize("key", ["GatedDeltaNet", "KimiDeltaAttention", "DeltaNet", "SimpleGatedLinearAttention",
                                 "MultiScaleRetention"])
def test_layers_as_they_are_decode_with_a_cache(key):
    """fla's layer as it is, under enable(), decoding with a cache (linattn.layers.Cache, fla's Cache API): a
    prompt, then one token at a time (fla's ShortConvolution.step and causal_conv1d_update, the rotary
    embedding's offsets, the recurrent operator), gives the whole sequence's output."""
    kwargs = dict(LAYERS[key][0], layer_idx=0)
    torch.manual_seed(0)
    cls = getattr(fla_layers, key, None) or getattr(importlib.import_module("fla.layers.simple_gla"), key)
    layer = cls(**kwargs).eval()
    x = torch.randn(2, 9, D, generator=torch.Generator().manual_seed(4))
    integration.enable()
    try:
        with torch.no_grad():
            whole = layer(x)[0]
            cache = llayers.Cache()
            outs = [layer(x[:, :5], past_key_values=cache, use_cache=True)[0]]
            outs += [layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)[0] for t in range(5, 9)]
    finally:
        integration.disable()
    _assert_close(torch.cat(outs, dim=1), whole, "decoded outputs")


@pytest.mark.parametrize("interleaved", [False, True])
def test_fla_rotary_embedding_against_its_reference(interleaved):
    """fla's rotary_embedding under enable() against fla's own torch reference (rotary_embedding_ref) over
    the whole table, with a rotary dimension below the head's; packed sequences with per-sequence offsets
    against each sequence turned alone; without enable() Triton's error."""
    from fla.modules.rotary import ops as rotary
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, 3, 12, generator=generator)
    angles = torch.arange(20, dtype=torch.float32)[:, None] * torch.rand(4, generator=generator)[None]
    cos, sin = angles.cos(), angles.sin()  # a rotary dimension of 8 of the 12 channels
    with pytest.raises(RuntimeError, match=TRITON_ON_CPU):
        rotary.rotary_embedding(x, cos, sin, interleaved)
    integration.enable()
    try:
        got = rotary.rotary_embedding(x, cos, sin, interleaved)
        packed = rotary.rotary_embedding(x[:1], cos, sin, interleaved, seqlen_offsets=torch.tensor([3, 0, 5]),
                                         cu_seqlens=torch.tensor([0, 2, 2, 7]))
    finally:
        integration.disable()
    _assert_close(got, rotary.rotary_embedding_ref(x, cos[:7], sin[:7], interleaved), "rotary", 1e-6)
    for a, b, offset in ((0, 2, 3), (2, 7, 5)):
        want = rotary.rotary_embedding_ref(x[:1, a:b], cos[offset:offset + b - a], sin[offset:offset + b - a],
                                           interleaved)
        _assert_close(packed[:, a:b], want, f"packed rotary [{a}, {b})", 1e-6)


def _assert_same_layer(fla_layer, linattn_layer, x, mask):
    """Under enable(): fla_layer's output, input gradient and every parameter gradient equal linattn_layer's."""
    integration.enable()
    try:
        x_fla, x_linattn = x.clone().requires_grad_(), x.clone().requires_grad_()
        o_fla, o_linattn = fla_layer(x_fla, attention_mask=mask)[0], linattn_layer(x_linattn, attention_mask=mask)[0]
        o_fla.square().sum().backward()
        o_linattn.square().sum().backward()
    finally:
        integration.disable()
    _assert_close(o_fla, o_linattn, "o")
    _assert_close(x_fla.grad, x_linattn.grad, "x.grad")
    linattn_params = dict(linattn_layer.named_parameters())
    for path, p in fla_layer.named_parameters():
        _assert_close(p.grad, linattn_params[path].grad, path + ".grad")


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fla_norms_against_their_reference(residual, dtype):
    """fla's RMSNorm and FusedRMSNormGated under enable() (Triton's error without) against the formula in
    float32, with a residual and prenorm: the normalised output and the residual sum in the dtypes fla keeps
    them in."""
    from fla.modules import FusedRMSNormGated, RMSNorm
    generator = torch.Generator().manual_seed(3)
    x, g, r = (torch.randn(2, 5, 24, generator=generator).to(dtype) for _ in range(3))
    norm, gated = RMSNorm(24, eps=1e-5), FusedRMSNormGated(24, eps=1e-5, activation="sigmoid")
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 24))
        gated.weight.copy_(torch.linspace(1.5, 0.5, 24))
    norm, gated = norm.to(dtype), gated.to(dtype)
    extra = dict(residual=r, prenorm=True) if residual else {}
    with pytest.raises(RuntimeError, match=TRITON_ON_CPU):
        norm(x, **extra)
    integration.enable()
    try:
        got, got_gated = norm(x, **extra), gated(x, g, **extra)
    finally:
        integration.disable()
    total = x.float() + (r.float() if residual else 0)
    rms = total * torch.rsqrt(total.square().mean(-1, keepdim=True) + 1e-5)
    want = rms * norm.weight.float()
    want_gated = rms * gated.weight.float() * torch.sigmoid(g.float())
    if residual:
        (got, got_sum), (got_gated, gated_sum) = got, got_gated
        assert got_sum.dtype == dtype and torch.equal(got_sum, total.to(dtype)) and torch.equal(gated_sum, got_sum)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert got.dtype == got_gated.dtype == dtype
    _assert_close(got.float(), want, "rms_norm", tol)
    _assert_close(got_gated.float(), want_gated, "rms_norm_gated", tol)


def _assert_close(got, want, what, tol=1e-5):
    """Equal to fp32 rounding, relative to the tensor's scale: fla's SimpleGatedLinearAttention keeps a padded
    batch padded (masking v and the decay) where linattn's unpads it, so sums run in another order (seen: 3.8e-6
    on gradients of size 25)."""
    error = (got - want).abs().max().item()
    assert error <= tol * max(want.abs().max().item(), 1e-3), f"{what}: max |fla - linattn| {error:.2e}"
