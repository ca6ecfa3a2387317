#!/usr/bin/env python3
"""linattn under transformers' models, timed against transformers' own CPU path (docs/models.md "Speed").

One process, the same tensors for both sides, the median of --reps repetitions after one warm-up:

  ops     the gated delta rule at Qwen3.5 / Qwen3-Next's shapes (16 q/k heads, 32 value heads, K = V = 128,
          use_qk_l2norm_in_kernel=True), B 1, T --seq, fp32 and bf16 inputs: linattn.fla.chunk_gated_delta_rule
          against transformers' torch_chunk_gated_delta_rule, forward and forward + backward; KDA
          (linattn.fla.chunk_kda) against the gated delta rule at the same heads (32 of 128) and length;
          one decode step (T = 1 with a state) against torch_recurrent_gated_delta_rule, and linattn's
          per-call overhead (a call on a 1-element problem: checks, conversions, dispatch).
  model   a Qwen3.5-shaped model (transformers' Qwen3_5TextConfig defaults: hidden size, head counts and
          dims; --layers layers, one in four full attention; random weights): prefill of --prefill tokens
          and greedy decode tokens/s from that prefill's cache, transformers' CPU path against
          linattn.integrations.transformers.enable(), with the share of time in the linear-attention
          layers (their forward hooks) before and after; then decode tokens/s at a context of --context
          tokens (default 32768) without a prefill of that length (see _extend_context: the prefill's
          cache with the full-attention layers' keys and values repeated to --context tokens; the
          linear-attention layers' state has the same size at any context).

Examples:
  build/venv/bin/python scripts/models_speed.py ops --seq 8192 --reps 3
  build/venv/bin/python scripts/models_speed.py ops --parts step --reps 3
  build/venv/bin/python scripts/models_speed.py model --prefill 8192 --decode 8 --context 32768
  build/venv/bin/python scripts/models_speed.py ops --seq 1024 --reps 1 --json out/models_speed.json
"""

import argparse
import json
import platform
import statistics
import sys
import time

import torch


def _median_seconds(fn, reps):
    fn()  # warm-up: first-touch pages, thread pools
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _gdn_inputs(T, hk, hv, K, V, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, hk, K, generator=g)
    k = torch.randn(1, T, hk, K, generator=g)
    v = torch.randn(1, T, hv, V, generator=g)
    gate = -torch.rand(1, T, hv, generator=g) * 0.5  # log decays in [-0.5, 0]
    beta = torch.rand(1, T, hv, generator=g)
    return [x.to(dtype) for x in (q, k, v)] + [gate, beta]


def _forward_backward(fn, tensors):
    """fn(*tensors) forward, then backward of the output's sum into every input."""
    leaves = [x.detach().clone().requires_grad_() for x in tensors]

    def run():
        for x in leaves:
            x.grad = None
        o = fn(*leaves)[0]
        o.float().sum().backward()
    return run


def _gdn_functions():
    import linattn.fla as fla
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    torch_gdn = qwen.torch_chunk_gated_delta_rule  # on CPU tensors: transformers' own torch code

    def linattn_gdn(q, k, v, g, beta):
        return fla.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)

    def transformers_gdn(q, k, v, g, beta):
        return torch_gdn(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)

    return linattn_gdn, transformers_gdn


def _ops_gdn(args, rows, extra):
    """The gated delta rule at Qwen3.5's heads (16 q/k, 32 value), fp32 and bf16, against transformers'."""
    T = args.seq
    linattn_gdn, transformers_gdn = _gdn_functions()
    for dtype in (torch.float32, torch.bfloat16):
        tensors = _gdn_inputs(T, 16, 32, 128, 128, dtype)
        name = str(dtype).replace("torch.", "")
        with torch.no_grad():
            ours = _median_seconds(lambda: linattn_gdn(*tensors), args.reps)
            theirs = _median_seconds(lambda: transformers_gdn(*tensors), args.reps)
        rows.append((f"gated delta rule forward, {name}, T {T}", ours, theirs))
        ours = _median_seconds(_forward_backward(linattn_gdn, tensors), args.reps)
        theirs = _median_seconds(_forward_backward(transformers_gdn, tensors), args.reps)
        rows.append((f"gated delta rule forward + backward, {name}, T {T}", ours, theirs))


def _ops_kda(args, rows, extra):
    """KDA against the gated delta rule at the same heads (32 q/k and value heads of 128) and length."""
    import linattn.fla as fla
    T = args.seq
    linattn_gdn, _ = _gdn_functions()
    tensors = _gdn_inputs(T, 32, 32, 128, 128, torch.float32)
    g_key = -torch.rand(1, T, 32, 128, generator=torch.Generator().manual_seed(1)) * 0.5

    def linattn_kda(q, k, v, g, beta):
        return fla.chunk_kda(q, k, v, g_key if g.dim() == 3 else g, beta, use_qk_l2norm_in_kernel=True)

    with torch.no_grad():
        gdn = _median_seconds(lambda: linattn_gdn(*tensors), args.reps)
        kda = _median_seconds(lambda: linattn_kda(*tensors), args.reps)
    rows.append((f"KDA forward / gated delta rule forward, 32 heads, T {T}", kda, gdn))
    kda_tensors = tensors[:3] + [g_key, tensors[4]]
    gdn = _median_seconds(_forward_backward(linattn_gdn, tensors), args.reps)
    kda = _median_seconds(_forward_backward(lambda q, k, v, g, b: fla.chunk_kda(q, k, v, g, b,
                                                                                use_qk_l2norm_in_kernel=True),
                                            kda_tensors), args.reps)
    rows.append((f"KDA forward + backward / gated delta rule's, 32 heads, T {T}", kda, gdn))


def _ops_step(args, rows, extra):
    """One decode step: T = 1 with a state, 32 value heads of 128; and linattn's per-call overhead."""
    import linattn.fla as fla
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    torch_step = qwen.torch_recurrent_gated_delta_rule
    q, k, v, g, beta = _gdn_inputs(1, 16, 32, 128, 128, torch.float32)
    state = torch.randn(1, 32, 128, 128) * 0.1
    step_reps = max(args.reps, 50)
    with torch.no_grad():
        ours = _median_seconds(lambda: fla.fused_recurrent_gated_delta_rule(
            q, k, v, g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True),
            step_reps)
        theirs = _median_seconds(lambda: torch_step(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True), step_reps)
        tiny = _gdn_inputs(1, 1, 1, 1, 1, torch.float32)
        overhead = _median_seconds(lambda: fla.fused_recurrent_gated_delta_rule(
            *tiny[:4], beta=tiny[4], output_final_state=True), max(args.reps, 200))
    rows.append(("decode step, 32 value heads of 128", ours, theirs))
    extra["per_call_overhead_us"] = overhead * 1e6


_PARTS = {"gdn": _ops_gdn, "kda": _ops_kda, "step": _ops_step}


def ops(args):
    rows, extra = [], {}
    for part in args.parts.split(","):
        done = len(rows)
        _PARTS[part](args, rows, extra)
        for name, ours, theirs in rows[done:]:  # as each group ends: a run stopped later still leaves these
            print(f"{name}: linattn {ours * 1e3:.2f} ms, comparison {theirs * 1e3:.2f} ms", file=sys.stderr, flush=True)
    return rows, extra


class _LayerTimer:
    """Wall time spent inside the modules of the given type (forward hooks), summed over calls."""

    def __init__(self, model, type_name):
        self.seconds, self._start, self.handles = 0.0, {}, []
        for module in model.modules():
            if type(module).__name__ == type_name:
                self.handles.append(module.register_forward_pre_hook(self._enter))
                self.handles.append(module.register_forward_hook(self._leave))

    def _enter(self, module, inputs):
        self._start[id(module)] = time.perf_counter()

    def _leave(self, module, inputs, output):
        self.seconds += time.perf_counter() - self._start.pop(id(module))

    def close(self):
        for h in self.handles:
            h.remove()


def _extend_context(cache, context):
    """cache (a DynamicCache after a prefill) made to stand for a context of `context` tokens, for timing
    a decode step there without prefilling that many tokens: each full-attention layer's keys and values
    are the prefill's, repeated (cycled) to `context` positions, and each linear-attention layer's token
    count says `context`. A decode step's work depends on the context's length, not on its values: the
    full-attention layers read every cached key and value, and the linear-attention layers' state
    (recurrent and convolution windows) has the same size at any context, so it stays the prefill's."""
    extended = 0
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() == 4:
            n = keys.shape[-2]
            times = -(-context // n)
            layer.keys = keys.repeat(1, 1, times, 1)[:, :, :context].contiguous()
            layer.values = layer.values.repeat(1, 1, times, 1)[:, :, :context].contiguous()
            extended += 1
        elif isinstance(getattr(layer, "cumulative_length_linear", None), torch.Tensor):
            layer.cumulative_length_linear.fill_(context)
        else:
            raise RuntimeError(f"--context: cannot extend a cache layer of type {type(layer).__name__}")
    if extended == 0:
        raise RuntimeError("--context: the model's cache has no full-attention layer to extend")
    return cache


def _decode(net, cache, token, steps):
    """Greedy decoding of `steps` tokens from cache; returns seconds."""
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(steps):
            step = net(token, past_key_values=cache, use_cache=True)
            token = step.logits[:, -1:].argmax(-1)
        return time.perf_counter() - start


def model(args):
    import linattn.integrations.transformers as integration
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(num_hidden_layers=args.layers, vocab_size=args.vocab,
                               layer_types=[("full_attention" if (i + 1) % 4 == 0 else "linear_attention")
                                            for i in range(args.layers)])
    torch.manual_seed(0)
    net = Qwen3_5ForCausalLM(config).eval()
    linear_type = next(type(m).__name__ for m in net.modules() if "GatedDeltaNet" in type(m).__name__)
    prompt = torch.randint(0, args.vocab, (1, args.prefill))
    shape = {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers", "linear_num_key_heads",
                                             "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                                             "num_attention_heads", "num_key_value_heads", "head_dim")}
    results = {"config": shape}
    for label, on in (("transformers", False), ("linattn", True)):
        (integration.enable if on else integration.disable)()
        timer = _LayerTimer(net, linear_type)
        with torch.no_grad():
            start = time.perf_counter()
            out = net(prompt, use_cache=True)
            prefill = time.perf_counter() - start
        share = timer.seconds / prefill
        timer.seconds = 0.0
        # Greedy decode from the prefill's own cache: a context of --prefill tokens.
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        seconds = _decode(net, cache, token, args.decode)
        decode_share = timer.seconds / seconds
        timer.seconds = 0.0
        # Then at --context tokens: the same cache, its full-attention layers' keys and values extended.
        long_seconds = _decode(net, _extend_context(cache, args.context), token, args.decode)
        results[label] = {"prefill_s": prefill, "prefill_tokens_per_s": args.prefill / prefill,
                          "prefill_linear_share": share, "decode_tokens_per_s": args.decode / seconds,
                          "decode_linear_share": decode_share, "context": args.context,
                          "context_decode_tokens_per_s": args.decode / long_seconds,
                          "context_decode_linear_share": timer.seconds / long_seconds}
        timer.close()
        del out, cache
        print(f"{label}: prefill {args.prefill} tokens {prefill:.2f} s (linear layers {100 * share:.0f}%), decode "
              f"{args.decode / seconds:.2f} tokens/s at {args.prefill} tokens, {args.decode / long_seconds:.2f} "
              f"tokens/s at {args.context} tokens", file=sys.stderr)
    integration.disable()
    return results


def _cpu_name():
    """The CPU's model name (/proc/cpuinfo on Linux), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("Examples:")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["ops", "model"], help="the operators, or a whole model")
    parser.add_argument("--seq", type=int, default=8192, help="ops: sequence length (default 8192)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions after a warm-up; the median is kept")
    parser.add_argument("--threads", type=int, default=2, help="torch and linattn threads (default 2)")
    parser.add_argument("--layers", type=int, default=4, help="model: layers (one in four full attention)")
    parser.add_argument("--vocab", type=int, default=4096, help="model: vocabulary size (random weights)")
    parser.add_argument("--prefill", type=int, default=8192, help="model: prompt tokens for the prefill")
    parser.add_argument("--decode", type=int, default=8, help="model: tokens decoded")
    parser.add_argument("--context", type=int, default=32768,
                        help="model: also decode at this context (the prefill's cache extended; default 32768)")
    parser.add_argument("--parts", default="gdn,kda,step",
                        help="ops: which figures, comma-separated: gdn (the gated delta rule against transformers'), "
                             "kda (KDA against the gated delta rule), step (the decode step and the per-call "
                             "overhead); default all")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.parts.split(",")) - set(_PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; expected some of {', '.join(_PARTS)}")
    for name in ("seq", "reps", "threads", "layers", "vocab", "prefill", "decode", "context"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    import transformers
    header = {"machine": _cpu_name(), "threads": args.threads,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.what == "ops":
        rows, extra = ops(args)
        print(f"| figure | linattn | comparison | ratio |  ({header})\n|---|---|---|---|")
        for name, ours, theirs in rows:
            print(f"| {name} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms | {theirs / ours:.2f}× |")
        if "per_call_overhead_us" in extra:
            print(f"linattn's per-call overhead (a 1-element decode step): {extra['per_call_overhead_us']:.1f} µs")
        result = {"header": header, "rows": [dict(figure=n, linattn_s=a, comparison_s=b) for n, a, b in rows], **extra}
    else:
        result = {"header": header, **model(args)}
        print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
