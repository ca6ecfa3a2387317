"""One call that makes Hugging Face transformers' linear-attention models run through linattn on the CPU.

    import linattn.integrations.transformers as lt
    lt.enable()    # before or after the model's modeling module was imported
    ...            # build, load, train, generate as usual
    lt.disable()   # transformers' own code paths again, exactly as before

The hook. transformers (5.25) decorates each function a fast package can replace with
`use_kernel_func_from_hub_with_fallback(func_name, package)` (transformers.integrations): the torch
fallback `torch_chunk_gated_delta_rule` is published as "chunk_gated_delta_rule" of "fla", the short
convolution as "causal_conv1d_fn" / "causal_conv1d_update" of "causal_conv1d". That decorator is where
transformers chooses an implementation by kernel name and input device; on a CPU it always chooses its
torch fallback (and refuses packed sequences there). enable() works at exactly that point, by the public
names: every function the decorator made for a kernel name linattn has gets, for CPU inputs, linattn's
implementation of that name; inputs on any other device still go where transformers sent them. It
wraps the decorator itself, so modeling modules imported later are covered, and it re-wraps the
decorated functions of modeling modules already imported (found by the decorator's own code object,
their kernel name read from it), so existing models are covered too. Nothing else of transformers
changes, and disable() puts back every object it replaced.

What is routed (CPU tensors only):
- chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, chunk_kda, fused_recurrent_kda: linattn.fla's
  functions of the same names (flash-linear-attention's semantics). Keywords are passed as transformers
  passes them to flash-linear-attention (those the function names); packed sequences given as
  transformers' `cu_seq_lens_q`, or as `seq_idx`, become `cu_seqlens` where the model did not pass it.
- mamba_chunk_scan_combined, selective_state_update (the Mamba-2 families: mamba2, bamba, falcon_h1,
  granitemoehybrid, zamba2, nemotron_h): linattn.mamba's functions of the same names (mamba_ssm's
  semantics), keywords given and dropped the same way.
- causal_conv1d_fn, causal_conv1d_update: linattn.integrations.causal_conv1d (causal-conv1d's semantics),
  which keeps packed sequences apart (seq_idx, or transformers' `cu_seq_lens_q`).
- the "sdpa" attention function (AttentionInterface): with transformers' packed-batch keywords
  (`cu_seq_lens_q` / `cu_seq_lens_k`, or `seq_idx`; batch 1, CPU) each sequence attends to its own keys
  only: linattn's softmax with cu_seqlens (grouped key heads repeated; its backward) where the model's mask
  is the packed mask itself, else torch's scaled_dot_product_attention per sequence within that mask
  (packed_attention.py says when); every other call goes to transformers' own sdpa_attention_forward.
- the gated RMS norm: every module class transformers publishes as the layer "RMSNormGated"
  (use_kernel_forward_from_hub, the same hook's decorator for classes: Qwen3NextRMSNormGated and its kin in
  the nine families) gets a forward that sends CPU inputs to linattn's rms_norm_gated (a torch
  implementation, in the order of transformers' own, so bit for bit its results; linattn has no C++ one).
  A class is routed only after a probe showed that one of rms_norm_gated's two roundings reproduces it
  bit for bit in float32 and bfloat16; otherwise its own forward stays.

Tested with transformers 5.25.0 and its dependency kernels 0.19.1; enable() refuses other minor versions.
"""

import functools
import importlib
import inspect
import re
import sys

import torch

from .packed_attention import offsets_of, packed_attention

__all__ = ["enable", "disable", "is_enabled", "routed_kernel", "SUPPORTED_VERSIONS"]

# The transformers versions the hook was read and tested in: [5.25.0, 5.26.0).
SUPPORTED_VERSIONS = ((5, 25), (5, 26))

_TORCH_FALLBACK = "__linattn_original__"  # set on each routed function: what it replaced
_state = {}  # while enabled: the replaced decorator and attention function


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("linattn.integrations.transformers needs transformers (pip install transformers==5.25.0)") \
            from e
    found = re.match(r"(\d+)\.(\d+)", transformers.__version__)
    version = tuple(int(x) for x in found.groups()) if found else None
    low, high = SUPPORTED_VERSIONS
    if version is None or not low <= version < high:
        raise RuntimeError(f"transformers {transformers.__version__}: linattn.integrations.transformers supports "
                           f"transformers >= {low[0]}.{low[1]}, < {high[0]}.{high[1]} (tested with 5.25.0), whose "
                           "kernel hook it plugs into; install transformers==5.25.0")
    from transformers.integrations import hub_kernels
    return transformers, hub_kernels


# ------------------------------------------------------------------------------------------------
# The CPU implementations, by kernel name.


def _linattn_op(module, name, renamed, torch_function, packed_from_model=False):
    """linattn.<module>.<name> called as transformers calls the package it stands for: arguments bound by
    the torch fallback's own signature and given to linattn by the package's names (renamed maps the one
    to the other), those the function does not name dropped, as transformers drops them for the package.
    packed_from_model: take packed sequences from transformers' `cu_seq_lens_q` or `seq_idx` where the
    model did not pass `cu_seqlens` (the KDA families never do)."""
    op = getattr(importlib.import_module(f"..{module}", __package__), name)
    names = {p.name for p in inspect.signature(op).parameters.values() if p.kind is not p.VAR_KEYWORD}
    signature = inspect.signature(torch_function)
    positional = [renamed.get(p.name, p.name) for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def run(*args, **kwargs):
        if len(args) > len(positional):
            signature.bind(*args, **kwargs)  # raises the TypeError the torch fallback would
        # By name, as signature.bind would give them (this is a decoding step's per-token path: cheap).
        given = dict(zip(positional, args))
        for key, value in kwargs.items():
            key = renamed.get(key, key)
            if key in given:
                raise TypeError(f"{torch_function.__name__}() got multiple values for argument {key!r}")
            given[key] = value
        if packed_from_model and given.get("cu_seqlens") is None:
            if given.get("cu_seq_lens_q") is not None:
                given["cu_seqlens"] = given["cu_seq_lens_q"]
            elif given.get("seq_idx") is not None and given["q"].shape[0] == 1:
                given["cu_seqlens"] = offsets_of(given["seq_idx"])
        return op(**{k: v for k, v in given.items() if k in names})

    return run


def _fla_op(name):
    return functools.partial(_linattn_op, "fla", name, {"query": "q", "key": "k", "value": "v"},
                             packed_from_model=True)


def _mamba_op(name):
    return functools.partial(_linattn_op, "mamba", name, {"hidden_states": "x"})


def _activation(name):
    """A convolution's activation as causal_conv1d takes it: silu by name, any other of transformers'
    activations as its function (transformers' fallback applies whichever the model names)."""
    if name in (None, "silu", "swish"):
        return name
    from transformers.activations import ACT2FN
    return ACT2FN[name]


def _conv_fn(torch_function):
    from .causal_conv1d import causal_conv1d_fn

    def run(hidden_states, weight, bias=None, activation=None, seq_idx=None, cu_seqlens=None, cu_seq_lens_q=None,
            initial_states=None, return_final_states=False, final_states_out=None, **kwargs):
        """causal-conv1d's states are honoured where a caller gives them (transformers' own callers prepend
        the cache instead); the model-level keywords transformers passes along (kwargs) are dropped, as its
        torch fallback drops them."""
        states = dict(initial_states=initial_states, return_final_states=return_final_states,
                      final_states_out=final_states_out)
        cu = cu_seqlens if cu_seqlens is not None else cu_seq_lens_q
        if cu is None and seq_idx is not None:
            cu = offsets_of(seq_idx)
        if cu is not None and hidden_states.shape[0] == 1:
            cu = torch.as_tensor(cu).to(torch.long)
            # The cache may put earlier inputs (or zeros) before the batch's tokens: they precede the first sequence.
            extra = hidden_states.shape[-1] - int(cu[-1])
            cu = torch.cat([cu[:1], cu[1:] + extra]) if extra > 0 else cu
        return causal_conv1d_fn(hidden_states, weight, bias, activation=_activation(activation), cu_seqlens=cu,
                                **states)

    return run


def _conv_update(torch_function):
    from .causal_conv1d import causal_conv1d_update

    def run(hidden_states, conv_state, weight, bias=None, activation=None, **kwargs):
        # kwargs: causal-conv1d's cache_seqlens / conv_state_indices, refused by name there (not dropped); any
        # other keyword a TypeError, as transformers' fallback raises.
        return causal_conv1d_update(hidden_states, conv_state, weight, bias, activation=_activation(activation),
                                    **kwargs)

    return run


_ROUTES = {
    ("chunk_gated_delta_rule", "fla"): _fla_op("chunk_gated_delta_rule"),
    ("fused_recurrent_gated_delta_rule", "fla"): _fla_op("fused_recurrent_gated_delta_rule"),
    ("chunk_kda", "fla"): _fla_op("chunk_kda"),
    ("fused_recurrent_kda", "fla"): _fla_op("fused_recurrent_kda"),
    ("mamba_chunk_scan_combined", "mamba_ssm"): _mamba_op("mamba_chunk_scan_combined"),
    ("selective_state_update", "mamba_ssm"): _mamba_op("selective_state_update"),
    ("causal_conv1d_fn", "causal_conv1d"): _conv_fn,
    ("causal_conv1d_update", "causal_conv1d"): _conv_update,
}


def _device_type(args, kwargs):
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor):
            return x.device.type
    return None


def _routed(decorated, func_name, package, torch_function):
    """decorated (what transformers' decorator made of torch_function) with CPU inputs sent to linattn, made
    into what the decorator makes (a `kernels` function module where that package is installed), so that
    transformers' use_kernelized_func still accepts it."""
    from transformers.integrations import hub_kernels
    cpu = _ROUTES[(func_name, package)](torch_function)

    @functools.wraps(torch_function)
    def routed(*args, **kwargs):
        if _device_type(args, kwargs) == "cpu" and not torch.compiler.is_exporting():
            return cpu(*args, **kwargs)
        return decorated(*args, **kwargs)

    setattr(routed, _TORCH_FALLBACK, decorated)
    routed.linattn_kernel = func_name
    return hub_kernels.use_kernel_forward_from_hub(func_name)(routed)


def routed_kernel(obj):
    """The kernel name (e.g. "chunk_gated_delta_rule") under which linattn runs obj, a function of a
    modeling module, or the layer name ("RMSNormGated") of a module class whose forward linattn runs;
    None when obj is not routed to linattn."""
    if isinstance(obj, type):  # a gated norm's module class (not one of transformers' placeholder classes)
        return getattr(obj.forward, "linattn_kernel", None) if issubclass(obj, torch.nn.Module) else None
    return getattr(_inner(obj), "linattn_kernel", None) if _function_like(obj) else None


# ------------------------------------------------------------------------------------------------
# Finding and replacing the decorated functions.


def _function_like(obj):
    """Whether obj may be a decorated function: a function or a module instance (not a class, nor one of
    transformers' placeholder objects, which raise on any attribute)."""
    return inspect.isfunction(obj) or isinstance(obj, torch.nn.Module)


def _inner(obj):
    """transformers' decorated function inside obj: obj itself, or, where the `kernels` package is installed
    (its use_kernel_forward_from_hub turns functions into callable modules), the function that module calls."""
    if isinstance(obj, torch.nn.Module):
        forward = type(obj).forward
        return inspect.getclosurevars(forward).nonlocals.get("func") if forward.__closure__ else None
    return obj


def _decorated_code(decorator):
    """The code object of the functions the decorator makes (each is a closure over one code)."""
    return _inner(decorator("linattn_probe", "_linattn_no_such_package")(lambda *args, **kwargs: None)).__code__


def _kernel_name(obj, code):
    """(func_name, package, torch_function) of what transformers' decorator made, else None."""
    if not _function_like(obj):
        return None
    fn = _inner(obj)
    if getattr(fn, "__code__", None) is not code:
        return None
    found = inspect.getclosurevars(fn).nonlocals
    if not {"func_name", "package", "torch_function"} <= found.keys():
        return None
    return found["func_name"], found["package"], found["torch_function"]


def _transformers_modules():
    return [m for name, m in list(sys.modules.items()) if m is not None and name.startswith("transformers.")]


def _route_loaded(code):
    for module in _transformers_modules():
        for attr, fn in list(vars(module).items()):
            named = _kernel_name(fn, code)
            if named is not None and (named[0], named[1]) in _ROUTES:
                setattr(module, attr, _routed(fn, *named))


def _unroute_loaded():
    for module in _transformers_modules():
        for attr, fn in list(vars(module).items()):
            original = getattr(_inner(fn), _TORCH_FALLBACK, None) if routed_kernel(fn) else None
            if original is not None:
                setattr(module, attr, original)


def _routing_decorator(decorator):
    @functools.wraps(decorator)
    def use_kernel_func_from_hub_with_fallback(func_name, package, internal_path=None):
        make = decorator(func_name, package, internal_path)
        if (func_name, package) not in _ROUTES:
            return make
        return lambda torch_function: _routed(make(torch_function), func_name, package, torch_function)

    return use_kernel_func_from_hub_with_fallback


# ------------------------------------------------------------------------------------------------
# The gated RMS norm: module classes published as the layer "RMSNormGated".

_NORM_LAYER = "RMSNormGated"
_NORM_ACTIVATIONS = ("silu", "swish", "sigmoid")  # transformers' ACT2FN of these is what rms_norm_gated computes


def _norm_form(cls, forward):
    """The norm_in_input_dtype of rms_norm_gated that gives forward (cls's own) bit for bit on a probe
    (float32 and bfloat16 inputs, float32 and bfloat16 weights), or None when neither does or the class
    is not built like transformers' gated norms (cls(hidden_size), weight, variance_epsilon, activation)."""
    from .._layer_parts import rms_norm_gated
    generator = torch.Generator().manual_seed(0)
    x, gate, weight = torch.randn(4, 64, generator=generator), torch.randn(4, 64, generator=generator), \
        torch.rand(64, generator=generator) + 0.5
    try:
        module = cls(64)
        if module.activation not in _NORM_ACTIVATIONS:
            return None
        cases = []
        with torch.no_grad():
            for weight_dtype, input_dtype in ((torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                              (torch.bfloat16, torch.bfloat16)):
                module.weight.data = weight.to(weight_dtype)
                xi, gi = x.to(input_dtype), gate.to(input_dtype)
                cases.append((xi, gi, module.weight.data, forward(module, xi, gi)))
            for form in (True, False):
                if all(torch.equal(rms_norm_gated(xi, gi, w, module.variance_epsilon, module.activation, form), want)
                       for xi, gi, w, want in cases):
                    return form
    except Exception:  # not built like transformers' gated norms: leave it to its own forward
        return None
    return None


def _route_norm(cls):
    """Route cls's forward (a class decorated as "RMSNormGated") to rms_norm_gated for CPU inputs, where
    the probe found the rounding that reproduces it; its own forward is kept for disable()."""
    if cls in _state["norms"] or "forward" not in vars(cls):
        return
    from .._layer_parts import rms_norm_gated
    forward = cls.forward
    form = _norm_form(cls, forward)
    if form is None:
        return

    @functools.wraps(forward)
    def routed_forward(self, hidden_states, gate=None):
        if (hidden_states.device.type == "cpu" and gate is not None and self.activation in _NORM_ACTIVATIONS
                and not torch.compiler.is_exporting()):
            return rms_norm_gated(hidden_states, gate, self.weight, self.variance_epsilon, self.activation, form)
        return forward(self, hidden_states, gate)

    routed_forward.linattn_kernel = _NORM_LAYER
    _state["norms"][cls] = forward
    cls.forward = routed_forward


def _route_loaded_norms():
    for module in _transformers_modules():
        for obj in list(vars(module).values()):
            if inspect.isclass(obj) and vars(obj).get("kernel_layer_name") == _NORM_LAYER:
                _route_norm(obj)


def _routing_layer_decorator(decorator):
    """transformers' use_kernel_forward_from_hub, routing the classes it publishes as "RMSNormGated"."""

    @functools.wraps(decorator)
    def use_kernel_forward_from_hub(layer_name, *args, **kwargs):
        make = decorator(layer_name, *args, **kwargs)
        if layer_name != _NORM_LAYER:
            return make

        def decorate(obj):
            made = make(obj)
            if inspect.isclass(made) and _state:
                _route_norm(made)
            return made

        return decorate

    return use_kernel_forward_from_hub


# ------------------------------------------------------------------------------------------------
# Full attention over packed sequences.


def _packed_sdpa(sdpa):
    """transformers' "sdpa" attention function, except that a CPU call with packed sequences (batch 1,
    cu_seq_lens_q and cu_seq_lens_k, or seq_idx, covering the tokens) attends each sequence to its own keys
    only (packed_attention: linattn's softmax with cu_seqlens where the call allows it), within the model's
    own mask where it gives one."""

    @functools.wraps(sdpa)
    def sdpa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                               **kwargs):
        cu_q = kwargs.get("cu_seq_lens_q")
        if cu_q is None and kwargs.get("seq_idx") is not None and query.shape[0] == 1:
            cu_q = offsets_of(kwargs["seq_idx"])
        cu_k = kwargs.get("cu_seq_lens_k")
        cu_k = cu_q if cu_k is None else cu_k
        plain = (query.device.type != "cpu" or cu_q is None or query.shape[0] != 1
                 or int(cu_q[-1]) != query.shape[2] or int(cu_k[-1]) != key.shape[2]
                 or any(kwargs.get(name) is not None for name in ("softcap", "s_aux", "position_bias")))
        if plain:
            return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                        is_causal=is_causal, **kwargs)
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        return packed_attention(query, key, value, attention_mask, cu_q, cu_k, dropout, scaling, causal,
                                kwargs.get("sliding_window")), None

    sdpa_attention_forward.linattn_packed = True
    return sdpa_attention_forward


# ------------------------------------------------------------------------------------------------


def is_enabled():
    """Whether enable() is in effect."""
    return bool(_state)


def enable():
    """Route transformers' linear-attention kernels (and packed full attention) on CPU tensors through
    linattn, for models already built and models built later. Calling it again changes nothing."""
    if _state:
        return
    transformers, hub_kernels = _transformers()
    import transformers.integrations as integrations
    from transformers.modeling_utils import AttentionInterface
    decorator = hub_kernels.use_kernel_func_from_hub_with_fallback
    code = _decorated_code(decorator)
    sdpa = AttentionInterface._global_mapping["sdpa"]
    routing = _routing_decorator(decorator)
    layer_decorator = hub_kernels.use_kernel_forward_from_hub
    layer_routing = _routing_layer_decorator(layer_decorator)
    hub_kernels.use_kernel_func_from_hub_with_fallback = routing
    integrations.use_kernel_func_from_hub_with_fallback = routing
    hub_kernels.use_kernel_forward_from_hub = layer_routing
    integrations.use_kernel_forward_from_hub = layer_routing
    AttentionInterface.register("sdpa", _packed_sdpa(sdpa))
    _state.update(decorator=decorator, layer_decorator=layer_decorator, sdpa=sdpa, norms={})
    _route_loaded(code)
    _route_loaded_norms()


def disable():
    """Undo enable(): transformers' own decorator, attention function and decorated functions again, in
    every modeling module (also those imported while enabled). Calling it when not enabled changes nothing."""
    if not _state:
        return
    import transformers.integrations as integrations
    from transformers.integrations import hub_kernels
    from transformers.modeling_utils import AttentionInterface
    hub_kernels.use_kernel_func_from_hub_with_fallback = _state["decorator"]
    integrations.use_kernel_func_from_hub_with_fallback = _state["decorator"]
    hub_kernels.use_kernel_forward_from_hub = _state["layer_decorator"]
    integrations.use_kernel_forward_from_hub = _state["layer_decorator"]
    AttentionInterface.register("sdpa", _state["sdpa"])
    _unroute_loaded()
    for cls, forward in _state["norms"].items():
        cls.forward = forward
    _state.clear()
