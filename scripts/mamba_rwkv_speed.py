#!/usr/bin/env python3
"""Mamba-2 and RWKV-7 on the CPU: linattn's speed at issue 40's shapes (docs/mamba.md, docs/rwkv7.md "Speed").

One process, one run: the fp32 FMA peak first (bench_peak, bench/peak_bench.cpp), then

  mamba2  B 1, L --mamba-seq, H 32, P 64, N 128, G 1 and 8 (Mamba-2's shapes): `linattn bench --op mamba2`
          (the table row: the chunked decayed operator, forward and forward + backward) as % of the peak, and
          linattn.mamba.mamba_chunk_scan_combined against transformers' own torch path for the same mixer math
          (transformers.models.mamba2.modeling_mamba2.mamba2_chunk_scan, its chunked SSD fallback, chunk 256)
          on the same tensors (dt_softplus, dt_bias, D), outputs compared.
  rwkv7   B 4, T --rwkv-seq, H 8, K = V = 64: `linattn bench --op rwkv7` (token by token, forward and
          forward + backward) as % of the peak, and linattn.fla.chunk_rwkv7 against flash-linear-attention's
          torch references dplr_recurrence (token by token) and dplr_chunkwise (chunked): transformers 5.25 has
          no RWKV-7 model, so no torch path of its own. The torch references run at --rwkv-torch-seq tokens
          (their time is linear in T; the ratio is taken per token).
  decode  one decoding token after prefills of 1024 and --mamba-seq tokens (the state has the same size at any
          context): linattn.mamba.selective_state_update (H 32, P 64, N 128) and linattn.fla.fused_recurrent_rwkv7
          with T = 1 (B 4, H 8, K = V = 64), the torch-facing calls a model makes; then linattn's own steps on
          numpy arrays (Mamba-2's as linattn.decayed_step of simple GLA, RWKV-7's dplr_delta_rule_recurrent on
          one token), each against linattn.decayed_step's plain linear step (decay "linear") on a state of the
          same size.

The "% of peak" denominator is docs/performance.md's: the larger of the 2-thread peak and twice the 1-thread
peak (load on a shared machine can lower the former), measured at the start and at the end of the run, the
higher of the two. Medians of --reps repetitions after one warm-up.

Example (2 threads):
  OMP_NUM_THREADS=2 PYTHONPATH=python build/venv/bin/python scripts/mamba_rwkv_speed.py \\
      --bin build-h/tools/linattn --peak-bin build-h/bench/bench_peak
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# torch's and linattn's OpenMP runtimes share the 2 cores in this process: with the default spin-waiting, the
# threads one runtime leaves spinning after its call slow the other's next call (a 0.2 ms decode step measured
# 80 ms). Passive waiting here; the linattn bench subprocesses run with the caller's setting.
_CALLER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from models_speed import _median_seconds as median_seconds  # noqa: E402  (scripts/: the same timing)


def _bench_env():
    """The environment of the C++ benchmarks: the caller's OMP_WAIT_POLICY, not this process's."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if _CALLER_WAIT_POLICY is not None:
        env["OMP_WAIT_POLICY"] = _CALLER_WAIT_POLICY
    return env


def fma_peak(peak_bin):
    """GFLOP/s: max(2-thread peak, 2 × 1-thread peak) of bench_peak's BM_FmaPeak."""
    out = subprocess.run([peak_bin, "--benchmark_filter=BM_FmaPeak/", "--benchmark_format=json"], check=True,
                         capture_output=True, text=True, env=_bench_env()).stdout
    rates = {int(b["threads"]): b["FLOPS"] * 1e-9 for b in json.loads(out)["benchmarks"]}
    return max(rates.get(2, 0.0), 2 * rates.get(1, 0.0)), rates


def bench(bin_path, op, args, threads, backward):
    cmd = [bin_path, "bench", "--op", op, "--threads", str(threads), "--json", "--min-reps", "3"] + args
    if backward:
        cmd.append("--backward")
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=_bench_env()).stdout)


# ---- Mamba-2 ---------------------------------------------------------------------------------------------


def mamba_inputs(L, H, P, N, G, seed=0):
    """Mamba-2's tensors as its mixer passes them: dt before softplus, dt_bias and A_log as it initialises them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, L, H, P, generator=g)
    dt = torch.randn(1, L, H, generator=g) * 0.5
    B = torch.randn(1, L, G, N, generator=g)
    C = torch.randn(1, L, G, N, generator=g)
    dt0 = torch.exp(torch.rand(H, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    dt_bias = dt0 + torch.log(-torch.expm1(-dt0))
    A = -(1 + 15 * torch.rand(H, generator=g))
    D = torch.ones(H)
    return x, dt, A, B, C, D, dt_bias


def mamba_section(a):
    from linattn.mamba import mamba_chunk_scan_combined
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    rows = []
    L, H, P, N = a.mamba_seq, 32, 64, 128
    for G in (1, 8):
        shape = ["--batch", "1", "--heads", str(H), "--seq", str(L), "--dim", str(N), "--value-dim", str(P),
                 "--groups", str(G)]
        fwd = bench(a.bin, "mamba2", shape, a.threads, False)
        fb = bench(a.bin, "mamba2", shape, a.threads, True)
        x, dt, A, B, C, D, dt_bias = mamba_inputs(L, H, P, N, G)
        kw = dict(D=D, dt_bias=dt_bias, dt_softplus=True)
        ours = lambda: mamba_chunk_scan_combined(x, dt, A, B, C, 256, **kw)  # noqa: E731
        theirs = lambda: mamba2_chunk_scan(x, dt, A, B, C, 256, **kw)  # noqa: E731
        with torch.no_grad():
            want = theirs()
            diff = (ours() - want).abs().max().item() / want.abs().max().item()
            t_ours, t_theirs = median_seconds(ours, a.reps), median_seconds(theirs, a.torch_reps)
        rows.append(dict(G=G, L=L, fwd_s=fwd["seconds"], fwd_gflops=fwd["gflops"], fb_s=fb["seconds"],
                         fb_gflops=fb["gflops"], python_s=t_ours, transformers_s=t_theirs, speedup=t_theirs / t_ours, max_rel_diff=diff))
    return rows


# ---- RWKV-7 ----------------------------------------------------------------------------------------------


def rwkv_inputs(Bt, T, H, K, seed=0):
    """r, w (log decays), k, v, a = −κ̂, b = κ̂·σ(·), [B, T, H, K] (fla's layout)."""
    g = torch.Generator().manual_seed(seed)
    r, k, v = (torch.randn(Bt, T, H, K, generator=g) for _ in range(3))
    w = -torch.exp(-0.5 + 0.5 * torch.randn(Bt, T, H, K, generator=g))
    kk = torch.nn.functional.normalize(torch.randn(Bt, T, H, K, generator=g), dim=-1)
    return r, w, k, v, -kk, kk * torch.sigmoid(torch.randn(Bt, T, H, K, generator=g))


def rwkv_section(a):
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_chunkwise, dplr_recurrence

    import linattn.fla as lfla

    Bt, H, K = 4, 8, 64
    shape = ["--batch", str(Bt), "--heads", str(H), "--seq", str(a.rwkv_seq), "--dim", str(K)]
    fwd = bench(a.bin, "rwkv7", shape, a.threads, False)
    fb = bench(a.bin, "rwkv7", shape, a.threads, True)
    T = a.rwkv_torch_seq
    r, w, k, v, aa, bb = rwkv_inputs(Bt, T, H, K)
    heads_first = [x.transpose(1, 2).contiguous() for x in (r, k, v, aa, bb, w)]
    scale = K ** -0.5  # the references scale q by K^-1/2
    with torch.no_grad():
        ours = lambda: lfla.chunk_rwkv7(r, w, k, v, aa, bb, scale=scale)[0]  # noqa: E731
        token = lambda: dplr_recurrence(*heads_first)[0]  # noqa: E731
        chunked = lambda: dplr_chunkwise(*heads_first, chunk_size=32)[0]  # noqa: E731
        want = token().transpose(1, 2)
        diff = (ours() - want).abs().max().item() / want.abs().max().item()
        t_ours = median_seconds(ours, a.reps)
        t_token = median_seconds(token, a.torch_reps)
        t_chunk = median_seconds(chunked, a.torch_reps)
    return dict(T=a.rwkv_seq, fwd_s=fwd["seconds"], fwd_gflops=fwd["gflops"], fb_s=fb["seconds"],
                fb_gflops=fb["gflops"], torch_T=T,
                python_s=t_ours, naive_recurrent_s=t_token, naive_chunkwise_s=t_chunk,
                speedup_recurrent=t_token / t_ours, speedup_chunkwise=t_chunk / t_ours, max_rel_diff=diff)


# ---- decode ----------------------------------------------------------------------------------------------


def decode_section(a):
    import linattn
    import linattn.fla as lfla
    from linattn.mamba import mamba_chunk_scan_combined, selective_state_update

    out = {}
    reps = max(a.reps * 100, 200)
    # Mamba-2: the state after a prefill of each context, then one token.
    H, P, N = 32, 64, 128
    for context in (1024, a.mamba_seq):
        x, dt, A, B, C, D, dt_bias = mamba_inputs(context + 1, H, P, N, 1)
        with torch.no_grad():
            _, state = mamba_chunk_scan_combined(x[:, :-1], dt[:, :-1], A, B[:, :-1], C[:, :-1], 256, D=D,
                                                 dt_bias=dt_bias, dt_softplus=True, return_final_states=True)
            step = lambda: selective_state_update(state, x[:, -1], dt[:, -1], A, B[:, -1], C[:, -1], D=D,  # noqa
                                                  dt_bias=dt_bias, dt_softplus=True)
            out[f"mamba2_step_us_context_{context}"] = median_seconds(step, reps) * 1e6
    # RWKV-7: fused_recurrent_rwkv7 on one token from the state of a prefill.
    Bt, Hr, K = 4, 8, 64
    for context in (1024, a.mamba_seq):
        r, w, k, v, aa, bb = rwkv_inputs(Bt, context + 1, Hr, K)
        with torch.no_grad():
            _, state = lfla.fused_recurrent_rwkv7(r[:, :-1], w[:, :-1], k[:, :-1], v[:, :-1], aa[:, :-1],
                                                  bb[:, :-1], scale=1.0, output_final_state=True)
            last = [t[:, -1:] for t in (r, w, k, v, aa, bb)]
            step = lambda: lfla.fused_recurrent_rwkv7(*last, scale=1.0, initial_state=state,  # noqa: E731
                                                      output_final_state=True)
            out[f"rwkv7_step_us_context_{context}"] = median_seconds(step, reps) * 1e6

    # linattn's own steps on numpy arrays, the state [B, H, K, V] advanced in place: Mamba-2's as the decayed
    # step of simple GLA (q = C, k = B, v = dt·x, g = dt·A: linattn.h), RWKV-7's the DPLR recurrence on one
    # token; and the plain linear step (decay "linear") on a state of the same size.
    rng = np.random.default_rng(0)

    def rows(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def timed(fn):
        return median_seconds(fn, reps) * 1e6

    S = np.zeros((1, H, N, P), dtype=np.float32)
    qm, km, vm, gm = rows(1, H, N), rows(1, H, N), rows(1, H, P), -np.abs(rows(1, H))
    out["mamba2_decayed_step_us"] = timed(lambda: linattn.decayed_step(qm, km, vm, gm, S, decay="simple_gla"))
    out["linear_step_us_mamba2_state"] = timed(lambda: linattn.decayed_step(qm, km, vm, None, S, decay="linear"))
    S = np.zeros((Bt, Hr, K, K), dtype=np.float32)
    one = [rows(Bt, 1, Hr, K) for _ in range(6)]
    one[5] = -np.abs(one[5])
    out["rwkv7_dplr_step_us"] = timed(lambda: linattn._linattn.dplr_delta_rule_recurrent(*one, S, scale=1.0))
    qr, kr, vr = rows(Bt, Hr, K), rows(Bt, Hr, K), rows(Bt, Hr, K)
    out["linear_step_us_rwkv7_state"] = timed(lambda: linattn.decayed_step(qr, kr, vr, None, S, decay="linear"))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the linattn command (a build with the mamba2 and rwkv7 rows)")
    p.add_argument("--peak-bin", required=True, help="bench_peak (bench/peak_bench.cpp)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--torch-reps", type=int, default=1, help="repetitions of the (slow) torch paths")
    p.add_argument("--mamba-seq", type=int, default=16384)
    p.add_argument("--rwkv-seq", type=int, default=16384)
    p.add_argument("--rwkv-torch-seq", type=int, default=2048)
    p.add_argument("--sections", default="mamba2,rwkv7,decode")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import linattn

    linattn.set_num_threads(a.threads)
    peak, rates = fma_peak(a.peak_bin)
    result = dict(machine=platform.processor() or platform.machine(), threads=a.threads, peak_gflops=peak,
                  peak_rates=rates, date=time.strftime("%Y-%m-%d", time.gmtime()))
    sections = a.sections.split(",")
    if "mamba2" in sections:
        result["mamba2"] = mamba_section(a)
    if "rwkv7" in sections:
        result["rwkv7"] = rwkv_section(a)
    if "decode" in sections:
        result["decode"] = decode_section(a)
    # The peak again at the end; the higher of the two is the denominator (load can only lower it).
    peak_after, _ = fma_peak(a.peak_bin)
    result["peak_gflops_after"] = peak_after
    denominator = max(peak, peak_after)
    for row in result.get("mamba2", []) + ([result["rwkv7"]] if "rwkv7" in result else []):
        row["fwd_peak"], row["fb_peak"] = row["fwd_gflops"] / denominator, row["fb_gflops"] / denominator
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
