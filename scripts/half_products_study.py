#!/usr/bin/env python3
"""What bf16 products would cost in accuracy: issue 14's criterion applied to the roundings they need.

AVX512_BF16's vdpbf16ps multiplies bf16 operands only. Where an operand of a product is not a bf16
value (φ(k), φ(q), S in linear attention; the probabilities P and the score gradients dS in softmax)
a kernel built on it must round that operand to bf16 first. This study emulates those roundings in
PyTorch and measures them with the criterion of tests/half_precision_test.cpp: on the same rounded
inputs, the error against an fp64 oracle (max |got - want| / max |want|) of the half path at most 2x
the error of the baseline (fp32 arithmetic on the rounded inputs, outputs rounded to bf16).

It prints, per variant, the worst ratio over the tests' awkward shapes (N 1, 63, 65, 97, 2100; head
dims 3 to 64; causal and not) and a few seeds, and the shape where it happened. The variants:

  softmax P, dS  flash-attention's kernels: P rounded before P·V and Pᵀ·dO, dS before dS·K and dSᵀ·Q
                 (then every product of the forward and backward has bf16 operands)
  linear φ(k)    the key-side product φ(k)ᵀv on bf16 φ(k) (half the linear forward's products)
  linear φ(k), φ(q), S   every product of the linear forward on bf16 operands

Examples:
  build/venv/bin/python scripts/half_products_study.py
  build/venv/bin/python scripts/half_products_study.py --seeds 20 --inputs normal
"""
import argparse

import torch


def bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def relative_error(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def softmax(q, k, v, do, dtype, round_p_ds, causal):
    """Forward and backward of one head, q [Nq, D], k [Nk, D], v [Nk, E], do [Nq, E]; out saved in bf16."""
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))
    nq, nk, d = q.shape[0], k.shape[0], q.shape[1]
    s = q @ k.T / d**0.5
    if causal:  # bottom-right aligned, as linattn's causal softmax
        s = s.masked_fill(~torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq), float("-inf"))
    m = s.max(1, keepdim=True).values
    unnormalised = torch.exp(s - m)
    l = unnormalised.sum(1, keepdim=True)
    out = ((bf16(unnormalised) if round_p_ds else unnormalised) @ v) / l
    saved = bf16(out) if dtype == torch.float32 else out
    p = torch.exp(s - (m + torch.log(l)))
    dv = (bf16(p) if round_p_ds else p).T @ do
    ds = p * (do @ v.T - (do * saved).sum(1, keepdim=True)) / d**0.5
    ds = bf16(ds) if round_p_ds else ds
    return out, ds @ k, ds.T @ q, dv


def linear(q, k, v, dtype, rounded):
    """Non-causal elu+1 linear attention, forward; `rounded` names the operands rounded to bf16."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    phi = lambda x: torch.nn.functional.elu(x) + 1
    fq, fk = phi(q), phi(k)
    if "k" in rounded:
        fk = bf16(fk)
    if "q" in rounded:
        fq = bf16(fq)
    state, z = fk.T @ v, fk.sum(0)
    if "S" in rounded:
        state = bf16(state)
    return (fq @ state) / (fq @ z)[:, None]


def ratio(got32, base32, want):
    base = relative_error(bf16(base32), want)
    return relative_error(bf16(got32), want) / base if base > 0 else 1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=4, help="draws per shape (default 4)")
    parser.add_argument("--inputs", choices=("uniform", "normal"), default="uniform",
                        help="uniform in [-1, 1] (the tests' draws, default) or standard normal")
    args = parser.parse_args()
    if args.inputs == "uniform":
        draw = lambda *shape: bf16(torch.rand(*shape, dtype=torch.float32) * 2 - 1)
    else:
        draw = lambda *shape: bf16(torch.randn(*shape, dtype=torch.float32))
    worst = {}

    def record(name, r, where):
        if r > worst.get(name, (0, ""))[0]:
            worst[name] = (r, where)

    softmax_shapes = [(63, 63, 17, 17, False), (97, 65, 8, 12, True), (1, 1, 5, 3, False), (1, 97, 16, 16, False),
                      (5, 2100, 24, 9, True), (2, 65, 64, 64, False), (256, 256, 64, 64, True), (65, 65, 3, 3, True)]
    linear_shapes = [(1, 1, 1), (63, 3, 5), (65, 4, 4), (97, 8, 8), (65, 17, 33), (1024, 16, 16), (4096, 64, 64)]
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        for nq, nk, d, e, causal in softmax_shapes:
            for q_scale in (1.0, 8.0):  # 8: peaked probabilities
                q, k, v, do = bf16(draw(nq, d) * q_scale), draw(nk, d), draw(nk, e), draw(nq, e)
                want = softmax(q, k, v, do, torch.float64, False, causal)
                base = softmax(q, k, v, do, torch.float32, False, causal)
                got = softmax(q, k, v, do, torch.float32, True, causal)
                where = f"N {nq}x{nk} D {d} E {e}{' causal' if causal else ''} q x{q_scale:g} seed {seed}"
                for name, g, b, w in zip(("out", "dq", "dk", "dv"), got, base, want):
                    record(f"softmax P, dS rounded: {name}", ratio(g, b, w), where)
        for n, d, e in linear_shapes:
            q, k, v = draw(n, d), draw(n, d), draw(n, e)
            want, base = linear(q, k, v, torch.float64, ""), linear(q, k, v, torch.float32, "")
            for rounded, name in (("k", "linear φ(k) rounded"), ("kqS", "linear φ(k), φ(q), S rounded")):
                record(name, ratio(linear(q, k, v, torch.float32, rounded), base, want),
                       f"N {n} D {d} E {e} seed {seed}")
    print(f"{'variant':<38} {'worst ratio':>11}  (criterion: <= 2)  where")
    for name, (r, where) in worst.items():
        print(f"{name:<38} {r:>11.3f}  {'breaks it' if r > 2 else 'within':<18} {where}")


if __name__ == "__main__":
    main()
