"""flash-linear-attention's models (fla.models) on CPU tensors under linattn.integrations.fla.enable().

The models add fla's fused Triton helpers around their layers: GatedMLP's SwiGLU (fused with the down
projection or not), LayerNorm's layer_norm (RWKV-7), HGRN2's rms_norm_linear, and the fused cross-entropy
losses. enable() routes their CPU calls to torch forms (linattn.integrations.fla_fused); here:

- each routed helper against its formula written in the test (fp64 truth; fp32 and bf16) or torch's own
  function of the same definition (F.cross_entropy with label smoothing, F.layer_norm);
- per model family (tiny random float32 configs): the model as fla builds it (fused norms, fused SwiGLU, fused
  cross entropy) against a reference with the same weights whose model-level parts are torch's: fla's
  unfused configuration (fuse_norm, fuse_swiglu, fuse_cross_entropy off: torch's RMSNorm/LayerNorm and
  nn.CrossEntropyLoss) with each GatedMLP computing silu(gate)·up in torch. The attention layers are the
  same in both (fla's layers under enable(), checked against linattn.layers in test_fla_integration.py and
  test_fla_rwkv7_mamba2.py). Logits, loss (also against F.cross_entropy of the logits) and every parameter's
  gradient; every parameter gets a gradient;
- a left-padded batch, and sequences packed with cu_seqlens (an empty one among them), equal the sequences run
  alone;
- decoding token by token with the model's cache equals the whole sequence's forward; greedy generate with
  the cache (handed on to the model: transformers 5.25 passes it as `cache=`, which fla 0.6.0's models drop)
  equals generate without it, each token the argmax of the whole forward at its position;
- without enable() the same models fail again in Triton or fla's CUDA-only assertion.
"""

import types

import pytest

torch = pytest.importorskip("torch", reason="fla's models are torch modules")
F = torch.nn.functional

from linattn.integrations import fla as integration  # noqa: E402
from linattn.integrations import fla_fused  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
TRITON_ON_CPU = "active drivers"  # Triton's error for a kernel launched where it has no driver
VOCAB = 64
BASE = dict(hidden_size=32, num_hidden_layers=2, vocab_size=VOCAB, intermediate_size=48, eos_token_id=None)

# fla model family: (config class, model class, tiny configuration beyond BASE)
MODELS = {
    "gated_deltanet": ("GatedDeltaNetConfig", "GatedDeltaNetForCausalLM", dict(num_heads=2, head_dim=16)),
    "kda": ("KDAConfig", "KDAForCausalLM", dict(num_heads=2, head_dim=16)),
    "gla": ("GLAConfig", "GLAForCausalLM", dict(num_heads=2)),
    "delta_net": ("DeltaNetConfig", "DeltaNetForCausalLM", dict(num_heads=2)),
    "retnet": ("RetNetConfig", "RetNetForCausalLM", dict(num_heads=2)),
    "linear_attn": ("LinearAttentionConfig", "LinearAttentionForCausalLM", dict(num_heads=2)),
    "hgrn2": ("HGRN2Config", "HGRN2ForCausalLM", dict(expand_ratio=16)),
    "mom": ("MomConfig", "MomForCausalLM", dict(num_heads=2, head_dim=16, num_memories=2, topk=1)),
    "rwkv7": ("RWKV7Config", "RWKV7ForCausalLM", dict(head_dim=16)),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", dict(num_heads=4, head_dim=16, state_size=8, expand=2,
                                                         n_groups=1, chunk_size=16)),
}
UNFUSED = dict(fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False, fuse_linear_cross_entropy=False)


NO_FLA = ("flash-linear-attention 0.6.0 (with Triton, einops) does not import "
          "(pip install triton==3.9.0 flash-linear-attention==0.6.0)")


@pytest.fixture(scope="module")
def fla_models():
    return pytest.importorskip("fla.models", reason=NO_FLA)


@pytest.fixture
def enabled(fla_models):
    """linattn's routing in effect for the test (fla's models imported first, or the test skipped)."""
    integration.enable()
    yield fla_models
    integration.disable()


def _build(fla_models, family, seed=0, **overrides):
    """fla's model of the family, tiny, float32, every parameter moved off its initial value (some start at
    zero or at ramps)."""
    config_class, model_class, extra = MODELS[family]
    config = getattr(fla_models, config_class)(**{**BASE, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(fla_models, model_class)(config).float()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _torch_mlp_forward(mlp, x, **kwargs):
    return mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))


def _unfused_name(name):
    return name.replace(".g_norm_swish_gate.", ".g_norm.")


def _reference(fla_models, family, model):
    """The same weights in fla's unfused configuration, with GatedMLP computed in torch."""
    reference = _build(fla_models, family, **UNFUSED)
    # Unfused, GLA's and RetNet's output norm is g_norm (an RMSNorm and the swish gate) for g_norm_swish_gate.
    state = {_unfused_name(k): v for k, v in model.state_dict().items()}
    reference.load_state_dict(state, strict=True)
    from fla.modules import GatedMLP
    for module in reference.modules():
        if isinstance(module, GatedMLP):
            assert module.hidden_act == "swish"
            module.forward = types.MethodType(_torch_mlp_forward, module)
    return reference


def _close(got, want, what, tol=1e-5):
    error = (got - want).abs().max().item()
    assert error <= tol * max(want.abs().max().item(), 1e-6), f"{what}: max difference {error:.2e}"


def _tokens(seed=1, shape=(2, 13)):
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _run(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


# ------------------------------------------------------------------------------------------------
# The models.


@pytest.mark.parametrize("family", MODELS)
def test_model_loss_and_gradients_equal_the_torch_reference(fla_models, enabled, family):
    model = _build(fla_models, family)
    ids = _tokens()
    out = _run(model, ids)
    assert torch.isfinite(out.loss)
    # KDA computes its training loss with fla's fused linear cross entropy (no logits): a second forward
    # without labels gives them.
    logits = out.logits if out.logits is not None else model(input_ids=ids).logits.detach()
    expected_loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).double(), ids[:, 1:].reshape(-1))
    if getattr(out, "aux_loss", None) is not None:  # MoM adds its routers' load-balancing loss
        expected_loss = expected_loss + model.aux_loss_scale * out.aux_loss.double()
    _close(out.loss.double(), expected_loss, "loss against F.cross_entropy of the logits")
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}: no finite gradient"
        assert p.grad.abs().max() > 0, f"{name}: gradient zero"

    reference = _reference(fla_models, family, model)
    want = _run(reference, ids)
    _close(logits, want.logits, "logits")
    _close(out.loss, want.loss, "loss")
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        _close(p.grad, grads[_unfused_name(name)].grad, f"{name}.grad", tol=1e-4)


def _cache_reaching_the_model(model):
    """transformers 5.25's generate hands the cache to the model as `cache=`; fla 0.6.0's models read
    `past_key_values` and drop `cache` with their other **kwargs, so every step would start from an empty state
    (on every device). This passes it on under fla's name."""
    forward = model.forward

    def with_cache(*args, cache=None, **kwargs):
        if cache is not None and kwargs.get("past_key_values") is None:
            kwargs["past_key_values"] = cache
        return forward(*args, **kwargs)

    model.forward = with_cache
    return model


@pytest.mark.parametrize("family", [f for f in MODELS if f != "mom"])
def test_decoding_with_the_cache_equals_the_whole_forward(fla_models, enabled, family):
    """A prompt then one token at a time through the model's own cache (past_key_values): each step's logits
    equal the whole sequence's at that position; greedy generate with the cache (passed on to the model) gives
    the tokens of generate without it, each the argmax of the whole forward at its position."""
    model = _build(fla_models, family).eval()
    prompt, new = _tokens(seed=2, shape=(2, 6)), 5
    sequence = _tokens(seed=3, shape=(2, prompt.shape[1] + new))
    with torch.no_grad():
        whole = model(input_ids=sequence).logits
        out = model(input_ids=sequence[:, :6], use_cache=True)
        steps = [out.logits]
        for i in range(6, sequence.shape[1]):
            out = model(input_ids=sequence[:, i:i + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
        _close(torch.cat(steps, 1), whole, "logits decoded with the cache")

        uncached = model.generate(prompt, max_new_tokens=new, do_sample=False, use_cache=False)
        cached = _cache_reaching_the_model(model).generate(prompt, max_new_tokens=new, do_sample=False,
                                                           use_cache=True)
        logits = model(input_ids=cached).logits
    assert cached.shape == (2, prompt.shape[1] + new)
    assert torch.equal(cached, uncached)
    assert torch.equal(logits[:, prompt.shape[1] - 1:-1].argmax(-1), cached[:, prompt.shape[1]:])


@pytest.mark.parametrize("family", [f for f in MODELS if f != "mom"])
def test_left_padded_batch_equals_the_sequences_alone(fla_models, enabled, family):
    """A batch with its second row left-padded by 3 tokens (attention_mask 0 there): each row's logits at its
    real tokens equal the sequence run alone (fla's layers unpad the batch and pass cu_seqlens on)."""
    model = _build(fla_models, family).eval()
    sequences = _tokens(seed=4, shape=(2, 9))
    ids, mask = sequences.clone(), torch.ones_like(sequences)
    ids[1, :3], mask[1, :3] = 0, 0
    with torch.no_grad():
        batch = model(input_ids=ids, attention_mask=mask).logits
        _close(batch[:1], model(input_ids=sequences[:1]).logits, "the full row")
        _close(batch[1:, 3:], model(input_ids=sequences[1:, 3:]).logits, "the padded row's tokens")


# fla's models that keep packed sequences apart (cu_seqlens handed to every layer). Not the others, by fla's own
# code: LinearAttentionForCausalLM hands its model no **kwargs (and LinearAttentionModel.forward takes none), so
# cu_seqlens never reaches its layers; fla's Mamba2 torch path (its CPU path) has no cu_seqlens or seq_idx at all;
# MoM's unstable sort (below).
PACKED = ["gated_deltanet", "kda", "gla", "delta_net", "retnet", "hgrn2", "rwkv7"]


@pytest.mark.parametrize("family", PACKED)
def test_packed_sequences_equal_the_sequences_alone(fla_models, enabled, family):
    """Sequences of 7, 0 and 4 tokens packed in one row with cu_seqlens: the logits of the sequences run apart."""
    model = _build(fla_models, family).eval()
    first, second = _tokens(seed=5, shape=(1, 7)), _tokens(seed=6, shape=(1, 4))
    cu_seqlens = torch.tensor([0, 7, 7, 11], dtype=torch.int32)
    with torch.no_grad():
        packed = model(input_ids=torch.cat([first, second], 1), cu_seqlens=cu_seqlens).logits
        apart = torch.cat([model(input_ids=first).logits, model(input_ids=second).logits], 1)
    _close(packed, apart, "packed logits")


def test_mom_is_causal_and_decodes_only_with_a_stable_token_sort(fla_models, enabled, monkeypatch):
    """fla's MomAttention groups the tokens by memory with combined.argsort(), which is not stable: on the CPU
    the tokens routed to one memory can leave their order, so a prefix's logits differ from the whole
    sequence's. With a stable sort (patched here) MoM is causal, independent of the rest of the batch, and
    decodes with its cache to the whole forward."""
    model = _build(fla_models, "mom").eval()
    sequence = _tokens(seed=3, shape=(2, 11))

    def causal_and_batch_independent():
        with torch.no_grad():
            whole = model(input_ids=sequence).logits
            prefix = model(input_ids=sequence[:, :6]).logits
            alone = model(input_ids=sequence[:1]).logits
        scale = whole.abs().max().item()
        return ((prefix - whole[:, :6]).abs().max().item() <= 1e-5 * scale
                and (alone - whole[:1]).abs().max().item() <= 1e-5 * scale)

    assert not causal_and_batch_independent()
    argsort = torch.Tensor.argsort
    monkeypatch.setattr(torch.Tensor, "argsort", lambda self, *a, **k: argsort(self, *a, **{**k, "stable": True}))
    assert causal_and_batch_independent()
    with torch.no_grad():
        out = model(input_ids=sequence[:, :6], use_cache=True)
        steps = [out.logits]
        for i in range(6, sequence.shape[1]):
            out = model(input_ids=sequence[:, i:i + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
        _close(torch.cat(steps, 1), model(input_ids=sequence).logits, "MoM's logits decoded with the cache")


def test_fused_linear_cross_entropy_model_equals_the_unfused_one(fla_models, enabled):
    """fuse_linear_cross_entropy=True (fla computes the loss from the hidden states and lm_head's weight, no
    logits): the same loss and gradients as the unfused model."""
    model = _build(fla_models, "gated_deltanet", fuse_cross_entropy=False, fuse_linear_cross_entropy=True)
    ids = _tokens()
    out = _run(model, ids)
    assert out.logits is None
    reference = _reference(fla_models, "gated_deltanet", model)
    want = _run(reference, ids)
    _close(out.loss, want.loss, "loss")
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        _close(p.grad, grads[_unfused_name(name)].grad, f"{name}.grad", tol=1e-4)


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv7", "mamba2"])
def test_without_enable_the_models_fail_again(fla_models, family):
    integration.enable()
    integration.disable()
    model = _build(fla_models, family)
    with pytest.raises((RuntimeError, AssertionError)) as error:
        model(input_ids=_tokens(), labels=_tokens())
    assert TRITON_ON_CPU in str(error.value) or "CUDA" in str(error.value)


def test_enable_routes_the_loss_method_and_disable_restores_it(fla_models):
    from fla.modules import FusedCrossEntropyLoss
    original = FusedCrossEntropyLoss.forward
    integration.enable()
    try:
        assert integration.routed(FusedCrossEntropyLoss.forward) == "FusedCrossEntropyLoss.forward"
    finally:
        integration.disable()
    assert FusedCrossEntropyLoss.forward is original
    with pytest.raises(AssertionError, match="CUDA"):
        FusedCrossEntropyLoss()(torch.randn(3, 5), torch.tensor([0, 1, 2]))


# ------------------------------------------------------------------------------------------------
# The routed helpers against their formulas.

DTYPES = [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)]


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_swiglu_launchers_equal_the_formula(dtype, tol):
    g = torch.Generator().manual_seed(3)
    x, y, dz = (4 * torch.randn(5, 7, 33, generator=g, dtype=torch.float64) for _ in range(3))
    xt, yt = x.clone().requires_grad_(), y.clone().requires_grad_()
    z = xt * torch.sigmoid(xt) * yt
    z.backward(dz)
    cast = [t.to(dtype) for t in (x, y, dz)]
    _close(fla_fused.fla_swiglu_fwd(*cast[:2]).double(), z.detach(), "z", tol)
    dx, dy, z2 = fla_fused.fla_swiglu_fwdbwd(*cast, use_weight=True)
    assert dx.dtype == dy.dtype == z2.dtype == dtype
    _close(dx.double(), xt.grad, "dx", tol)
    _close(dy.double(), yt.grad, "dy", tol)
    _close(z2.double(), z.detach(), "z from fwdbwd", tol)
    assert len(fla_fused.fla_swiglu_fwdbwd(*cast)) == 2
    with pytest.raises(ValueError, match="same shape"):
        fla_fused.fla_swiglu_fwd(cast[0], cast[1][..., :-1])


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_fla_gated_mlp_fused_and_not_equals_torch(fla_models, enabled, dtype, tol):
    from fla.modules import GatedMLP
    for fuse in (True, False):
        torch.manual_seed(0)
        mlp = GatedMLP(24, intermediate_size=40, fuse_swiglu=fuse).to(dtype)
        x = torch.randn(2, 9, 24, dtype=dtype, requires_grad=True)
        mlp(x).square().sum().backward()
        got = [x.grad] + [p.grad for p in mlp.parameters()]
        x64 = x.detach().double().requires_grad_()
        mlp64 = GatedMLP(24, intermediate_size=40).double()
        mlp64.load_state_dict(mlp.state_dict())
        out = _torch_mlp_forward(mlp64, x64)
        _close(mlp(x).double(), out.detach(), f"fuse_swiglu={fuse}: output", tol)
        out.square().sum().backward()
        for a, b in zip(got, [x64.grad] + [p.grad for p in mlp64.parameters()]):
            _close(a.double(), b, f"fuse_swiglu={fuse}: gradient", 4 * tol)


def _ce_reference(logits, target, smoothing, scale, z, softcap, ignore):
    """Cross entropy from torch's F.cross_entropy (whose label smoothing has fla's definition) plus the z-loss,
    per row, in fp64."""
    scaled = logits.double() * scale
    if softcap is not None:
        scaled = softcap * torch.tanh(scaled / softcap)
    loss = F.cross_entropy(scaled, target, reduction="none", label_smoothing=smoothing, ignore_index=ignore)
    z_loss = z * torch.logsumexp(scaled, -1).square() * (target != ignore)
    return loss + z_loss, z_loss


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("smoothing,scale,z,softcap", [(0.0, 1.0, 0.0, None), (0.1, 0.7, 1e-3, 5.0)])
def test_fused_cross_entropy_loss_equals_torch(fla_models, enabled, dtype, tol, smoothing, scale, z, softcap):
    from fla.modules import FusedCrossEntropyLoss
    g = torch.Generator().manual_seed(4)
    logits = (3 * torch.randn(17, 97, generator=g)).to(dtype)
    target = torch.randint(0, 97, (17,), generator=g)
    target[[2, 11]] = -100
    want, want_z = _ce_reference(logits, target, smoothing, scale, z, softcap, -100)
    kept = (target != -100).sum()
    for reduction, expected in (("none", want), ("sum", want.sum()), ("mean", want.sum() / kept)):
        x = logits.clone().requires_grad_()
        loss, z_loss = FusedCrossEntropyLoss(reduction=reduction, label_smoothing=smoothing, logit_scale=scale,
                                             lse_square_scale=z, logit_softcapping=softcap, inplace_backward=True,
                                             return_z_loss=True)(x, target)
        assert loss.dtype == torch.float32
        _close(loss.double(), expected, f"{reduction} loss", tol)
        assert not z_loss.requires_grad
        x64 = logits.double().requires_grad_()
        ref, _ = _ce_reference(x64, target, smoothing, scale, z, softcap, -100)
        (ref.sum() if reduction != "mean" else ref.sum() / kept).backward()
        loss.sum().backward()
        _close(x.grad.double(), x64.grad, f"{reduction} gradient", tol)
    _close(z_loss.double(), want_z.sum() / kept, "z_loss", tol)


def test_fused_cross_entropy_refuses_a_process_group(fla_models, enabled):
    with pytest.raises(ValueError, match="process_group"):
        fla_fused.fla_cross_entropy_loss(torch.randn(2, 3), torch.tensor([0, 1]), process_group=object())


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("reduction,l2warp", [("mean", False), ("sum", True)])
def test_fused_linear_cross_entropy_equals_torch(fla_models, enabled, dtype, tol, reduction, l2warp):
    from fla.modules import FusedLinearCrossEntropyLoss
    from fla.modules.l2warp import l2_warp
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 9, 16, generator=g).to(dtype)
    w, b = torch.randn(41, 16, generator=g).to(dtype), torch.randn(41, generator=g).to(dtype)
    target = torch.randint(0, 41, (2, 9), generator=g)
    target[0, -1] = -100
    params = [t.clone().requires_grad_() for t in (x, w, b)]
    loss = FusedLinearCrossEntropyLoss(reduction=reduction, use_l2warp=l2warp, label_smoothing=0.05)(
        params[0], target, params[1], params[2])
    loss.backward()
    ref_params = [t.double().requires_grad_() for t in (x, w, b)]
    logits = F.linear(ref_params[0].reshape(-1, 16), ref_params[1], ref_params[2])
    ref = F.cross_entropy(logits, target.reshape(-1), reduction=reduction, label_smoothing=0.05)
    if l2warp:
        ref = l2_warp(ref, logits.unsqueeze(0))  # fla's torch L2Wrap over the N = 18 rows
    ref.backward()
    _close(loss.double(), ref.detach(), "loss", tol)
    for got, want, name in zip(params, ref_params, ("x", "weight", "bias")):
        _close(got.grad.double(), want.grad, f"{name} gradient", 4 * tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_layer_norm_and_norm_linear_equal_torch(fla_models, enabled, dtype, tol):
    from fla.modules import LayerNorm
    from fla.modules.layernorm import rms_norm_linear
    g = torch.Generator().manual_seed(6)
    x = (2 + 3 * torch.randn(3, 5, 24, generator=g)).to(dtype)
    norm = LayerNorm(24, bias=True, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(24, generator=g))
        norm.bias.copy_(torch.randn(24, generator=g))
    want = F.layer_norm(x.double(), (24,), norm.weight.double(), norm.bias.double(), 1e-5)
    got = norm(x)
    assert got.dtype == dtype
    _close(got.double(), want, "layer_norm", tol)
    w, lw, lb = (torch.randn(s, generator=g).to(dtype) for s in ((24,), (7, 24), (7,)))
    out = rms_norm_linear(x, w, None, lw, lb)
    x64 = x.double()
    rms = x64 * x64.square().mean(-1, keepdim=True).add(1e-5).rsqrt() * w.double()
    _close(out.double(), F.linear(rms, lw.double(), lb.double()), "rms_norm_linear", 2 * tol)


@pytest.mark.parametrize("family", ["gated_deltanet", "kda", "rwkv7", "mamba2"])
def test_bf16_model_runs_near_the_float32_one(fla_models, enabled, family):
    model = _build(fla_models, family)
    ids = _tokens()
    want = _run(model, ids)
    out = _run(model.to(torch.bfloat16), ids)
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    assert abs(out.loss.item() - want.loss.item()) <= 2e-2 * want.loss.item()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
