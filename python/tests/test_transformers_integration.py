"""linattn.integrations.transformers: the nine linear-attention families of transformers 5.25 (tiny random
models built from their config classes, no downloads) with linattn against transformers' own CPU path:
logits, gradients, greedy generation with the cache, a padded batch, a packed batch against its
sequences run alone (which transformers' CPU path refuses), bf16; enable() before and after the modeling
module's import; disable() restoring every object."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the transformers integration runs torch models")
transformers = pytest.importorskip("transformers", reason="linattn.integrations.transformers plugs into transformers")

import linattn.integrations.transformers as lt  # noqa: E402

if not lt.SUPPORTED_VERSIONS[0] <= tuple(int(x) for x in transformers.__version__.split(".")[:2]) \
        < lt.SUPPORTED_VERSIONS[1]:
    pytest.skip(f"transformers {transformers.__version__} is outside the tested range", allow_module_level=True)

from transformers.utils import logging as hf_logging  # noqa: E402

VOCAB = 64
_COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
               intermediate_size=48, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_HYBRID = ["linear_attention", "full_attention"]  # one linear-attention layer, one full-attention layer
# The gated delta rule families: 2 key heads of 16, 4 value heads of 8 (grouped value attention).
_GDN = dict(head_dim=16, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
            linear_num_value_heads=4, layer_types=_HYBRID)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
# The KDA families (multi-head latent attention in their full-attention layers).
_KDA = dict(num_key_value_heads=2, kv_lora_rank=16, q_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=8, moe_intermediate_size=16, num_experts_per_tok=2, n_shared_experts=1, linear_head_dim=8,
            linear_num_heads=4, layer_types=_HYBRID)

FAMILIES = {
    "qwen3_next": ("Qwen3NextConfig", {**_GDN, **_MOE}),
    "qwen3_5": ("Qwen3_5TextConfig", _GDN),
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", {**_GDN, **_MOE}),
    "olmo_hybrid": ("OlmoHybridConfig", dict(_GDN, head_dim=None)),
    "lara_mini": ("LaraMiniConfig", {**_GDN, **_MOE}),
    "qwen4_exp": ("Qwen4ExpTextConfig", {**_GDN, **_MOE, "hc_count": 2, "hc_lowrank": 8, "indexer_n_heads": 2,
                                         "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8,
                                         "indexer_compress_ratio": 4, "ngram_vocab_size_base": VOCAB,
                                         "heads_per_ngram": 2, "split_ngram_parts": 2}),
    "kimi_linear": ("KimiLinearConfig", {**_KDA, "num_local_experts": 4}),
    "bailing_hybrid": ("BailingHybridConfig", {**_KDA, "num_local_experts": 4}),
    # index_topk covers every test sequence: the top-k indexer is transformers' torch code over the whole
    # packed row, so a sparser choice would differ between packed and separate sequences.
    "glm5_next": ("Glm5NextTextConfig", {**_KDA, "qk_rope_head_dim": 0, "qk_nope_head_dim": 16, "n_routed_experts": 4,
                                         "index_topk": 16, "index_kpool": 1, "index_head_dim": 8, "index_n_heads": 2}),
}
# The modeling functions each family publishes under a kernel name linattn routes.
_CHUNK_OP = {"kimi_linear": "chunk_kimi_delta_attention", "bailing_hybrid": "chunk_kimi_delta_attention",
             "glm5_next": "chunk_kimi_delta_attention"}


def _config(name):
    cls, options = FAMILIES[name]
    options = {k: v for k, v in options.items() if v is not None}
    return getattr(transformers, cls)(**{**_COMMON, **options})


def build(name, dtype=torch.float32):
    config = _config(name)
    torch.manual_seed(0)
    if name == "glm5_next":  # no text-only causal LM class: the multimodal one, run on text
        config = transformers.Glm5NextConfig(text_config=config.to_dict(), vision_config=dict(
            depth=1, hidden_size=16, num_heads=2, intermediate_size=16, out_hidden_size=32,
            projection_intermediate_size=16))
        model = transformers.Glm5NextForConditionalGeneration(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(dtype).eval()


def modeling(name):
    return sys.modules[f"transformers.models.{name}.modeling_{name}"]


@pytest.fixture(scope="module", autouse=True)
def modeling_modules_imported():
    """Every family's modeling module imported before any enable() here: the "after import" case (the
    "before import" case runs in a fresh interpreter, test_enable_before_import). transformers' "falling
    back" notices are silenced meanwhile."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    for name in FAMILIES:
        build(name)
    yield
    lt.disable()
    hf_logging.set_verbosity(verbosity)


@pytest.fixture
def enabled():
    lt.enable()
    yield
    lt.disable()


def both(fn):
    """fn() with transformers' own CPU path, then with linattn."""
    lt.disable()
    reference = fn()
    lt.enable()
    return reference, fn()


def assert_close(got, want, tol, what):
    scale = want.abs().max().item()
    err = (got.float() - want.float()).abs().max().item()
    assert err <= tol * max(scale, 1e-3), f"{what}: max error {err:.3g} at scale {scale:.3g} (tolerance {tol:g})"


def tokens(batch, length, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_and_gradients(enabled, name):
    model = build(name)
    x = tokens(2, 23)
    weights = torch.randn(2, 23, VOCAB, generator=torch.Generator().manual_seed(2))

    def run():
        model.zero_grad()
        logits = model(x, use_cache=False).logits
        (logits * weights).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    (want, want_grads), (got, got_grads) = both(run)
    assert_close(got, want, 1e-5, f"{name} logits")
    assert got_grads.keys() == want_grads.keys()
    for n in want_grads:
        assert_close(got_grads[n], want_grads[n], 1e-3, f"{name} gradient of {n}")
    chunk = getattr(modeling(name), _CHUNK_OP.get(name, "torch_chunk_gated_delta_rule"))
    assert lt.routed_kernel(chunk) in ("chunk_gated_delta_rule", "chunk_kda")


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_with_cache(enabled, name):
    model = build(name)
    prompt = tokens(2, 7, seed=3)
    mask = torch.ones_like(prompt)
    mask[0, :3] = 0  # a left-padded row beside a full one
    prompt[0, :3] = 0

    def run():
        return model.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)

    want, got = both(run)
    assert torch.equal(got, want), f"{name}: {got.tolist()} != {want.tolist()}"


@pytest.mark.parametrize("name", FAMILIES)
def test_padded_batch(enabled, name):
    model = build(name)
    x = tokens(2, 13, seed=4)
    mask = torch.ones_like(x)
    mask[1, :5] = 0  # left padding of the second row
    x[1, :5] = 0

    def run():
        return model(x, attention_mask=mask, use_cache=False).logits.detach()

    want, got = both(run)
    assert_close(got[mask.bool()], want[mask.bool()], 1e-5, f"{name} padded logits")


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("keywords", ["cu_seq_lens", "seq_idx", "cu_seq_lens with a cache"])
def test_packed_batch_equals_separate_sequences(enabled, name, keywords):
    """transformers' packed format (DataCollatorWithFlattening's): one row, positions restarting, and
    cu_seq_lens_q / cu_seq_lens_k (return_flash_attn_kwargs) or seq_idx (return_seq_idx); the
    convolution, the recurrences and the full attention all keep the sequences apart, so each equals the
    sequence run alone, also while the model keeps a cache (the convolution's is then padded)."""
    if name == "qwen4_exp" and keywords.endswith("cache"):
        pytest.skip("qwen4_exp's QSA indexer (transformers' torch code, outside the kernel hook) computes other "
                    "keys for a packed row when a cache is kept (its first differing output is indexer.k_layernorm)")
    model = build(name)
    lengths = [6, 1, 9]
    parts = [tokens(1, n, seed=10 + i) for i, n in enumerate(lengths)]
    cu = torch.tensor([0, 6, 7, 16], dtype=torch.int32)
    if keywords.startswith("cu_seq_lens"):
        packing = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    else:
        packing = dict(seq_idx=torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(lengths)])[None])
    packed = model(torch.cat(parts, 1), position_ids=torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0),
                   use_cache=keywords.endswith("cache"), **packing).logits.detach()
    for i, part in enumerate(parts):
        alone = model(part, use_cache=False).logits.detach()
        assert_close(packed[:, int(cu[i]):int(cu[i + 1])], alone, 1e-5, f"{name} packed sequence {i}")


@pytest.mark.parametrize("name", ["qwen3_5", "kimi_linear", "glm5_next"])
def test_packed_batch_backward_and_full_attention_kernel(enabled, monkeypatch, name):
    """A packed batch's backward: every parameter's gradient of the packed row's loss equals the sum over
    its sequences run alone. Its full-attention layers run linattn's softmax with cu_seqlens (grouped key
    heads in qwen3_5, latent attention in kimi_linear), except glm5_next's, whose top-k mask only the
    per-sequence path applies."""
    import linattn.torch as linattn_torch
    calls = []
    real = linattn_torch.softmax_attention
    monkeypatch.setattr(linattn_torch, "softmax_attention", lambda *a, **k: calls.append(k) or real(*a, **k))
    model = build(name)
    lengths = [6, 1, 9]
    parts = [tokens(1, n, seed=20 + i) for i, n in enumerate(lengths)]
    cu = torch.tensor([0, 6, 7, 16], dtype=torch.int32)

    def gradients(ids, **packing):
        model.zero_grad(set_to_none=True)
        logits = model(ids, use_cache=False, **packing).logits
        weights = torch.linspace(-1, 1, logits.numel()).reshape(logits.shape)
        (logits * weights[:, :logits.shape[1]]).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    packed = gradients(torch.cat(parts, 1), position_ids=torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0),
                       cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=9, max_length_k=9)
    assert (len(calls) > 0) == (name != "glm5_next")
    assert all(call.get("cu_seqlens") is not None for call in calls)
    alone = {}
    for i, part in enumerate(parts):
        # The same weights per logit as in the packed row: the slice of the packed row's weight tensor.
        model.zero_grad(set_to_none=True)
        logits = model(part, use_cache=False).logits
        full = torch.linspace(-1, 1, 16 * logits.shape[-1]).reshape(1, 16, -1)
        (logits * full[:, int(cu[i]):int(cu[i + 1])]).sum().backward()
        for n, p in model.named_parameters():
            if p.grad is not None:
                alone[n] = alone.get(n, 0) + p.grad
    assert packed.keys() == alone.keys()
    for n in packed:
        assert_close(packed[n], alone[n], 1e-4, f"{name} packed gradient of {n}")


@pytest.mark.parametrize("name", FAMILIES)
def test_bfloat16(enabled, name):
    """A bf16 model: linattn's logits are as close to the fp32 model's as transformers' bf16 CPU path is."""
    x = tokens(2, 17, seed=5)
    exact = build(name)(x, use_cache=False).logits.detach()
    model = build(name, torch.bfloat16)

    def run():
        return model(x, use_cache=False).logits.detach()

    want, got = both(run)
    assert got.dtype == torch.bfloat16
    fallback_err = (want.float() - exact).abs().max().item()
    linattn_err = (got.float() - exact).abs().max().item()
    assert linattn_err <= max(2 * fallback_err, 1e-2 * exact.abs().max().item()), (linattn_err, fallback_err)


def test_decay_gradient_under_strong_decay(enabled):
    """docs/models.md's gradient finding, as a check: through qwen3_5's own gated delta rule function under
    enable(), the gradient of A_log (the decay rate exp(A_log) = 54.6) is within 1e-4 of an fp64 truth
    (test_delta.py's recurrence, token by token); transformers' fallback is off by 9.5% there."""
    from test_delta import naive
    generator = torch.Generator().manual_seed(0)
    B, T, H, K = 1, 64, 2, 16
    q, k, v = (torch.randn(B, T, H, K, dtype=torch.float64, generator=generator) for _ in range(3))
    a, beta = torch.randn(B, T, H, dtype=torch.float64, generator=generator), torch.rand(B, T, H, dtype=torch.float64)
    weights = torch.randn(B, T, H, K, dtype=torch.float64, generator=generator)

    def grad(run, dtype):
        A_log = torch.full((H,), 4.0, dtype=dtype, requires_grad=True)
        g = -A_log.exp() * torch.nn.functional.softplus(a.to(dtype))
        (run(*(x.to(dtype) for x in (q, k, v)), g, beta.to(dtype)).double() * weights).sum().backward()
        return A_log.grad.double()

    truth = grad(lambda q, k, v, g, b: naive(q, k, v, b, g.unsqueeze(-1).expand(q.shape), K ** -0.5,
                                             normalize=True)[0], torch.float64)
    chunk = modeling("qwen3_5").torch_chunk_gated_delta_rule
    got = grad(lambda q, k, v, g, b: chunk(q, k, v, g=g, beta=b, use_qk_l2norm_in_kernel=True)[0], torch.float32)
    assert ((got - truth).abs() / truth.abs()).max() < 1e-4, (got, truth)


def _other_families():
    """The Mamba-2 families (test_mamba.py's tiny configs) and lfm2, whose short convolutions go through the
    same causal-conv1d hook."""
    from test_mamba import FAMILIES as MAMBA2
    return {**MAMBA2, "lfm2": ("Lfm2", dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            layer_types=["conv", "full_attention"]))}


@pytest.mark.parametrize("family", ["mamba2", "bamba", "falcon_h1", "granitemoehybrid", "zamba2", "nemotron_h", "lfm2"])
def test_other_families_through_the_same_hook(enabled, family):
    """enable() routes every kernel name linattn has, in every family: the Mamba-2 families' scan and step
    (linattn.mamba) and convolutions, lfm2's convolutions; logits and greedy tokens as transformers' own."""
    prefix, config = _other_families()[family]
    torch.manual_seed(0)
    model = getattr(transformers, prefix + "ForCausalLM")(getattr(transformers, prefix + "Config")(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the initialisation's zeros, so that every path counts
            p.normal_(0, 0.3)
    ids = tokens(2, 21, seed=6)

    def run():
        with torch.no_grad():
            return model(ids).logits, model.generate(ids[:, :10], attention_mask=torch.ones_like(ids[:, :10]),
                                                     max_new_tokens=6, do_sample=False)

    (want, want_tokens), (got, got_tokens) = both(run)
    assert_close(got, want, 1e-5, f"{family} logits")
    assert torch.equal(got_tokens, want_tokens)
    routed = {lt.routed_kernel(v) for v in vars(modeling(family)).values()} - {None}
    expected = {"causal_conv1d_fn", "causal_conv1d_update"}
    if family != "lfm2":
        expected |= {"mamba_chunk_scan_combined", "selective_state_update"}
    assert routed == expected


def test_disable_restores_everything():
    from transformers.integrations import hub_kernels
    from transformers.modeling_utils import AttentionInterface
    module = modeling("qwen3_5")
    names = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
             "causal_conv1d_update")
    before = {n: getattr(module, n) for n in names}
    decorator, sdpa = hub_kernels.use_kernel_func_from_hub_with_fallback, AttentionInterface._global_mapping["sdpa"]
    lt.enable()
    lt.enable()  # twice: no double wrapping
    try:
        assert lt.is_enabled()
        for n in names:
            routed = getattr(module, n)
            assert routed is not before[n] and getattr(lt._inner(routed), lt._TORCH_FALLBACK) is before[n]
            assert lt.routed_kernel(routed) is not None and lt.routed_kernel(before[n]) is None
        assert AttentionInterface._global_mapping["sdpa"] is not sdpa
    finally:
        lt.disable()
    assert not lt.is_enabled()
    assert {n: getattr(module, n) for n in names} == before
    assert hub_kernels.use_kernel_func_from_hub_with_fallback is decorator
    assert AttentionInterface._global_mapping["sdpa"] is sdpa
    # transformers' own CPU path again: it refuses packed sequences in the gated delta rule.
    q = torch.randn(1, 4, 1, 8)
    with pytest.raises(ValueError, match="packed sequences"):
        module.torch_chunk_gated_delta_rule(q, q, q, g=q[..., 0], beta=q[..., 0].sigmoid(),
                                            cu_seqlens=torch.tensor([0, 2, 4]))


def test_enable_before_import():
    """enable() before the modeling module is imported: the module's functions and its gated norm class are
    routed as it is imported, and disable() gives back what transformers made."""
    script = (
        "import sys, torch\n"
        "import linattn.integrations.transformers as lt\n"
        "lt.enable()\n"
        "assert 'transformers.models.kimi_linear.modeling_kimi_linear' not in sys.modules\n"
        "import transformers.models.kimi_linear.modeling_kimi_linear as m\n"
        "routed = m.chunk_kimi_delta_attention\n"
        "assert lt.routed_kernel(routed) == 'chunk_kda', routed\n"
        "assert lt.routed_kernel(m.KimiLinearRMSNormGated) == 'RMSNormGated'\n"
        "q = torch.randn(1, 5, 2, 8)\n"
        "o, _ = routed(q, q, q, g=-q.abs(), beta=q[..., 0].sigmoid(), cu_seq_lens_q=torch.tensor([0, 2, 5]))\n"
        "o0, _ = routed(q[:, :2], q[:, :2], q[:, :2], g=-q[:, :2].abs(), beta=q[:, :2, :, 0].sigmoid())\n"
        "assert torch.allclose(o[:, :2], o0, atol=1e-6)\n"
        "lt.disable()\n"
        "assert m.chunk_kimi_delta_attention is lt._inner(routed).__linattn_original__\n"
        "assert lt.routed_kernel(m.chunk_kimi_delta_attention) is None\n"
        "assert lt.routed_kernel(m.KimiLinearRMSNormGated) is None\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_version_outside_the_range_is_refused(monkeypatch):
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "5.30.0")
    with pytest.raises(RuntimeError, match=r"transformers 5\.30\.0.*5\.25"):
        lt.enable()
    assert not lt.is_enabled()


def test_conv_keeps_packed_sequences_apart():
    """causal_conv1d_fn with seq_idx or cu_seqlens against each sequence convolved alone (F.conv1d with
    left zero padding, written here from the definition), and causal_conv1d_update token by token
    against the whole sequence."""
    from linattn.integrations.causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    torch.manual_seed(0)
    D, W, lengths = 5, 4, [3, 0, 1, 7]
    x = torch.randn(1, D, sum(lengths), dtype=torch.float64)
    weight, bias = torch.randn(D, W, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    cu = torch.tensor([0, 3, 3, 4, 11])

    def alone(part):
        padded = torch.nn.functional.pad(part, (W - 1, 0))
        return torch.stack([sum(weight[:, j] * padded[:, :, j + t] for j in range(W))
                            for t in range(part.shape[-1])], -1) + bias[:, None] if part.shape[-1] else part

    want = torch.cat([alone(x[..., int(cu[i]):int(cu[i + 1])]) for i in range(len(lengths))], -1)
    assert_close(causal_conv1d_fn(x, weight, bias, cu_seqlens=cu), want, 1e-12, "cu_seqlens")
    seq_idx = torch.bucketize(torch.arange(x.shape[-1]), cu[1:], right=True).unsqueeze(0)
    got = causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")
    assert_close(got, torch.nn.functional.silu(want), 1e-12, "seq_idx")
    whole = alone(x[..., 4:])
    state = torch.zeros(1, D, W, dtype=torch.float64)
    steps = [causal_conv1d_update(x[..., t], state, weight, bias) for t in range(4, 11)]
    assert_close(torch.stack(steps, -1), whole, 1e-12, "causal_conv1d_update")
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d_fn(x, weight, activation="gelu")
    with pytest.raises(ValueError, match="cu_seqlens"):
        causal_conv1d_fn(x, weight, cu_seqlens=torch.tensor([0, 5]))


def test_routed_conv_honours_states_and_refuses_what_it_cannot(enabled):
    """Through the routed modeling functions (qwen3_5's): causal-conv1d's initial_states and
    return_final_states are honoured, not dropped; the update's cache_seqlens is refused by name and an
    unknown keyword raises, as transformers' fallback does."""
    module = modeling("qwen3_5")
    generator = torch.Generator().manual_seed(3)
    D, W = 3, 4
    x = torch.randn(1, D, 7, generator=generator)
    weight = torch.randn(D, W, generator=generator)
    whole = module.causal_conv1d_fn(x, weight, None, activation="silu")
    head, state = module.causal_conv1d_fn(x[..., :3], weight, None, activation="silu", return_final_states=True)
    tail = module.causal_conv1d_fn(x[..., 3:], weight, None, activation="silu", initial_states=state)
    assert_close(torch.cat([head, tail], -1), whole, 1e-6, "continued through initial_states")
    with pytest.raises(NotImplementedError, match="cache_seqlens"):
        module.causal_conv1d_update(x[..., :1], state.clone(), weight, None, "silu", cache_seqlens=torch.tensor([2]))
    with pytest.raises(TypeError):
        module.causal_conv1d_update(x[..., :1], state.clone(), weight, None, "silu", no_such_keyword=1)


def test_conv_initial_and_final_states():
    """causal_conv1d_fn's initial_states continue a sequence (the same outputs as the convolution over
    the whole) and return_final_states gives the last W − 1 inputs, also into final_states_out;
    causal_conv1d_update with a state of exactly W − 1 columns."""
    from linattn.integrations.causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    generator = torch.Generator().manual_seed(1)
    D, W, T0, T = 3, 4, 5, 2  # T < W - 1: the final state reaches back into the initial one
    x = torch.randn(2, D, T0 + T, dtype=torch.float64, generator=generator)
    weight, bias = torch.randn(D, W, dtype=torch.float64, generator=generator), torch.randn(D, dtype=torch.float64)
    whole, whole_final = causal_conv1d_fn(x, weight, bias, return_final_states=True, activation="swish")
    assert_close(whole_final, x[..., -(W - 1):], 0, "final state")
    head_final = causal_conv1d_fn(x[..., :T0], weight, bias, return_final_states=True)[1]
    out = torch.empty(2, D, W - 1, dtype=torch.float64)
    tail, final = causal_conv1d_fn(x[..., T0:], weight, bias, initial_states=head_final, return_final_states=True,
                                   final_states_out=out, activation="swish")
    assert_close(tail, whole[..., T0:], 1e-12, "continued outputs")
    assert final is out and torch.equal(out, x[..., -(W - 1):])
    state = head_final.clone()
    steps = torch.stack([causal_conv1d_update(x[..., t], state, weight, bias, "silu") for t in range(T0, T0 + T)], -1)
    assert_close(steps, whole[..., T0:], 1e-12, "update with W - 1 columns")
    assert torch.equal(state, x[..., -(W - 1):])


def test_packed_sdpa_against_the_definition(enabled):
    """The "sdpa" function under enable(), called as a full-attention layer calls it with packed
    sequences: each sequence's queries see its own keys only, causally aligned to the keys' end (more
    keys than queries, as with a cache), grouped key heads; against softmax written out in fp64."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    class Layer(torch.nn.Module):
        num_key_value_groups, is_causal = 2, True

    generator = torch.Generator().manual_seed(2)
    cu_q, cu_k = torch.tensor([0, 2, 2, 5]), torch.tensor([0, 4, 5, 9])  # an empty query segment
    query = torch.randn(1, 4, 5, 8, dtype=torch.float64, generator=generator)
    key, value = (torch.randn(1, 2, 9, 8, dtype=torch.float64, generator=generator) for _ in range(2))
    out, weights = ALL_ATTENTION_FUNCTIONS["sdpa"](Layer(), query, key, value, None, scaling=0.3,
                                                   cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k)
    assert weights is None and out.shape == (1, 5, 4, 8)
    for n in range(3):
        for i in range(int(cu_q[n]), int(cu_q[n + 1])):
            last = int(cu_k[n + 1]) - (int(cu_q[n + 1]) - 1 - i)  # query i sees keys up to here
            for h in range(4):
                keys = key[0, h // 2, int(cu_k[n]):last]
                p = torch.softmax(0.3 * keys @ query[0, h, i], 0)
                assert_close(out[0, i, h], p @ value[0, h // 2, int(cu_k[n]):last], 1e-12, f"sequence {n} query {i}")
