#!/usr/bin/env python3
"""linattn under transformers' models, timed against transformers' own CPU path (docs/models.md "Speed").

One process, the same tensors for both sides, the median of --reps repetitions after one warm-up:

  ops     the gated delta rule at Qwen3.5 / Qwen3-Next's shapes (16 q/k heads, 32 value heads, K = V = 128,
          use_qk_l2norm_in_kernel=True), B 1, T --seq, fp32 and bf16 inputs: linattn.fla.chunk_gated_delta_rule
          against transformers' torch_chunk_gated_delta_rule, forward and forward + backward; KDA
          (linattn.fla.chunk_kda) against the gated delta rule at the same heads (32 of 128) and length;
          bf16 inputs (g float32, as the models pass it) read in place against the same call through float32
          copies and against float32 inputs, for both; one decode step (T = 1 with a state) against
          torch_recurrent_gated_delta_rule, and linattn's per-call overhead (a call on a 1-element problem:
          checks, conversions, dispatch).
  model   a Qwen3.5-shaped model (transformers' Qwen3_5TextConfig defaults: hidden size, head counts and
          dims; --layers layers, one in four full attention; random weights): prefill of --prefill tokens
          and greedy decode tokens/s from that prefill's cache, transformers' CPU path against
          linattn.integrations.transformers.enable(), with the share of time in the linear-attention
          layers (their forward hooks) before and after; then decode tokens/s at a context of --context
          tokens (default 32768) without a prefill of that length (see _extend_context: the prefill's
          cache with the full-attention layers' keys and values repeated to --context tokens; the
          linear-attention layers' state has the same size at any context).
  mamba   the six Mamba-2 families transformers has (mamba2, bamba, falcon_h1, granitemoehybrid, zamba2,
          nemotron_h), each as a two-layer model at Mamba-2's mixer shape (hidden --hidden, 2·hidden / 64
          heads of P = 64, state N = 128, --groups groups, chunks of 256; the hybrids' second layer full
          attention; random weights): prefill of --prefill tokens, transformers' CPU path against enable(),
          with the share of time in the Mamba-2 mixers and the largest logit difference between the sides.

Examples:
  build/venv/bin/python scripts/models_speed.py ops --seq 8192 --reps 3
  build/venv/bin/python scripts/models_speed.py ops --parts step --reps 3
  build/venv/bin/python scripts/models_speed.py ops --parts half --seq 8192 --reps 3
  build/venv/bin/python scripts/models_speed.py model --prefill 8192 --decode 8 --context 32768
  build/venv/bin/python scripts/models_speed.py ops --seq 1024 --reps 1 --json out/models_speed.json
  build/venv/bin/python scripts/models_speed.py mamba --prefill 4096 --reps 3
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
    # As Qwen3.5's and Qwen3-Next's layers hand them over: g in float32 (-A_log.float().exp() · softplus), β in
    # the model's dtype (b.sigmoid()).
    return [x.to(dtype) for x in (q, k, v)] + [gate, beta.to(dtype)]


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


def _ops_half(args, rows, extra):
    """bf16 through linattn.fla as the models call it (q, k, v, beta bf16, g float32), read in place by the half
    operators, against the same call widened to float32 copies in torch with o rounded back (what linattn.fla did
    with bf16 before the half operators took a float32 g: the same results, bit for bit) and against float32
    inputs: the gated delta rule at Qwen3.5's heads and KDA at 32 heads, K = V = 128."""
    import linattn.fla as fla

    def gdn(q, k, v, g, beta):
        return fla.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)

    def kda(q, k, v, g, beta):
        return fla.chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)

    def widened(fn):
        def run(q, k, v, g, beta):
            o, state = fn(q.float(), k.float(), v.float(), g, beta.float())
            return o.to(q.dtype), state
        return run

    T = args.seq
    for name, fn, hk, hv, gate_cols in (("gated delta rule", gdn, 16, 32, 0), ("KDA", kda, 32, 32, 128)):
        wide = _gdn_inputs(T, hk, hv, 128, 128, torch.float32)
        if gate_cols:
            wide[3] = -torch.rand(1, T, hv, gate_cols, generator=torch.Generator().manual_seed(1)) * 0.5
        half = [x.to(torch.bfloat16) if i != 3 else x for i, x in enumerate(wide)]  # g stays float32
        with torch.no_grad():
            native = _median_seconds(lambda: fn(*half), args.reps)
            copies = _median_seconds(lambda: widened(fn)(*half), args.reps)
            fp32 = _median_seconds(lambda: fn(*wide), args.reps)
        rows.append((f"{name} forward, bf16 in place / bf16 through float32 copies, T {T}", native, copies))
        rows.append((f"{name} forward, bf16 in place / float32 inputs, T {T}", native, fp32))
        native = _median_seconds(_forward_backward(fn, half), args.reps)
        copies = _median_seconds(_forward_backward(widened(fn), half), args.reps)
        fp32 = _median_seconds(_forward_backward(fn, wide), args.reps)
        rows.append((f"{name} forward + backward, bf16 in place / through float32 copies, T {T}", native, copies))
        rows.append((f"{name} forward + backward, bf16 in place / float32 inputs, T {T}", native, fp32))


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


_PARTS = {"gdn": _ops_gdn, "kda": _ops_kda, "half": _ops_half, "step": _ops_step}


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


def _mamba_configs(hidden, groups, vocab):
    """The six Mamba-2 families as (ForCausalLM class name, config keywords): Mamba-2's mixer shape
    (2·hidden inner width in heads of 64, state 128, chunks of 256), one Mamba-2 layer, then a second one
    (mamba2) or full attention (the hybrids: 8 heads of 128 over 2 KV heads)."""
    heads, P, N, chunk = 2 * hidden // 64, 64, 128, 256
    dense = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=8,
                 num_key_value_heads=2, num_hidden_layers=2)
    mamba = dict(mamba_n_heads=heads, mamba_d_head=P, mamba_n_groups=groups, mamba_d_state=N, mamba_chunk_size=chunk)
    return {
        "mamba2": ("Mamba2", dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=2, num_heads=heads,
                                  head_dim=P, state_size=N, n_groups=groups, expand=2, chunk_size=chunk)),
        "bamba": ("Bamba", dict(dense, attn_layer_indices=[1], **mamba)),
        "falcon_h1": ("FalconH1", dict(dense, head_dim=hidden // 8, mamba_d_ssm=2 * hidden, **mamba)),
        "granitemoehybrid": ("GraniteMoeHybrid", dict(dense, layer_types=["mamba", "attention"], num_local_experts=2,
                                                      num_experts_per_tok=1, shared_intermediate_size=hidden,
                                                      **mamba)),
        "zamba2": ("Zamba2", dict(dense, layers_block_type=["mamba", "hybrid"], mamba_d_state=N, mamba_ngroups=groups,
                                  n_mamba_heads=heads, chunk_size=chunk)),
        "nemotron_h": ("NemotronH", dict(dense, head_dim=hidden // 8, layers_block_type=["mamba", "attention"],
                                         ssm_state_size=N, mamba_num_heads=heads, mamba_head_dim=P, n_groups=groups,
                                         chunk_size=chunk)),
    }


class _MixerTimer(_LayerTimer):
    """_LayerTimer over the Mamba-2 mixers: the modules holding A_log and dt_bias (each family names its
    mixer class differently)."""

    def __init__(self, model):
        super().__init__(model, None)
        for module in model.modules():
            if hasattr(module, "A_log") and hasattr(module, "dt_bias"):
                self.handles.append(module.register_forward_pre_hook(self._enter))
                self.handles.append(module.register_forward_hook(self._leave))


def mamba_families(args):
    """Prefill time of each Mamba-2 family, transformers' CPU path against enable()."""
    import transformers
    import linattn.integrations.transformers as integration

    results = {}
    prompt = torch.randint(0, args.vocab, (1, args.prefill), generator=torch.Generator().manual_seed(0))
    for family, (prefix, keywords) in _mamba_configs(args.hidden, args.groups, args.vocab).items():
        torch.manual_seed(0)
        net = getattr(transformers, prefix + "ForCausalLM")(getattr(transformers, prefix + "Config")(**keywords))
        net = net.eval()
        row = {}
        logits = {}
        for label, on in (("transformers", False), ("linattn", True)):
            (integration.enable if on else integration.disable)()
            timer, elapsed = _MixerTimer(net), [0.0]

            def run():
                start = time.perf_counter()
                logits[label] = net(prompt, use_cache=False).logits
                elapsed[0] += time.perf_counter() - start

            with torch.no_grad():
                seconds = _median_seconds(run, args.reps)
            row[label] = {"prefill_s": seconds, "mixer_share": timer.seconds / elapsed[0]}
            timer.close()
        integration.disable()
        scale = logits["transformers"].abs().max().item()
        row["logits_max_difference_relative"] = (logits["linattn"] - logits["transformers"]).abs().max().item() / scale
        row["speedup"] = row["transformers"]["prefill_s"] / row["linattn"]["prefill_s"]
        results[family] = row
        print(f"{family}: prefill {args.prefill} tokens, transformers {row['transformers']['prefill_s']:.3f} s (mixers "
              f"{100 * row['transformers']['mixer_share']:.0f}%), linattn {row['linattn']['prefill_s']:.3f} s (mixers "
              f"{100 * row['linattn']['mixer_share']:.0f}%): {row['speedup']:.2f}x; logits differ by "
              f"{row['logits_max_difference_relative']:.1e} of their largest", file=sys.stderr, flush=True)
        del net
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
    parser.add_argument("what", choices=["ops", "model", "mamba"],
                        help="the operators, a whole Qwen3.5-shaped model, or the six Mamba-2 families' prefill")
    parser.add_argument("--seq", type=int, default=8192, help="ops: sequence length (default 8192)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions after a warm-up; the median is kept")
    parser.add_argument("--threads", type=int, default=2, help="torch and linattn threads (default 2)")
    parser.add_argument("--layers", type=int, default=4, help="model: layers (one in four full attention)")
    parser.add_argument("--vocab", type=int, default=4096, help="model: vocabulary size (random weights)")
    parser.add_argument("--prefill", type=int, default=8192, help="model: prompt tokens for the prefill")
    parser.add_argument("--decode", type=int, default=8, help="model: tokens decoded")
    parser.add_argument("--context", type=int, default=32768,
                        help="model: also decode at this context (the prefill's cache extended; default 32768)")
    parser.add_argument("--parts", default="gdn,kda,half,step",
                        help="ops: which figures, comma-separated: gdn (the gated delta rule against transformers'), "
                             "kda (KDA against the gated delta rule), half (bf16 read in place against float32 "
                             "copies and float32 inputs), step (the decode step and the per-call overhead); "
                             "default all")
    parser.add_argument("--hidden", type=int, default=1024,
                        help="mamba: hidden size (2·hidden / 64 Mamba-2 heads; default 1024)")
    parser.add_argument("--groups", type=int, default=1, help="mamba: B/C groups (default 1)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.parts.split(",")) - set(_PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; expected some of {', '.join(_PARTS)}")
    if args.hidden % 64 or (2 * args.hidden // 64) % args.groups:
        parser.error(f"--hidden {args.hidden} and --groups {args.groups}: expected a hidden size that is a multiple "
                     "of 64 and groups that divide its 2·hidden / 64 heads")
    for name in ("seq", "reps", "threads", "layers", "vocab", "prefill", "decode", "context", "hidden", "groups"):
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
    elif args.what == "mamba":
        families = mamba_families(args)
        print(f"| family | transformers | with enable() | ratio | mixers' share (before, after) |  ({header}, "
              f"prefill {args.prefill}, hidden {args.hidden}, groups {args.groups})\n|---|---|---|---|---|")
        for family, row in families.items():
            theirs, ours = row["transformers"], row["linattn"]
            print(f"| {family} | {theirs['prefill_s']:.3f} s | {ours['prefill_s']:.3f} s | {row['speedup']:.2f}× | "
                  f"{100 * theirs['mixer_share']:.0f}%, {100 * ours['mixer_share']:.0f}% |")
        result = {"header": header, "prefill": args.prefill, "hidden": args.hidden, "groups": args.groups,
                  "families": families}
    else:
        result = {"header": header, **model(args)}
        print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
