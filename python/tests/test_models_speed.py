"""scripts/models_speed.py's decode at a long context without a prefill of that length (_extend_context),
on a tiny Qwen3.5-shaped model: the cache then stands for the context (its length, the full-attention
layers' keys and values cycled from the prefill's, the linear-attention layers' state kept), a decode step
runs from it with transformers' path and with linattn's and gives the same logits, and a cache it cannot
extend is refused by name."""

import copy
import importlib.util
import pathlib

import pytest

torch = pytest.importorskip("torch", reason="the model timing runs torch models")
transformers = pytest.importorskip("transformers", reason="scripts/models_speed.py times transformers' models")

import linattn.integrations.transformers as lt  # noqa: E402

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "models_speed.py"


def _script():
    spec = importlib.util.spec_from_file_location("models_speed", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(layer_types):
    config = transformers.Qwen3_5TextConfig(
        num_hidden_layers=len(layer_types), vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, layer_types=layer_types)
    torch.manual_seed(0)
    return transformers.Qwen3_5ForCausalLM(config).eval()


def test_extend_context_then_decode():
    speed = _script()
    net = _model(["linear_attention", "full_attention", "linear_attention"])
    prompt = torch.randint(3, 64, (1, 7), generator=torch.Generator().manual_seed(1))
    lt.disable()
    with torch.no_grad():
        out = net(prompt, use_cache=True)
    cache = out.past_key_values
    keys = cache.layers[1].keys.clone()
    state = cache.layers[0].recurrent_states[0].clone()
    speed._extend_context(cache, 100)
    assert int(cache.get_seq_length()) == 100
    extended = cache.layers[1].keys
    assert extended.shape[-2] == 100 and torch.equal(extended[:, :, :7], keys)
    assert torch.equal(extended[:, :, 98:], keys[:, :, 0:2])  # 98 = 14 · 7: the cycle restarts
    assert torch.equal(cache.layers[0].recurrent_states[0], state)
    token = out.logits[:, -1:].argmax(-1)
    reference_cache = copy.deepcopy(cache)
    with torch.no_grad():
        want = net(token, past_key_values=reference_cache, use_cache=True).logits
        lt.enable()
        try:
            got = net(token, past_key_values=cache, use_cache=True).logits
        finally:
            lt.disable()
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    assert int(cache.get_seq_length()) == 101
    assert speed._decode(net, cache, token, 2) > 0


def test_extend_context_refuses_what_it_cannot_extend():
    """A cache layer of another kind (neither keys and values nor a linear-attention token count), or a cache
    with no full-attention layer, would make the timing stand for another context: refused by name."""
    import types
    speed = _script()
    with pytest.raises(RuntimeError, match="--context: cannot extend a cache layer of type object"):
        speed._extend_context(types.SimpleNamespace(layers=[object()]), 64)
    linear = types.SimpleNamespace(cumulative_length_linear=torch.tensor(3))
    with pytest.raises(RuntimeError, match="--context: the model's cache has no full-attention layer"):
        speed._extend_context(types.SimpleNamespace(layers=[linear]), 64)


def test_mamba_families_mode_compares_the_same_logits():
    """models_speed.py mamba on a tiny shape: every Mamba-2 family runs on both sides, with enable()'s mixers
    timed (a share in (0, 1)) and the logits of the two sides equal to fp32 rounding."""
    import argparse

    speed = _script()
    args = argparse.Namespace(prefill=32, reps=1, hidden=64, groups=1, vocab=64)
    families = speed.mamba_families(args)
    assert set(families) == {"mamba2", "bamba", "falcon_h1", "granitemoehybrid", "zamba2", "nemotron_h"}
    for family, row in families.items():
        assert row["logits_max_difference_relative"] < 1e-4, family
        for side in ("transformers", "linattn"):
            assert row[side]["prefill_s"] > 0 and 0 < row[side]["mixer_share"] < 1, (family, side)
    assert not lt.is_enabled()


def test_half_part_times_every_pair():
    """models_speed.py ops --parts half on a short sequence: both operators, forward and forward + backward, bf16
    read in place against float32 copies and against float32 inputs, every time positive."""
    import argparse

    speed = _script()
    rows = []
    speed._ops_half(argparse.Namespace(seq=16, reps=1), rows, {})
    assert len(rows) == 8
    assert {name.split(" forward")[0] for name, _, _ in rows} == {"gated delta rule", "KDA"}
    assert all(ours > 0 and theirs > 0 for _, ours, theirs in rows)
