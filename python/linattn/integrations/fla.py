"""One call that makes flash-linear-attention's operators (``fla.ops``), and through them the layers and
models that need nothing else of Triton, run on CPU tensors through linattn.fla.

    import linattn.integrations.fla as lf
    lf.enable()    # before or after fla.ops / fla.layers were imported
    ...            # fla's functions, layers and models as usual, on CPU tensors
    lf.disable()   # flash-linear-attention exactly as before

flash-linear-attention's kernels are Triton programs; on a machine without a GPU Triton has no driver and
every one of them fails ("0 active drivers"). linattn.fla has the same functions with the same names,
arguments and defaults (each one's parameters are fla's, in fla's order), so a CPU call can be handed
over unchanged. Two ways in, by what fla offers for each function:

- fla's backend registry (fla.backends): fla routes a few public functions through `@dispatch(...)`,
  which asks each registered backend, highest priority first, whether it takes the call. enable()
  registers a "linattn" backend, first in priority, that takes a call exactly when its tensors are on
  the CPU: chunk_gated_delta_rule (operation "gated_delta_rule") and chunk_dplr_delta_rule
  ("generalized_delta_rule.dplr", which fla's chunk_rwkv7 calls too). Other devices go on to fla's own
  backends as before. disable() removes it.
- Every other function of linattn.fla is not dispatched by fla (or dispatch is switched off with
  FLA_DISABLE_BACKEND_DISPATCH=1): enable() puts a wrapper in its place wherever a loaded fla module holds
  it (fla.ops.<family>, the module that defines it, fla.ops, fla.layers.<layer>), so that CPU calls go to
  linattn.fla and any other call to fla's original; modules imported later bind the wrapper. disable()
  puts the original back in every fla module that holds a wrapper, also those imported while enabled.

- fla's RMS norms, short convolution and rotary embedding: RMSNorm, FusedRMSNormGated, ShortConvolution
  and RotaryEmbedding (fla.modules) compute through the module-level functions rms_norm, rms_norm_gated,
  causal_conv1d, causal_conv1d_update (GatedDeltaNet calls causal_conv1d itself) and rotary_embedding,
  which enable() wraps the same way (CPU calls to linattn's torch code of fla's parameters and semantics:
  residual, prenorm, residual_in_fp32; the convolution's cache of the last W inputs per sequence, packed
  sequences apart; per-sequence position offsets). HELPERS lists them.
- RWKV-7's helpers around its operator (what fla.layers.RWKV7Attention calls): token_shift (with its cache of
  the last token per sequence, packed sequences apart), fused_addcmul_rwkv7, fused_k_rwkv7,
  gate_output_correction, l2norm (l2_norm) and GroupNorm's group_norm, wrapped the same way (linattn's torch
  forms in linattn._rwkv7_layer, which linattn.layers.RWKV7Attention computes with too).
- Mamba2's: RMSNormGated's rmsnorm_fn, and the launchers of fla's Triton swish ("silu") and sigmoid
  (swish_fwd, swish_bwd, sigmoid_fwd, sigmoid_bwd, called by the autograd Functions that ACT2FN holds, so a
  layer built before enable() is reached too). fla's Mamba2 then runs its own torch path (its scan is fla's
  torch code, not linattn's), which for 1 < n_groups < num_heads pairs heads with groups differently from
  mamba_ssm's kernels (docs/models.md).

- fla's models (fla.models) around those layers (linattn.integrations.fla_fused's torch forms): GatedMLP's SwiGLU
  launchers swiglu_fwd and swiglu_fwdbwd (behind swiglu and the fused swiglu_linear), LayerNorm's layer_norm,
  HGRN2's norm-then-projection layer_norm_linear (rms_norm_linear), and the losses: cross_entropy_loss,
  FusedCrossEntropyLoss.forward (a method: it asserts a GPU tensor before calling anything, so enable() replaces
  it on the class; METHODS lists it) and fused_linear_cross_entropy_loss (FusedLinearCrossEntropyLoss, KDA's
  training loss), one process only (a process_group is refused by name). Nine model families run right: forward
  with labels, backward, padded batches and decoding with their cache; MoM's loss and backward run too, but its
  outputs are wrong, below (python/tests/test_fla_models.py).

What this cannot reach: the Triton-only helpers that no layer or model of linattn's families calls (the other
activations of ACT2FN: logsigmoid, sqrelu, gelu; GatedMLP's "powlu" (powglu, powglu_linear), sigmoidglu, the KL
loss, LayerNormGated's layernorm_fn, fused_attnres). A function that calls one fails in it, with Triton's own
error, on the CPU. Nor fla's own defects that the CPU exposes: transformers 5.25's generate passes the cache as
`cache=`, which fla 0.6.0's models drop (every step starts from an empty state, on any device), and MomAttention
orders tokens with an unstable argsort (on the CPU a memory's tokens leave their order). Which layers and models
run is measured in python/tests/test_fla_integration.py, test_fla_rwkv7_mamba2.py and test_fla_models.py and
listed in docs/models.md.

Tested with flash-linear-attention 0.6.0 (fla-core 0.6.0, Triton 3.9.0); enable() refuses other minor
versions, whose registry and function names it has not been checked against.
"""

import importlib
import sys

import torch

from .transformers import _device_type

__all__ = ["enable", "disable", "is_enabled", "routed", "SUPPORTED_VERSIONS", "FAMILIES", "DISPATCHED", "HELPERS",
           "METHODS"]

# The flash-linear-attention versions the registry and names were read and tested in: [0.6, 0.7).
SUPPORTED_VERSIONS = ((0, 6), (0, 7))

# linattn.fla's functions by the fla.ops family (package) that has them in fla.
FAMILIES = {
    "linear_attn": ("chunk_linear_attn", "fused_chunk_linear_attn", "fused_recurrent_linear_attn"),
    "retention": ("chunk_retention", "fused_chunk_retention", "fused_recurrent_retention", "parallel_retention"),
    "simple_gla": ("chunk_simple_gla", "fused_chunk_simple_gla", "fused_recurrent_simple_gla",
                   "parallel_simple_gla"),
    "gla": ("chunk_gla", "fused_chunk_gla", "fused_recurrent_gla"),
    "lightning_attn": ("chunk_lightning_attn", "fused_recurrent_lightning_attn"),
    "delta_rule": ("chunk_delta_rule", "fused_chunk_delta_rule", "fused_recurrent_delta_rule"),
    "gated_delta_rule": ("chunk_gated_delta_rule", "chunk_gdn", "fused_recurrent_gated_delta_rule",
                         "fused_recurrent_gdn"),
    "kda": ("chunk_kda", "fused_recurrent_kda"),
    "generalized_delta_rule": ("chunk_dplr_delta_rule", "fused_recurrent_dplr_delta_rule"),
    "rwkv7": ("chunk_rwkv7", "fused_recurrent_rwkv7", "fused_mul_recurrent_rwkv7"),
}

# The public functions fla routes through its backend registry, by the operation they are registered under.
DISPATCHED = {"chunk_gated_delta_rule": "gated_delta_rule", "chunk_dplr_delta_rule": "generalized_delta_rule.dplr"}

_BACKEND = "linattn"
_ORIGINAL = "__linattn_original__"  # set on each wrapper: the fla function it stands in front of
_state = {}  # while enabled: the registries linattn's backend was added to


def _fla():
    try:
        import fla
        import fla.backends
        import fla.ops
    except ImportError as e:
        raise ImportError("linattn.integrations.fla needs flash-linear-attention with its dependencies (pip install "
                          "triton==3.9.0 flash-linear-attention==0.6.0): " + str(e)) from e
    version = tuple(int(x) for x in fla.__version__.split(".")[:2] if x.isdigit())
    low, high = SUPPORTED_VERSIONS
    if len(version) != 2 or not low <= version < high:
        raise RuntimeError(f"flash-linear-attention {fla.__version__}: linattn.integrations.fla supports "
                           f"flash-linear-attention >= {low[0]}.{low[1]}, < {high[0]}.{high[1]} (tested with 0.6.0), "
                           "whose backend registry and function names it plugs into; install "
                           "flash-linear-attention==0.6.0")
    return fla


def _linattn(name):
    from .. import fla as linattn_fla
    return getattr(linattn_fla, name)


# ------------------------------------------------------------------------------------------------
# The backend registry.


def _on_cpu(args, kwargs):
    return _device_type(args, kwargs) == "cpu"


def _backend_class():
    """A fla BaseBackend taking, for each dispatched function, exactly the calls whose tensors are on the CPU."""
    from fla.backends import BaseBackend

    class LinattnBackend(BaseBackend):
        backend_type = _BACKEND
        priority = -1  # before fla's own backends (lowest value first): they are for GPUs and NPUs

        @classmethod
        def is_available(cls):
            return True

        def verify(self, function_name, *args, **kwargs):
            if function_name not in DISPATCHED:
                return False, f"linattn has no {function_name}"
            if not _on_cpu(args, kwargs):
                return False, "linattn runs CPU tensors only"
            return True, None

        def get_implementation(self, function_name):
            return _linattn(function_name)

    return LinattnBackend


def _registries():
    """{operation: fla's BackendRegistry} for the dispatched functions (None where dispatch is switched off)."""
    import fla.backends as backends
    if backends._DISPATCH_DISABLED:
        return None
    found = {}
    for operation in set(DISPATCHED.values()):
        importlib.import_module(f"fla.ops.{operation}")  # the @dispatch that creates the registry runs on import
        found[operation] = backends._get_operation_registry(operation)
    return found


# fla.modules' Triton helpers, by the module-level function their classes and layers call (RMSNorm:
# rms_norm; FusedRMSNormGated: rms_norm_gated; ShortConvolution and GatedDeltaNet's fused convolution:
# causal_conv1d, and its decoding step causal_conv1d_update; RotaryEmbedding: rotary_embedding with its
# cos/sin tables; RWKV7Attention: the token shift, its mixes, key update, output correction, l2norm and
# GroupNorm's group_norm; Mamba2: RMSNormGated's rmsnorm_fn and its activation's launchers; the models: LayerNorm's
# layer_norm, HGRN2's layer_norm_linear, GatedMLP's SwiGLU launchers, the cross-entropy losses), and linattn's
# function of the same parameters in the same order (a module of linattn, the name there).
HELPERS = {"fla.modules.norm.layernorm": {"rms_norm": ("_layer_parts", "fla_rms_norm"),
                                         "group_norm": ("_rwkv7_layer", "fla_group_norm"),
                                         # LayerNorm's function: group_norm's parameters, one group
                                         "layer_norm": ("_rwkv7_layer", "fla_group_norm"),
                                         "layer_norm_linear": ("integrations.fla_fused", "fla_layer_norm_linear")},
           "fla.modules.norm.l2norm": {"l2norm": ("_rwkv7_layer", "fla_l2_norm")},  # and its alias l2_norm
           "fla.modules.token_shift": {"token_shift": ("_rwkv7_layer", "fla_token_shift")},
           "fla.ops.rwkv7.fused_addcmul": {"fused_addcmul_rwkv7": ("_rwkv7_layer", "fla_addcmul_rwkv7")},
           "fla.ops.rwkv7.fused_k_update": {"fused_k_rwkv7": ("_rwkv7_layer", "fla_k_rwkv7")},
           "fla.ops.rwkv7.gate_output_correction": {
               "gate_output_correction": ("_rwkv7_layer", "fla_gate_output_correction")},
           "fla.modules.norm.fused_norm_gate": {"rms_norm_gated": ("_layer_parts", "fla_rms_norm_gated")},
           "fla.modules.causal_conv1d.ops": {
               "causal_conv1d": ("integrations.causal_conv1d", "fla_causal_conv1d"),
               "causal_conv1d_update": ("integrations.causal_conv1d", "fla_causal_conv1d_update")},
           "fla.modules.rotary.ops": {"rotary_embedding": ("integrations.rotary", "fla_rotary_embedding")},
           "fla.modules.norm.layernorm_gated": {"rmsnorm_fn": ("_mamba2_layer", "fla_rmsnorm_fn")},
           "fla.modules.activations.ops": {
               **{name: ("integrations.fla", "fla_" + name)
                  for name in ("swish_fwd", "swish_bwd", "sigmoid_fwd", "sigmoid_bwd")},
               **{name: ("integrations.fla_fused", "fla_" + name) for name in ("swiglu_fwd", "swiglu_fwdbwd")}},
           "fla.modules.fused_cross_entropy.ops": {
               "cross_entropy_loss": ("integrations.fla_fused", "fla_cross_entropy_loss")},
           "fla.modules.fused_linear_cross_entropy.ops": {
               "fused_linear_cross_entropy_loss": ("integrations.fla_fused", "fla_fused_linear_cross_entropy_loss")}}

# fla's models' helpers that are methods, by "Class.method" in their module: FusedCrossEntropyLoss.forward
# refuses CPU tensors itself (an assertion) before it calls cross_entropy_loss, so the method is replaced
# (on the class, for every instance) by one whose CPU calls go to linattn's form of it.
METHODS = {"fla.modules.fused_cross_entropy.ops": {
    "FusedCrossEntropyLoss.forward": ("integrations.fla_fused", "fla_fused_cross_entropy_forward")}}


# fla's swish ("silu") and sigmoid of ACT2FN are autograd Functions whose forward and backward call these
# module-level launchers of Triton kernels: routing the launchers reaches every holder of the Functions
# (ACT2FN, fla.layers.Mamba2's act bound at construction). Computed in float32, returned in x's dtype.


def _float(x):
    return x.to(torch.promote_types(x.dtype, torch.float32))


def fla_swish_fwd(x, output_contiguous=False):
    return torch.nn.functional.silu(_float(x)).to(x.dtype)


def fla_swish_bwd(x, dy, output_contiguous=False):
    s = torch.sigmoid(_float(x))
    return (_float(dy) * s * (1 + _float(x) * (1 - s))).to(x.dtype)


def fla_sigmoid_fwd(x, output_contiguous=False):
    return torch.sigmoid(_float(x)).to(x.dtype)


def fla_sigmoid_bwd(x, dy, output_contiguous=False):
    s = torch.sigmoid(_float(x))
    return (_float(dy) * s * (1 - s)).to(x.dtype)


def _fla_helpers(fla, table):
    """[(the object holding it, its attribute name, fla's function, linattn's)] for HELPERS or METHODS (whose
    names are "Class.method": the object is the class)."""
    found = []
    for module_name, names in table.items():
        module = importlib.import_module(module_name)
        for name, (ours_module, ours) in names.items():
            *owner_path, attr = name.split(".")
            owner = module
            for part in owner_path:
                owner = getattr(owner, part, None)
            if getattr(owner, attr, None) is None:
                raise RuntimeError(f"flash-linear-attention {fla.__version__}: {module_name} has no {name}, which "
                                   "linattn.integrations.fla was tested with; install flash-linear-attention==0.6.0")
            found.append((owner, attr, getattr(owner, attr),
                          getattr(importlib.import_module(f"..{ours_module}", __package__), ours)))
    return found


# ------------------------------------------------------------------------------------------------
# Replacing the functions fla does not dispatch.


def _wrapper(name, original, linattn_function=None):
    """original (fla's function) with calls on CPU tensors given, unchanged, to linattn_function (by default
    linattn.fla's function of the same name; for a norm linattn's of fla's signature: same parameters in the
    same order)."""
    linattn_function = _linattn(name) if linattn_function is None else linattn_function

    def wrapper(*args, **kwargs):
        if _on_cpu(args, kwargs):
            return linattn_function(*args, **kwargs)
        return original(*args, **kwargs)

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attr, getattr(original, attr, None))
    setattr(wrapper, _ORIGINAL, original)
    wrapper.linattn_name = name
    return wrapper


def routed(obj):
    """The linattn.fla name obj (a function of a fla module) runs on CPU tensors, or None when it is not a
    wrapper made by enable()."""
    return getattr(obj, "linattn_name", None)


def _fla_modules():
    return [m for name, m in list(sys.modules.items()) if m is not None and (name == "fla" or name.startswith("fla."))]


def _replace_loaded(originals):
    """Put a wrapper in place of each original (by identity) in every loaded fla module that holds it.
    originals: {name: (fla's function, linattn's)}."""
    wrappers = {id(fn): _wrapper(name, fn, ours) for name, (fn, ours) in originals.items()}
    for module in _fla_modules():
        for attr, value in list(vars(module).items()):
            wrapper = wrappers.get(id(value))
            if wrapper is not None and callable(value):
                setattr(module, attr, wrapper)


def _restore_loaded():
    for module in _fla_modules():
        for attr, value in list(vars(module).items()):
            original = getattr(value, _ORIGINAL, None) if routed(value) else None
            if original is not None:
                setattr(module, attr, original)


# ------------------------------------------------------------------------------------------------


def is_enabled():
    """Whether enable() is in effect."""
    return bool(_state)


def enable():
    """Run flash-linear-attention's operators on CPU tensors through linattn.fla: the dispatched ones by a
    backend in fla's registry, the others by a wrapper in their place. Calling it again changes nothing."""
    if _state:
        return
    fla = _fla()
    registries = _registries()
    functions = {}
    for family, names in FAMILIES.items():
        module = importlib.import_module(f"fla.ops.{family}")
        for name in names:
            functions[name] = getattr(module, name, None)
            if functions[name] is None:
                raise RuntimeError(f"flash-linear-attention {fla.__version__}: fla.ops.{family} has no {name}, "
                                   "which linattn.integrations.fla was tested with; install "
                                   "flash-linear-attention==0.6.0")
    # A dispatched function (and its aliases, such as chunk_gdn) is reached through the registry instead.
    dispatched = {id(functions[name]) for name in DISPATCHED} if registries is not None else set()
    originals = {name: (fn, _linattn(name)) for name, fn in functions.items() if id(fn) not in dispatched}
    originals.update({attr: (fn, ours) for _, attr, fn, ours in _fla_helpers(fla, HELPERS)})
    methods = _fla_helpers(fla, METHODS)
    backend = _backend_class()()
    for registry in (registries or {}).values():
        registry.register(backend)
    _replace_loaded(originals)
    for cls, attr, original, ours in methods:
        setattr(cls, attr, _wrapper(f"{cls.__name__}.{attr}", original, ours))
    _state.update(registries=registries or {}, logged={op: set(r._logged) for op, r in (registries or {}).items()},
                  methods=methods)


def disable():
    """Undo enable(): fla's registries without linattn's backend and fla's own functions in every fla module
    (also those imported while enabled). Calling it when not enabled changes nothing."""
    if not _state:
        return
    for operation, registry in _state["registries"].items():
        registry._backends.pop(_BACKEND, None)
        registry._logged.intersection_update(_state["logged"][operation])  # fla logs each backend choice once
    _restore_loaded()
    for cls, attr, original, _ in _state["methods"]:
        setattr(cls, attr, original)
    _state.clear()
