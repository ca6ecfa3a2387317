#!/usr/bin/env python3
"""Issue 3's speed report: runs linattn's benchmark programs, the PyTorch comparisons and the
prefix-sum baseline on the same shapes in one run, and prints every target's ratio with PASS/FAIL.
Section 7 is issue 12's (decayed linear attention: bench_decay against the pure-PyTorch chunked
formulation of scripts/torch_chunked_decay.py, and ggml's ggml_gated_linear_attn when --ggml-gla names a
program that times it), section 8 issue 13's (the delta rule: bench_delta
against scripts/torch_chunked_delta.py, and ggml's ggml_gated_delta_net when --ggml-gdn names a
program that times it).

Run with an interpreter that has PyTorch 2 (the venv scripts/test.sh makes: build/venv, torch 2.13):
    build/venv/bin/python scripts/speed_report.py --build build            # the full report
    build/venv/bin/python scripts/speed_report.py --build build --quick    # a smoke test (small shapes)
    build/venv/bin/python scripts/speed_report.py --build build --only-decay  # the FMA peak and section 7
    build/venv/bin/python scripts/speed_report.py --build build --only-delta  # the FMA peak and section 8
The build directory must be configured with -DLINATTN_BUILD_BENCHMARKS=ON and its bench targets built
(Debian's /usr/bin/python3 has torch 1.13: its figures are not the ones PyTorch 2 users see).

Timing: every figure is the minimum over repetitions of a mean over a timed batch (noise on a shared
machine only ever adds time). Ratios compare figures of the same run. Benchmarks are not tests.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_chunked_decay  # noqa: E402  (issue 12's PyTorch baseline, beside this script)
import torch_chunked_delta  # noqa: E402  (issue 13's)

THREADS = 2


# ----------------------------------------------------------------------------------------------
# The seed (/work/shared/seed/linear-attention-notes.md), verbatim.

def standard_attention(Q, K, V):
    d_k = Q.size(-1)
    scores = torch.matmul(Q, K.transpose(-2, -1)) / d_k**0.5
    attn = F.softmax(scores, dim=-1)
    return torch.matmul(attn, V)


def elu_feature_map(x):
    return F.elu(x) + 1  # 保证非负


def linear_attention(Q, K, V):
    Q_prime = elu_feature_map(Q)  # φ(Q)
    K_prime = elu_feature_map(K)  # φ(K)

    KV = torch.einsum('nld,nle->lde', K_prime, V)  # φ(K)^T V
    Z = 1 / (torch.einsum('nld,ld->nl', Q_prime, K_prime.sum(dim=0)) + 1e-6)  # 正则项
    output = torch.einsum('nld,lde,nl->nle', Q_prime, KV, Z)  # 最终输出
    return output


# ----------------------------------------------------------------------------------------------
# Plain-PyTorch formulations of the same non-causal linear attention on [B, H, N, D]; the report
# takes the fastest.

def plain_matmul(Q, K, V):
    Qp, Kp = F.elu(Q) + 1, F.elu(K) + 1
    KV = Kp.transpose(-2, -1) @ V
    Z = 1 / (Qp @ Kp.sum(dim=-2).unsqueeze(-1) + 1e-6)
    return (Qp @ KV) * Z


def plain_einsum(Q, K, V):
    Qp, Kp = F.elu(Q) + 1, F.elu(K) + 1
    KV = torch.einsum('bhnd,bhne->bhde', Kp, V)
    Z = 1 / (torch.einsum('bhnd,bhd->bhn', Qp, Kp.sum(dim=-2)) + 1e-6)
    return torch.einsum('bhnd,bhde->bhne', Qp, KV) * Z.unsqueeze(-1)


def plain_bmm_inplace(Q, K, V):
    B, H, N, D = Q.shape
    Qp = F.elu(Q.reshape(B * H, N, D)).add_(1)
    Kp = F.elu(K.reshape(B * H, N, D)).add_(1)
    V3 = V.reshape(B * H, N, V.shape[-1])
    KV = torch.bmm(Kp.transpose(1, 2), V3)
    den = torch.bmm(Qp, Kp.sum(dim=1).unsqueeze(-1)).add_(1e-6)
    return torch.bmm(Qp, KV).div_(den).reshape(B, H, N, -1)


def plain_ones_column(Q, K, V):
    # z rides along as an extra column of V: one matmul gives numerator and denominator.
    Qp, Kp = F.elu(Q) + 1, F.elu(K) + 1
    V1 = torch.cat([V, torch.ones_like(V[..., :1])], dim=-1)
    R = Qp @ (Kp.transpose(-2, -1) @ V1)
    return R[..., :-1] / (R[..., -1:] + 1e-6)


PLAIN = {'matmul': plain_matmul, 'einsum': plain_einsum, 'bmm_inplace': plain_bmm_inplace,
         'ones_column': plain_ones_column}


def uniform(*shape):
    return torch.rand(*shape) * 2 - 1


def time_torch(fn, min_time, repetitions, clock=time.perf_counter):
    """Minimum over repetitions of the mean time of fn() over a batch of at least min_time seconds.
    clock=time.process_time measures CPU time instead (for 1 thread: the time the work needed)."""
    fn()  # warm-up (allocator, thread pool)
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    batch = max(1, int(min_time / once))
    best = float('inf')
    for _ in range(repetitions):
        start = clock()
        for _ in range(batch):
            fn()
        best = min(best, (clock() - start) / batch)
    return best


# ----------------------------------------------------------------------------------------------
# The C++ programs.

def run_benchmarks(build, program, regex, min_time, repetitions):
    """{benchmark name: {'seconds': min real time per iteration, counters...}} for one program."""
    path = os.path.join(build, 'bench', program)
    cmd = [path, '--benchmark_format=json', f'--benchmark_filter={regex}', f'--benchmark_min_time={min_time}',
           f'--benchmark_repetitions={repetitions}']
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    scale = {'ns': 1e-9, 'us': 1e-6, 'ms': 1e-3, 's': 1.0}
    results = {}
    for b in json.loads(out)['benchmarks']:
        if b.get('run_type', 'iteration') != 'iteration' or b.get('error_occurred'):
            continue
        name = b['run_name'] if 'run_name' in b else b['name']
        seconds = b['real_time'] * scale[b['time_unit']]
        cpu = b['cpu_time'] * scale[b['time_unit']]
        best_cpu = min(cpu, results[name]['cpu_seconds']) if name in results else cpu
        if name not in results or seconds < results[name]['seconds']:
            results[name] = dict(b, seconds=seconds)
        results[name]['cpu_seconds'] = best_cpu
    return results


def context_line():
    lines = []
    try:
        model = [l for l in open('/proc/cpuinfo') if l.startswith('model name')][0].split(':')[1].strip()
        lines.append(f'cpu: {model}, {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.2f}')
    except (OSError, IndexError):
        pass
    lines.append(f'torch {torch.__version__}, torch threads {torch.get_num_threads()}')
    return lines


class Report:
    def __init__(self):
        self.rows = []
        self.data = {}

    def target(self, name, value, op, goal, unit='', note=''):
        passed = (value >= goal) if op == '>=' else (value <= goal)
        seen = f'{int(value)}' if float(value).is_integer() else f'{value:.3g}'
        self.rows.append((name, seen + unit, f'{op} {goal:g}{unit}', 'PASS' if passed else 'FAIL', note))

    def flag(self, name, ok, seen, note=''):
        self.rows.append((name, seen, '', 'PASS' if ok else 'FAIL', note))

    def info(self, name, seen, note=''):
        self.rows.append((name, seen, '', 'info', note))

    def markdown(self):
        lines = ['| target / figure | measured | goal | verdict | note |', '|---|---|---|---|---|']
        lines += [f"| {r[0]} | {r[1]} | {r[2].replace('>=', '≥').replace('<=', '≤')} | {r[3]} | {r[4]} |"
                  for r in self.rows]
        return '\n'.join(lines) + '\n'

    def print(self):
        widths = [max(len(r[i]) for r in self.rows) for i in range(4)]
        for r in self.rows:
            print(f'{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:<4}  {r[4]}')


def fma1_cpu_of(peak):
    """One core's FMA rate while it runs: the 1-thread peak scaled by wall/CPU time."""
    p1 = peak['BM_FmaPeak/threads:1/real_time']
    return p1['FLOPS'] * p1['seconds'] / p1['cpu_seconds']


def fma_ceiling(peak):
    """The "% of FMA peak" denominator: the 2-thread wall-clock peak, or twice one core's rate while it
    runs (FLOPS scaled by wall/CPU time), whichever is higher: load on the machine cannot lower it."""
    fma1 = peak['BM_FmaPeak/threads:1/real_time']['FLOPS']
    p1 = peak['BM_FmaPeak/threads:1/real_time']
    return fma1, max(peak['BM_FmaPeak/threads:2/real_time']['FLOPS'], 2 * fma1 * p1['seconds'] / p1['cpu_seconds'])


def decay_section(report, bench, fma2, quick, min_time, reps, ggml_gla=None):
    """Issue 12: the decayed family at B=4, H=8, T=16384, K=V=64, 2 threads (quick: T=1024). Chunked
    forward and forward+backward against the best pure-PyTorch chunked formulation (the fastest chunk
    size of scripts/torch_chunked_decay.py, each checked against the recurrence first), % of FMA peak
    counting the chunked algorithm's flops (table/operator_table.cpp), the token-by-token forward
    (fused_recurrent_*), the decode step, and ggml_gated_linear_attn when `ggml_gla` is a program
    printing its JSON timing ({"seconds": forward seconds}) for the same shapes and threads."""
    B, H, T, K, V = 4, 8, 1024 if quick else 16384, 64, 64
    ops = {'Retention': 'retention', 'Lightning': 'lightning', 'SimpleGla': 'simple_gla', 'Gla': 'gla'}
    res = bench('bench_decay', '|'.join(f'BM_{o}Forward(Backward)?/N:{T}/threads:{THREADS}' for o in ops) +
                f'|RecurrentForward/N:{T}/threads:{THREADS}|Step/position:(1024|16384)/')

    def seconds(name):
        return res[f'{name}/real_time']['seconds']

    torch_chunks = (64,) if quick else (32, 64, 128)
    torch_chunked_decay.check(torch_chunks)
    q, k, v = uniform(B, H, T, K), uniform(B, H, T, K), uniform(B, H, T, V)
    dout = uniform(B, H, T, V)
    torch_times = {}
    for short, name in (('SimpleGla', 'simple_gla'), ('Gla', 'gla')):
        fn = torch_chunked_decay.FORMULATIONS[name]
        g = torch_chunked_decay.log_decays(*((B, H, T) if name == 'simple_gla' else (B, H, T, K)))
        leaves = [x.clone().requires_grad_() for x in (q, k, v, g)]

        def fwd_bwd(C):
            for x in leaves:
                x.grad = None
            fn(*leaves, chunk=C)[0].backward(dout)

        fwd, both = {}, {}
        for C in torch_chunks:
            with torch.no_grad():
                fwd[C] = time_torch(lambda C=C: fn(q, k, v, g, chunk=C), min_time, reps)
            both[C] = time_torch(lambda C=C: fwd_bwd(C), min_time, reps)
        torch_times[name] = dict(forward=fwd, forward_backward=both)
        for mode, label, table in (('Forward', 'fwd', fwd), ('ForwardBackward', 'fwd+bwd', both)):
            best = min(table, key=table.get)
            ours = seconds(f'BM_{short}{mode}/N:{T}/threads:{THREADS}')
            report.info(f'7 {name} {label}: linattn / torch chunked', f'{ours * 1e3:.1f} / {table[best] * 1e3:.1f} ms',
                        f'torch best chunk {best}; all: ' + ', '.join(f'C={c} {t * 1e3:.0f}' for c, t in table.items()))
            report.target(f'7 {name} {label} vs pure-PyTorch chunked', table[best] / ours, '>=', 10, 'x')
        report.target(f'7 {name} fwd % of FMA peak (chunked flops)',
                      100 * res[f'BM_{short}Forward/N:{T}/threads:{THREADS}/real_time']['FLOPS'] / fma2, '>=', 40, '%')
    for short in ('Retention', 'Lightning'):
        fwd = res[f'BM_{short}Forward/N:{T}/threads:{THREADS}/real_time']
        both = res[f'BM_{short}ForwardBackward/N:{T}/threads:{THREADS}/real_time']
        report.info(f'7 {ops[short]} fwd / fwd+bwd', f"{fwd['seconds'] * 1e3:.1f} / {both['seconds'] * 1e3:.1f} ms",
                    f"{100 * fwd['FLOPS'] / fma2:.0f}% / {100 * both['FLOPS'] / fma2:.0f}% of FMA peak")
    # The decode step: per token, flat from position 1K to 16K, and against the plain linear step.
    linear = {p: seconds(f'BM_LinearStep/position:{p}/threads:{THREADS}') / 256 for p in (1024, 16384)}
    for short in ('Retention', 'SimpleGla', 'Gla'):
        name = {'Retention': 'retention', 'SimpleGla': 'simple_gla', 'Gla': 'gla'}[short]
        step = {p: seconds(f'BM_{short}Step/position:{p}/threads:{THREADS}') / 256 for p in (1024, 16384)}
        report.target(f'7 {name} step 16K / 1K per token', step[16384] / step[1024], '<=', 1.2, 'x',
                      f'µs per token: {step[1024] * 1e6:.2f} at 1K, {step[16384] * 1e6:.2f} at 16K')
        report.target(f'7 {name} step vs linear recurrent step (16K)', step[16384] / linear[16384], '<=', 1.2, 'x',
                      f'linear step {linear[16384] * 1e6:.2f} µs per token')
    # The token-by-token forward: the recurrence's own flops (5·K·V a token and head), fewer than the chunked.
    for short in ('SimpleGla', 'Gla'):
        rec = res[f'BM_{short}RecurrentForward/N:{T}/threads:{THREADS}/real_time']
        chunked = seconds(f'BM_{short}Forward/N:{T}/threads:{THREADS}')
        report.info(f'7 {ops[short]} token-by-token fwd (fused_recurrent)', f"{rec['seconds'] * 1e3:.1f} ms",
                    f"{chunked / rec['seconds']:.2f}x the chunked fwd; {100 * rec['FLOPS'] / fma2:.0f}% of FMA peak "
                    '(its own flops)')
    # ggml's CPU kernel (token by token), built outside the repository.
    ggml = None
    if ggml_gla:
        ggml = run_ggml(ggml_gla, B, H, T, K, V, THREADS)
        ours = seconds(f'BM_GlaForward/N:{T}/threads:{THREADS}')
        rec = seconds(f'BM_GlaRecurrentForward/N:{T}/threads:{THREADS}')
        report.info('7 gla fwd: linattn chunked / token by token / ggml_gated_linear_attn',
                    f"{ours * 1e3:.1f} / {rec * 1e3:.1f} / {ggml['seconds'] * 1e3:.1f} ms",
                    f'{ggml_gla} {B} {H} {T} {K} {V} {THREADS}')
        # The target compares like with like: ggml's kernel is a token-by-token forward, as fused_recurrent_gla is.
        report.target('7 gla token-by-token fwd vs ggml_gated_linear_attn', ggml['seconds'] / rec, '>=', 3, 'x',
                      'both token by token')
        report.info('7 gla chunked fwd vs ggml_gated_linear_attn', f"{ggml['seconds'] / ours:.3g}x")
    else:
        report.info('7 ggml_gated_linear_attn', 'not measured', 'give --ggml-gla PROGRAM (built outside the repository)')
    return dict(bench=res, torch=torch_times, ggml=ggml)


def delta_torch_times(inputs, chunks, min_time, reps, clock, backward_chunks=None):
    """The pure-PyTorch chunked gated delta rule (q and k l2-normalised in it, as in linattn's rows):
    {chunk: seconds} of the forward (no autograd) and of forward+backward (at backward_chunks, default
    the same chunks)."""
    q, k, v, g, beta, dout = inputs
    fn = torch_chunked_delta.chunk_gated_delta_rule
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta)]

    def fwd_bwd(C):
        for x in leaves:
            x.grad = None
        fn(*leaves, chunk=C, use_qk_l2norm=True)[0].backward(dout)

    fwd, both = {}, {}
    for C in chunks:
        with torch.no_grad():
            fwd[C] = time_torch(lambda C=C: fn(q, k, v, g, beta, chunk=C, use_qk_l2norm=True), min_time, reps, clock)
    for C in backward_chunks or chunks:
        both[C] = time_torch(lambda C=C: fwd_bwd(C), min_time, reps, clock)
    return fwd, both


def run_ggml(program, B, H, T, K, V, threads):
    """ggml's timing (ggml_gated_linear_attn, ggml_gated_delta_net): the last line of the program's output, JSON."""
    out = subprocess.run([program, str(B), str(H), str(T), str(K), str(V), str(threads)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def delta_section(report, bench, fma2, fma1_cpu, quick, min_time, reps, ggml_gdn=None, wall=True, cpu_view=True):
    """Issue 13: the delta rule at B=4, H=8, T=16384, K=V=64 (quick: T=1024), q and k l2-normalised in
    the operator on both sides. The chunked gated delta rule forward and forward+backward against the
    best pure-PyTorch chunked formulation (the fastest chunk size of scripts/torch_chunked_delta.py,
    checked against the recurrence first) on inputs drawn alike (q, k, v uniform in [-1, 1], g =
    logsigmoid(N(0, 1)) / 16, beta = sigmoid(N(0, 1))), % of FMA peak counting the chunked algorithm's
    flops (table/delta_rows.cpp), the decode step from 1K to 64K against the plain linear step, and
    ggml_gated_delta_net when `ggml_gdn` is a program printing its JSON timing ({"seconds": forward
    seconds, "cpu_seconds": ...}) for the same shapes and threads. `wall`: the 2-thread wall-clock
    targets; `cpu_view`: the same comparisons with 1 thread by CPU time (what a loaded machine hardly
    disturbs)."""
    B, H, T, K, V = 4, 8, 1024 if quick else 16384, 64, 64
    positions = (1024, 4096) if quick else (1024, 4096, 16384, 65536)
    ops = {'DeltaRule': 'delta_rule', 'GatedDeltaRule': 'gated_delta_rule', 'Kda': 'kda'}
    threads = ([THREADS] if wall else []) + ([1] if cpu_view else [])
    res = bench('bench_delta', '|'.join(f'BM_{o}(Recurrent)?Forward(Backward)?/N:{T}/threads:({"|".join(map(str, threads))})'
                                        for o in ops) +
                f"|Step/position:({'|'.join(str(p) for p in positions)})/threads:({'|'.join(map(str, threads))})")

    def result(name, n):
        return res[f'{name}/threads:{n}/real_time']

    torch_chunks = (64,) if quick else (32, 64, 128)
    torch_chunked_delta.check(torch_chunks)
    inputs = (uniform(B, H, T, K), uniform(B, H, T, K), uniform(B, H, T, V), torch_chunked_delta.log_decays(B, H, T),
              torch_chunked_delta.betas(B, H, T), uniform(B, H, T, V))
    out = {}
    for n in threads:
        clock, seconds_key = (time.perf_counter, 'seconds') if n == THREADS else (time.process_time, 'cpu_seconds')
        view = f'{n} threads, wall clock' if n == THREADS else '1 thread, CPU time'
        torch.set_num_threads(n)
        if n == THREADS:
            fwd, both = delta_torch_times(inputs, torch_chunks, min_time, reps, clock)
        else:
            fwd, _ = delta_torch_times(inputs, torch_chunks, min_time, reps, clock, backward_chunks=())
            fwd_best = min(fwd, key=fwd.get)
            _, both = delta_torch_times(inputs, (), min_time, reps, clock, backward_chunks=(fwd_best,))
        torch.set_num_threads(THREADS)
        out[n] = dict(forward=fwd, forward_backward=both)
        ceiling = fma2 if n == THREADS else fma1_cpu
        for mode, label, table in (('Forward', 'fwd', fwd), ('ForwardBackward', 'fwd+bwd', both)):
            best = min(table, key=table.get)
            r = result(f'BM_GatedDeltaRule{mode}/N:{T}', n)
            ours = r[seconds_key]
            report.info(f'8 gated_delta_rule {label} ({view}): linattn / torch chunked',
                        f'{ours * 1e3:.1f} / {table[best] * 1e3:.1f} ms',
                        f'torch best chunk {best}; all: ' + ', '.join(f'C={c} {t * 1e3:.0f}' for c, t in table.items()))
            if n == THREADS:
                report.target(f'8 gated_delta_rule {label} vs pure-PyTorch chunked', table[best] / ours, '>=', 10, 'x')
            else:
                report.info(f'8 gated_delta_rule {label} vs pure-PyTorch chunked ({view})', f'{table[best] / ours:.3g}x')
        r = result(f'BM_GatedDeltaRuleForward/N:{T}', n)
        flops = r['FLOPS'] * r['seconds'] / r[seconds_key]  # flops per second of this view's time
        if n == THREADS:
            report.target('8 gated_delta_rule fwd % of FMA peak (chunked flops)', 100 * flops / ceiling, '>=', 30, '%')
        else:
            report.info(f'8 gated_delta_rule fwd % of the 1-thread FMA peak ({view})', f'{100 * flops / ceiling:.0f}%',
                        f'{flops / 1e9:.1f} GFLOP/s of {ceiling / 1e9:.1f}')
        # The token-by-token forward (fused_recurrent_*): the recurrence's own flops.
        for short in ('GatedDeltaRule', 'Kda'):
            rec, chunked = result(f'BM_{short}RecurrentForward/N:{T}', n), result(f'BM_{short}Forward/N:{T}', n)
            report.info(f'8 {ops[short]} token-by-token fwd (fused_recurrent; {view})', f"{rec[seconds_key] * 1e3:.1f} ms",
                        f"{chunked[seconds_key] / rec[seconds_key]:.2f}x the chunked fwd; "
                        f"{100 * rec['FLOPS'] * rec['seconds'] / rec[seconds_key] / ceiling:.0f}% of FMA peak (its own flops)")
        for short in ('DeltaRule', 'Kda'):
            f, fb = result(f'BM_{short}Forward/N:{T}', n), result(f'BM_{short}ForwardBackward/N:{T}', n)
            report.info(f'8 {ops[short]} fwd / fwd+bwd ({view})',
                        f"{f[seconds_key] * 1e3:.1f} / {fb[seconds_key] * 1e3:.1f} ms",
                        f"{100 * f['FLOPS'] * f['seconds'] / f[seconds_key] / ceiling:.0f}% / "
                        f"{100 * fb['FLOPS'] * fb['seconds'] / fb[seconds_key] / ceiling:.0f}% of FMA peak")
        # ggml's CPU kernel (token by token), built outside the repository.
        if ggml_gdn:
            ggml = run_ggml(ggml_gdn, B, H, T, K, V, n)
            ours = result(f'BM_GatedDeltaRuleForward/N:{T}', n)[seconds_key]
            out[n]['ggml'] = ggml
            report.info(f'8 gated_delta_rule fwd ({view}): linattn / ggml_gated_delta_net',
                        f"{ours * 1e3:.1f} / {ggml[seconds_key] * 1e3:.1f} ms", f'{ggml_gdn} {B} {H} {T} {K} {V} {n}')
            report.info(f'8 gated_delta_rule chunked fwd vs ggml_gated_delta_net ({view})',
                        f"{ggml[seconds_key] / ours:.3g}x")
            # The target compares like with like: ggml's kernel is a token-by-token forward, as
            # fused_recurrent_gated_delta_rule is.
            rec = result(f'BM_GatedDeltaRuleRecurrentForward/N:{T}', n)[seconds_key]
            if n == THREADS:
                report.target('8 gated_delta_rule token-by-token fwd vs ggml_gated_delta_net', ggml['seconds'] / rec,
                              '>=', 3, 'x', f'{rec * 1e3:.1f} ms; both token by token')
            else:
                report.info(f'8 gated_delta_rule token-by-token fwd vs ggml_gated_delta_net ({view})',
                            f"{ggml[seconds_key] / rec:.3g}x", f'{rec * 1e3:.1f} ms; both token by token')
        else:
            report.info('8 ggml_gated_delta_net', 'not measured',
                        'give --ggml-gdn PROGRAM (built outside the repository)')
        # The decode step: per token, flat from 1K to 64K, and against the plain linear step.
        linear = {p: result(f'BM_LinearStep/position:{p}', n)[seconds_key] / 256 for p in positions}
        far, near = positions[-1], positions[0]
        for short in ops:
            step = {p: result(f'BM_{short}Step/position:{p}', n)[seconds_key] / 256 for p in positions}
            per_token = 'µs per token: ' + ', '.join(f'{step[p] * 1e6:.2f} at {p // 1024}K' for p in positions)
            flat, versus = step[far] / step[near], step[far] / linear[far]
            if n == THREADS:
                report.target(f'8 {ops[short]} step {far // 1024}K / {near // 1024}K per token', flat, '<=', 1.2, 'x',
                              per_token)
                report.target(f'8 {ops[short]} step vs linear recurrent step ({far // 1024}K)', versus, '<=', 1.5, 'x',
                              f'linear step {linear[far] * 1e6:.2f} µs per token')
            else:
                report.info(f'8 {ops[short]} step {far // 1024}K / {near // 1024}K; vs linear step ({view})',
                            f'{flat:.3g}x; {versus:.3g}x', per_token + f'; linear {linear[far] * 1e6:.2f} at {far // 1024}K')
    return dict(bench=res, torch=out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--build', default='build-bench', help='build directory with the bench programs')
    parser.add_argument('--quick', action='store_true', help='small shapes, one repetition: a smoke test')
    parser.add_argument('--repetitions', type=int, default=None, help='repetitions per figure (default 3, quick 1)')
    parser.add_argument('--min-time', type=float, default=None, help='seconds per timed batch (default 0.5)')
    parser.add_argument('--memory-n', type=int, default=None, help='N of the peak-memory probe (default 65536)')
    parser.add_argument('--json', help='also write every figure to this file')
    parser.add_argument('--markdown', help='also write the table, as markdown, to this file')
    parser.add_argument('--no-cpu-view', dest='cpu_view', action='store_false',
                        help='skip the 1-thread CPU-time comparisons (a view that load on the machine hardly disturbs)')
    parser.add_argument('--no-performer', dest='performer', action='store_false',
                        help='skip the Performer / Linformer figures (not targets of issue 3)')
    parser.add_argument('--no-decay', dest='decay', action='store_false',
                        help="skip issue 12's section 7 (the decayed family)")
    parser.add_argument('--only-decay', action='store_true',
                        help="only the FMA peak and issue 12's section 7 (the decayed family)")
    parser.add_argument('--no-delta', dest='delta', action='store_false',
                        help="skip issue 13's section 8 (the delta rule)")
    parser.add_argument('--only-delta', action='store_true',
                        help="only the FMA peak and issue 13's section 8 (the delta rule)")
    parser.add_argument('--cpu-view-only', dest='wall', action='store_false',
                        help="section 8 with --only-delta: only the 1-thread CPU-time view (a loaded machine)")
    parser.add_argument('--ggml-gla', help="section 7: a program timing ggml_gated_linear_attn (args B H T K V "
                        'threads; prints JSON with "seconds"), built outside the repository')
    parser.add_argument('--ggml-gdn', help="section 8: a program timing ggml_gated_delta_net (args B H T K V "
                        'threads; prints JSON with "seconds"), built outside the repository')
    args = parser.parse_args()
    quick = args.quick
    reps = args.repetitions or (1 if quick else 3)
    min_time = args.min_time or (0.05 if quick else 0.5)
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    report = Report()
    for line in context_line():
        print(line)
    t_start = time.time()

    # Shapes (issue 3), reduced with --quick.
    B, H, D, E = 4, 8, 64, 64
    N_lin = 1024 if quick else 16384
    N_soft = 1024 if quick else 4096
    ctx = 16384 if quick else 65536
    positions = [1024, 4096] if quick else [1024, 4096, 16384, 65536]
    N_mem = args.memory_n or (8192 if quick else 65536)

    def bench(program, regex):
        return run_benchmarks(args.build, program, regex, min_time, reps)

    # 0. The machine's ceilings, first and again last (the better of the two is the ceiling).
    peak = bench('bench_peak', '.')
    if args.only_delta:
        delta = delta_section(report, bench, fma_ceiling(peak)[1], fma1_cpu_of(peak), quick, min_time, reps,
                              args.ggml_gdn, wall=args.wall, cpu_view=args.cpu_view)
        print(f"\nissue 13 targets ({'QUICK: reduced shapes, not the targets' if quick else 'full shapes'}; "
              f'{reps} repetitions, min_time {min_time}s; {time.time() - t_start:.0f} s):')
        report.print()
        print(f'load average at the end: {os.getloadavg()[0]:.2f}')
        if args.markdown:
            with open(args.markdown, 'w') as f:
                f.write(report.markdown())
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(dict(rows=report.rows, peak=peak, delta=delta), f, indent=1, default=str)
        return 0
    if args.only_decay:
        decay = decay_section(report, bench, fma_ceiling(peak)[1], quick, min_time, reps, args.ggml_gla)
        print(f"\nissue 12 targets ({'QUICK: reduced shapes, not the targets' if quick else 'full shapes'}; "
              f'{reps} repetitions, min_time {min_time}s; {time.time() - t_start:.0f} s):')
        report.print()
        print(f'load average at the end: {os.getloadavg()[0]:.2f}')
        if args.markdown:
            with open(args.markdown, 'w') as f:
                f.write(report.markdown())
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(dict(rows=report.rows, peak=peak, decay=decay), f, indent=1, default=str)
        return 0
    lin = bench('bench_linear', f'BM_Linear(Forward|Backward)/N:{N_lin}/')
    causal = bench('bench_causal', f'BM_Causal(Forward|Backward)/N:{N_lin}/|BM_PrefixSum(Forward|Backward)/N:{N_lin}/')
    # The linear operators again on [B, N, H, D] storage (registered at N = 16384 only).
    native = {} if quick else {**bench('bench_linear', f'Bnhd/N:{N_lin}/threads:2'),
                               **bench('bench_causal', f'Bnhd/N:{N_lin}/threads:2')}
    soft = bench('bench_softmax', f'BM_SoftmaxForwardBackward/N:{N_soft}/|BM_SoftmaxForward/N:{N_soft}/threads:2|'
                                  f'BM_SoftmaxDecode/context:{ctx}/')
    rec = bench('bench_recurrent', '|'.join(f'position:{p}/' for p in positions))
    cross = run_benchmarks(args.build, 'bench_crossover', '/N:(32|64|128|256|512|1024)/' if quick else '.',
                           min(min_time, 0.2), reps)
    perf = bench('bench_performer', f'/N:{N_soft}/(causal:[01]/)?threads:2') if args.performer else {}
    peak2 = bench('bench_peak', 'FmaPeak/')
    for name, r in peak2.items():
        if r['seconds'] < peak[name]['seconds']:
            peak[name] = r

    def sec(results, name):
        return results[f'{name}/real_time']['seconds']

    def flops(results, name):
        return results[f'{name}/real_time']['FLOPS']

    fma1, fma2 = fma_ceiling(peak)
    triad2 = peak['BM_StreamTriad/threads:2/real_time']['bytes_per_second']
    report.info('machine: fp32 FMA peak, 1 / 2 threads', f'{fma1 / 1e9:.0f} / {fma2 / 1e9:.0f} GFLOP/s',
                peak['BM_FmaPeak/threads:1/real_time'].get('label', '') +
                f"; 2-thread wall clock {flops(peak, 'BM_FmaPeak/threads:2') / 1e9:.0f}")
    report.info('machine: stream triad, 1 / 2 threads',
                f"{peak['BM_StreamTriad/threads:1/real_time']['bytes_per_second'] / 1e9:.1f} / {triad2 / 1e9:.1f} GB/s")

    # 1. Non-causal forward vs the seed and the best plain PyTorch, and % of peak.
    q, k, v = uniform(B, H, N_lin, D), uniform(B, H, N_lin, D), uniform(B, H, N_lin, E)
    # The seed's layout is [n = sequence, l = independent problems, d]: here l = B·H.
    qs, ks, vs = (x.permute(2, 0, 1, 3).reshape(N_lin, B * H, -1).contiguous() for x in (q, k, v))
    with torch.no_grad():
        t_seed_lin = time_torch(lambda: linear_attention(qs, ks, vs), min_time, reps)
        plain = {name: time_torch(lambda f=f: f(q, k, v), min_time, reps) for name, f in PLAIN.items()}
        # Every formulation must compute the seed's function, or its time means nothing.
        want = linear_attention(qs, ks, vs).reshape(N_lin, B, H, E).permute(1, 2, 0, 3)
        for name, f in PLAIN.items():
            err = ((f(q, k, v) - want).abs().max() / want.abs().max()).item()
            if err > 1e-4:
                raise SystemExit(f'plain formulation {name} differs from the seed: relative error {err:.2e}')
    best_plain = min(plain, key=plain.get)
    t_lin = sec(lin, f'BM_LinearForward/N:{N_lin}/threads:2')
    report.info('1 linear fwd: linattn / seed / best plain torch',
                f'{t_lin * 1e3:.1f} / {t_seed_lin * 1e3:.1f} / {plain[best_plain] * 1e3:.1f} ms',
                f'best plain = {best_plain}; all: ' + ', '.join(f'{n} {t * 1e3:.1f}' for n, t in plain.items()))
    report.target('1 linear fwd vs seed linear_attention', t_seed_lin / t_lin, '>=', 8, 'x')
    report.target('1 linear fwd vs best plain torch', plain[best_plain] / t_lin, '>=', 5, 'x')
    report.target('1 linear fwd % of FMA peak (2 thr)',
                  100 * flops(lin, f'BM_LinearForward/N:{N_lin}/threads:2') / fma2, '>=', 60, '%')
    report.info('1 linear bwd: time, % of FMA peak',
                f"{sec(lin, f'BM_LinearBackward/N:{N_lin}/threads:2') * 1e3:.1f} ms, "
                f"{100 * flops(lin, f'BM_LinearBackward/N:{N_lin}/threads:2') / fma2:.0f}%")

    # 2. Causal forward and backward vs the prefix-sum baseline, and % of peak.
    for direction, short in (('Forward', 'fwd'), ('Backward', 'bwd')):
        t_ours = sec(causal, f'BM_Causal{direction}/N:{N_lin}/threads:2')
        t_base = sec(causal, f'BM_PrefixSum{direction}/N:{N_lin}/threads:2')
        report.info(f'2 causal {short}: linattn / prefix-sum', f'{t_ours * 1e3:.1f} / {t_base * 1e3:.1f} ms',
                    f"prefix-sum at {100 * flops(causal, f'BM_PrefixSum{direction}/N:{N_lin}/threads:2') / fma2:.0f}% "
                    'of peak (its own flops)')
        report.target(f'2 causal {short} vs prefix-sum baseline', t_base / t_ours, '>=', 4, 'x')
        # Judged on the smaller of the chunked algorithm's count and what the kernels multiply: the
        # forward's strips skip part of each chunk's triangle (table/operator_table.cpp); the backward's count
        # is already below what its kernels multiply.
        r = causal[f'BM_Causal{direction}/N:{N_lin}/threads:2/real_time']
        counted = r['FLOPS']
        executed = min(counted, r.get('FLOPS_executed', counted))
        report.target(f'2 causal {short} % of FMA peak (chunked flops)', 100 * executed / fma2, '>=', 40, '%',
                      f'counting full chunk tiles: {100 * counted / fma2:.1f}%' if executed < counted else '')

    for op, label in (('LinearForward', 'linear fwd'), ('LinearBackward', 'linear bwd'),
                      ('CausalForward', 'causal fwd'), ('CausalBackward', 'causal bwd')):
        if native:
            name = f'BM_{op}Bnhd/N:{N_lin}/threads:2'
            report.info(f'  {label} on [B,N,H,D] storage: time, % of peak',
                        f'{sec(native, name) * 1e3:.1f} ms, {100 * flops(native, name) / fma2:.0f}%',
                        "the targets' shape on the library's logical layout (the targets use [B,H,N,D], as PyTorch)")

    # 3. Softmax forward + backward vs the seed with autograd; peak memory of the forward.
    qa, ka, va = (uniform(1, H, N_soft, D).requires_grad_() for _ in range(3))
    g = uniform(1, H, N_soft, E)

    def seed_fwd_bwd():
        for x in (qa, ka, va):
            x.grad = None
        standard_attention(qa, ka, va).backward(g)

    t_seed_soft = time_torch(seed_fwd_bwd, min_time, reps)
    t_soft = sec(soft, f'BM_SoftmaxForwardBackward/N:{N_soft}/threads:2')
    report.info('3 softmax fwd+bwd: linattn / seed autograd', f'{t_soft * 1e3:.0f} / {t_seed_soft * 1e3:.0f} ms',
                f"linattn fwd+bwd at {100 * flops(soft, f'BM_SoftmaxForwardBackward/N:{N_soft}/threads:2') / fma2:.0f}% "
                f"of peak, fwd alone {100 * flops(soft, f'BM_SoftmaxForward/N:{N_soft}/threads:2') / fma2:.0f}%")
    report.target('3 softmax fwd+bwd vs seed standard_attention', t_seed_soft / t_soft, '>=', 3, 'x')
    probe = subprocess.run([os.path.join(args.build, 'bench', 'softmax_peak_memory'), str(N_mem), str(H), str(D),
                            str(THREADS)], check=True, capture_output=True, text=True).stdout
    mem = json.loads(probe)
    peak_bytes, start_bytes = mem['peak_rss_kib'] * 1024, mem['rss_start_kib'] * 1024
    report.target(f'3 softmax fwd N={N_mem} peak RSS / bytes(q,k,v,out)', peak_bytes / mem['qkvo_bytes'], '<=', 3,
                  'x', f"whole process (VmHWM); above the tensors: {(peak_bytes - mem['rss_after_alloc_kib'] * 1024) / 2**20:.1f} MiB, "
                  f"at start {start_bytes / 2**20:.1f} MiB; forward took {mem['forward_seconds']:.1f} s")
    report.data['memory'] = mem

    # 4. Recurrent step: flat per-token time, and vs softmax decoding against a KV cache.
    for threads in (2, 1):
        per_token = {p: sec(rec, f'BM_RecurrentStep/position:{p}/threads:{threads}') / 256 for p in positions}
        spread = max(per_token.values()) / min(per_token.values())
        detail = ', '.join(f'{p}: {t * 1e6:.2f}' for p, t in per_token.items())
        if threads == THREADS:
            report.target(f'4 recurrent step max/min per token {positions[0]}..{positions[-1]} ({threads} thr)', spread,
                          '<=', 1.2, 'x', f'µs per token at ' + detail)
            t_step = per_token[positions[-1]]
        else:
            report.info(f'4 recurrent step max/min per token ({threads} thr)', f'{spread:.3g}x', f'µs per token at ' + detail)
    t_decode = sec(soft, f'BM_SoftmaxDecode/context:{ctx}/threads:2')
    report.info(f'4 step vs KV-cache decode at {ctx}, 1 thread',
                f"{sec(soft, f'BM_SoftmaxDecode/context:{ctx}/threads:1') / (sec(rec, f'BM_RecurrentStep/position:{positions[-1]}/threads:1') / 256):.3g}x")
    report.target(f'4 recurrent step vs softmax KV-cache decode at {ctx}', t_decode / t_step, '>=', 100, 'x',
                  f'linattn softmax forward Nq=1 (C++): {t_decode * 1e6:.0f} µs/token vs step {t_step * 1e6:.2f} µs')
    qd, kd, vd = uniform(1, H, 1, D), uniform(1, H, ctx, D), uniform(1, H, ctx, E)
    with torch.no_grad():
        t_torch_decode = time_torch(lambda: standard_attention(qd, kd, vd), min_time, reps)
    report.info(f'4 torch seed standard_attention decode at {ctx}', f'{t_torch_decode * 1e6:.0f} µs/token')

    # 5. Threads: 2 vs 1 on targets 1-3, and bitwise determinism.
    pairs = [('1 linear fwd', lin, f'BM_LinearForward/N:{N_lin}'),
             ('2 causal fwd', causal, f'BM_CausalForward/N:{N_lin}'),
             ('2 causal bwd', causal, f'BM_CausalBackward/N:{N_lin}'),
             ('3 softmax fwd+bwd', soft, f'BM_SoftmaxForwardBackward/N:{N_soft}')]
    for label, results, name in pairs:
        report.target(f'5 threads 2 vs 1: {label}', sec(results, f'{name}/threads:1') / sec(results, f'{name}/threads:2'),
                      '>=', 1.7, 'x')
    det = subprocess.run([os.path.join(args.build, 'bench', 'determinism_check')] + (['--quick'] if quick else []),
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in det.splitlines() if line.strip()]
    verdicts = [v for v in lines if 'op' in v]
    for a in (v for v in lines if 'agreement' in v):
        report.info(f"  agreement: {a['agreement']} at the target shape", f"{a['forward']:.2g} / {a['backward']:.2g}",
                    'max relative difference, forward / backward (both fp32)')
    bad = [v['op'] for v in verdicts if not (v['threads_1_vs_2'] and v['runs_2_vs_2'])]
    report.flag('5 bitwise identical, 1 vs 2 threads and run vs run', not bad,
                f'{len(verdicts) - len(bad)}/{len(verdicts)} ops', 'differ: ' + ', '.join(bad) if bad else
                ', '.join(v['op'] for v in verdicts))
    report.data['determinism'] = verdicts

    # 6. Crossover: the smallest N from which linear stays faster than exact softmax (forwards, D = 64).
    # Judged at 2 threads by wall time; 1 thread by CPU time as information.
    ns = sorted({int(name.split('/N:')[1].split('/')[0]) for name in cross})
    for threads in (2, 1):
        for causal_flag in (0, 1):
            key = 'seconds' if threads == 2 else 'cpu_seconds'
            t = {kind: {n: cross[f'BM_Crossover{kind}/N:{n}/causal:{causal_flag}/threads:{threads}/real_time'][key]
                        for n in ns} for kind in ('Linear', 'Softmax')}
            crossover = None
            for n in reversed(ns):
                if t['Linear'][n] >= t['Softmax'][n]:
                    break
                crossover = n
            detail = 'softmax/linear time at N ' + ', '.join(f"{n}: {t['Softmax'][n] / t['Linear'][n]:.2f}" for n in ns)
            label = f"6 crossover N ({'causal' if causal_flag else 'non-causal'}, fwd, B=1 H=8, {threads} thr)"
            seen = f'> {ns[-1]}' if crossover is None else str(crossover)
            if threads == 1:
                report.info(label + ' CPU time', seen, detail)
            elif crossover is None:
                report.flag(label, False, seen, detail)
            else:
                report.target(label, crossover, '<=', 512, '', detail)

    # The same comparisons with 1 thread, by CPU time: on a loaded machine the wall clock of a 2-thread run
    # waits for the other thread's time slices, while a 1-thread run's CPU time is the work it needed.
    if args.cpu_view:
        torch.set_num_threads(1)
        cpu = time.process_time

        def cpu_sec(results, name):
            return results[f'{name}/threads:1/real_time']['cpu_seconds']

        with torch.no_grad():
            seed1 = time_torch(lambda: linear_attention(qs, ks, vs), min_time, reps, cpu)
            plain1 = min(time_torch(lambda f=f: f(q, k, v), min_time, reps, cpu) for f in PLAIN.values())
        soft1 = time_torch(seed_fwd_bwd, min_time, reps, cpu)
        torch.set_num_threads(THREADS)
        peak1 = peak['BM_FmaPeak/threads:1/real_time']
        fma1_cpu = peak1['FLOPS'] * peak1['seconds'] / peak1['cpu_seconds']
        lin1 = cpu_sec(lin, f'BM_LinearForward/N:{N_lin}')
        lin1_flops = flops(lin, f'BM_LinearForward/N:{N_lin}/threads:1') * sec(lin, f'BM_LinearForward/N:{N_lin}/threads:1')
        report.info('1-thread CPU time: linear fwd vs seed / best plain',
                    f'{seed1 / lin1:.3g}x / {plain1 / lin1:.3g}x',
                    f'{100 * lin1_flops / lin1 / fma1_cpu:.0f}% of the 1-thread peak ({fma1_cpu / 1e9:.0f} GFLOP/s by CPU time)')
        report.info('1-thread CPU time: causal fwd / bwd vs prefix-sum',
                    f"{cpu_sec(causal, f'BM_PrefixSumForward/N:{N_lin}') / cpu_sec(causal, f'BM_CausalForward/N:{N_lin}'):.3g}x / "
                    f"{cpu_sec(causal, f'BM_PrefixSumBackward/N:{N_lin}') / cpu_sec(causal, f'BM_CausalBackward/N:{N_lin}'):.3g}x")
        report.info('1-thread CPU time: softmax fwd+bwd vs seed autograd',
                    f"{soft1 / cpu_sec(soft, f'BM_SoftmaxForwardBackward/N:{N_soft}'):.3g}x")

    # 7. Issue 12: the decayed family.
    decay = decay_section(report, bench, fma2, quick, min_time, reps, args.ggml_gla) if args.decay else {}

    # 8. Issue 13: the delta rule.
    delta = delta_section(report, bench, fma2, fma1_cpu_of(peak), quick, min_time, reps, args.ggml_gdn,
                          cpu_view=args.cpu_view) if args.delta else {}

    # Performer and Linformer, B = 4, H = 8, D = 64 (figures, not targets).
    for name, r in sorted(perf.items()):
        label = name.replace('/real_time', '').replace('BM_', '')
        report.info(f'  {label}', f"{r['seconds'] * 1e3:.1f} ms", f"{100 * r['FLOPS'] / fma2:.0f}% of FMA peak")

    print(f"\nissue 3 targets ({'QUICK: reduced shapes, not the targets' if quick else 'full shapes'}; "
          f'{reps} repetitions, min_time {min_time}s; {time.time() - t_start:.0f} s):')
    report.print()
    print(f'load average at the end: {os.getloadavg()[0]:.2f}')
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(report.markdown())
    if args.json:
        report.data.update(rows=report.rows, peak=peak, linear=lin, causal=causal, softmax=soft, recurrent=rec,
                           crossover=cross, performer=perf, decay=decay, delta=delta, torch=dict(seed_linear=t_seed_lin, plain=plain, seed_softmax=t_seed_soft,
                                                       seed_decode=t_torch_decode))
        with open(args.json, 'w') as f:
            json.dump(report.data, f, indent=1, default=str)
    return 0


if __name__ == '__main__':
    sys.exit(main())
