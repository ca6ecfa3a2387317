"""The gated RMS norm under linattn.integrations.transformers.enable(): every "RMSNormGated" module class of
the nine families runs linattn's rms_norm_gated on CPU tensors, giving transformers' own module's outputs
and gradients bit for bit (float32, bfloat16, float32 weights under bfloat16 inputs, strided inputs);
classes decorated after enable() are routed as they are defined, one whose arithmetic linattn does not
reproduce is left alone, and disable() gives every class its own forward back."""

import importlib

import pytest

torch = pytest.importorskip("torch", reason="the transformers integration runs torch models")
transformers = pytest.importorskip("transformers", reason="linattn.integrations.transformers plugs into transformers")

import linattn.integrations.transformers as lt  # noqa: E402
from linattn._layer_parts import rms_norm_gated  # noqa: E402

if not lt.SUPPORTED_VERSIONS[0] <= tuple(int(x) for x in transformers.__version__.split(".")[:2]) \
        < lt.SUPPORTED_VERSIONS[1]:
    pytest.skip(f"transformers {transformers.__version__} is outside the tested range", allow_module_level=True)

# Each family's gated norm class, and whether it rounds the normalised input to the input's dtype before
# the weight multiplies it (as its source reads: "self.weight * hidden_states.to(input_dtype)").
NORMS = {
    "qwen3_next": ("Qwen3NextRMSNormGated", True),
    "qwen3_5": ("Qwen3_5RMSNormGated", True),
    "qwen3_5_moe": ("Qwen3_5MoeRMSNormGated", True),
    "olmo_hybrid": ("OlmoHybridRMSNormGated", True),
    "qwen4_exp": ("Qwen4ExpTextRMSNormGated", True),
    "lara_mini": ("LaraMiniRMSNormGated", False),
    "kimi_linear": ("KimiLinearRMSNormGated", False),
    "bailing_hybrid": ("BailingHybridRMSNormGated", False),
    "glm5_next": ("Glm5NextTextRMSNormGated", False),
}


def norm_class(family):
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return getattr(module, NORMS[family][0])


@pytest.fixture(scope="module", autouse=True)
def classes_imported():
    """The modeling modules imported before any enable(): the "after import" case."""
    for family in NORMS:
        norm_class(family)
    yield
    lt.disable()


def inputs(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator) * 3
    x[..., 0] = 1e3  # one large channel: the variance is dominated by it
    gate = torch.randn(*shape, generator=generator) * 4
    return x.to(dtype), gate.to(dtype)


def run(norm, x, gate):
    """norm(x, gate) and the gradients of a weighted sum of it for x, gate and the weight."""
    x, gate = x.detach().requires_grad_(), gate.detach().requires_grad_()
    norm.zero_grad(set_to_none=True)
    out = norm(x, gate)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype)
    (out * weights).sum().backward()
    return out.detach(), x.grad, gate.grad, norm.weight.grad


@pytest.mark.parametrize("family", NORMS)
@pytest.mark.parametrize("dtypes", ["float32", "bfloat16", "float32 weight, bfloat16 inputs"])
def test_routed_norm_equals_transformers_bitwise(family, dtypes):
    cls = norm_class(family)
    D = 37  # odd: no vector width divides it
    weight_dtype = torch.float32 if dtypes.startswith("float32") else torch.bfloat16
    input_dtype = torch.float32 if dtypes == "float32" else torch.bfloat16
    norm = cls(D).to(weight_dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.25, 2.0, D))
    for shape, seed in (((1, 1, D), 1), ((2, 3, 5, D), 2), ((0, D), 3)):
        x, gate = inputs(shape, input_dtype, seed)
        if len(shape) == 4:  # strided: heads and time swapped
            x, gate = x.transpose(1, 2), gate.transpose(1, 2)
        want = run(norm, x, gate)
        lt.enable()
        try:
            assert lt.routed_kernel(cls) == "RMSNormGated"
            got = run(norm, x, gate)
        finally:
            lt.disable()
        for name, g, w in zip(("output", "x gradient", "gate gradient", "weight gradient"), got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), f"{family} {dtypes} {list(shape)}: {name} differs"


@pytest.mark.parametrize("family", NORMS)
def test_probe_finds_the_family_rounding(family):
    cls = norm_class(family)
    assert lt._norm_form(cls, cls.forward) is NORMS[family][1]


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
@pytest.mark.parametrize("norm_in_input_dtype", [True, False])
def test_rms_norm_gated_against_the_definition(activation, norm_in_input_dtype):
    """rms_norm_gated (float32 inside, as transformers' modules) against x / √(mean(x²) + eps) · weight ·
    act(gate) written out in float64."""
    x, gate = inputs((3, 4, 33), torch.float64, 4)
    weight = torch.linspace(-1.5, 2.0, 33, dtype=torch.float64)
    act = gate * torch.sigmoid(gate) if activation == "silu" else torch.sigmoid(gate)
    want = x / torch.sqrt((x * x).sum(-1, keepdim=True) / 33 + 1e-5) * weight * act
    got32 = rms_norm_gated(x.float(), gate.float(), weight.float(), 1e-5, activation, norm_in_input_dtype)
    assert got32.dtype == torch.float32 and (got32.double() - want).abs().max() <= 1e-6 * want.abs().max()
    assert torch.equal(rms_norm_gated(x, gate, None, 1e-5, activation), rms_norm_gated(x, gate, weight * 0 + 1, 1e-5,
                                                                                     activation))
    with pytest.raises(ValueError, match="activation: expected 'swish', 'silu' or 'sigmoid', got 'gelu'"):
        rms_norm_gated(x, gate, weight, 1e-5, "gelu")


def test_classes_defined_after_enable_and_unreproducible_ones():
    """A class decorated as "RMSNormGated" while enabled is routed as it is defined; one whose arithmetic
    differs (the gate applied before the norm, as Mamba-2's) keeps its own forward; disable() restores
    both decorators and every forward."""
    from transformers import integrations
    from transformers.integrations import hub_kernels
    decorator = hub_kernels.use_kernel_forward_from_hub
    forwards = {family: norm_class(family).forward for family in NORMS}
    lt.enable()
    try:
        @integrations.use_kernel_forward_from_hub("RMSNormGated")
        class LikeQwen(torch.nn.Module):
            def __init__(self, hidden_size, eps=1e-6):
                super().__init__()
                self.weight, self.variance_epsilon, self.activation = torch.nn.Parameter(torch.ones(hidden_size)), \
                    eps, "silu"

            def forward(self, hidden_states, gate):
                dtype = hidden_states.dtype
                h = hidden_states.float()
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
                return (self.weight * h.to(dtype) * torch.nn.functional.silu(gate.float())).to(dtype)

        class GateFirst(LikeQwen):
            def forward(self, hidden_states, gate):
                h = hidden_states.float() * torch.nn.functional.silu(gate.float())
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
                return (self.weight * h).to(hidden_states.dtype)

        GateFirst = integrations.use_kernel_forward_from_hub("RMSNormGated")(GateFirst)
        assert lt.routed_kernel(LikeQwen) == "RMSNormGated"
        assert lt.routed_kernel(GateFirst) is None
        assert all(lt.routed_kernel(norm_class(family)) == "RMSNormGated" for family in NORMS)
    finally:
        lt.disable()
    assert hub_kernels.use_kernel_forward_from_hub is decorator
    assert integrations.use_kernel_forward_from_hub is decorator
    assert {family: norm_class(family).forward for family in NORMS} == forwards
    assert lt.routed_kernel(LikeQwen) is None and lt.routed_kernel(norm_class("qwen3_5")) is None
