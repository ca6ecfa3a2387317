"""linattn against PyTorch in one run: B=1, H=8, D=64, N = 256 … 16384, causal and not.

    python scripts/torch_sdpa_speed.py [--max-n 16384] [--repeats 3]

- softmax, forward and forward + backward: linattn.torch.scaled_dot_product_attention against
  torch.nn.functional.scaled_dot_product_attention (float32 on the CPU: torch's flash kernel);
- linear attention (elu + 1): linattn.torch.linear_dot_product_attention against a torch.compile'd
  torch formulation: φ(q)(φ(k)ᵀv) non-causal, chunked (64 tokens: a state carried between chunks,
  a masked product inside) when causal.
Each line: the best of --repeats times for both and their ratio (torch / linattn: > 1 means linattn
is faster). Run it on a quiet machine; the load average is printed first.
"""

import argparse
import os
import time

import linattn  # noqa: F401  (before torch: OMP_WAIT_POLICY)
import linattn.torch as lt
import torch
import torch.nn.functional as F


def best(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def phi(x):
    return F.elu(x) + 1


def torch_linear(q, k, v, eps=1e-6):
    """[B, H, N, D]: φ(q)(φ(k)ᵀv) / (φ(q)·Σφ(k) + eps)."""
    fq, fk = phi(q), phi(k)
    kv = fk.transpose(-2, -1) @ v
    return (fq @ kv) / (fq @ fk.sum(-2, keepdim=True).transpose(-2, -1) + eps)


def torch_causal_linear(q, k, v, eps=1e-6, chunk=64):
    """[B, H, N, D], N a multiple of chunk: causal linear attention, chunk by chunk."""
    B, H, N, D = q.shape
    fq, fk = (phi(x).view(B, H, N // chunk, chunk, D) for x in (q, k))
    vc = v.view(B, H, N // chunk, chunk, v.shape[-1])
    kv = fk.transpose(-2, -1) @ vc                            # per chunk [.., D, E]
    z = fk.sum(-2)                                            # per chunk [.., D]
    kv_before = kv.cumsum(2) - kv                             # the state before each chunk
    z_before = z.cumsum(2) - z
    mask = torch.ones(chunk, chunk, dtype=q.dtype).tril()
    scores = (fq @ fk.transpose(-2, -1)) * mask
    num = fq @ kv_before + scores @ vc
    den = (fq * z_before.unsqueeze(-2)).sum(-1, keepdim=True) + scores.sum(-1, keepdim=True) + eps
    return (num / den).view(B, H, N, v.shape[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-n", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, linattn {linattn.__version__}, threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    compiled = {False: torch.compile(torch_linear), True: torch.compile(torch_causal_linear)}
    B, H, D = 1, 8, 64
    n = 256
    while n <= args.max_n:
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(B, H, n, D, generator=g) * 0.5 for _ in range(3))
        for causal in (False, True):
            rows = []
            for name, ours, theirs in (
                ("softmax fwd", lambda: lt.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                ("linear fwd", lambda: lt.linear_dot_product_attention(q, k, v, is_causal=causal),
                 lambda: compiled[causal](q, k, v)),
            ):
                rows.append((name, best(ours, args.repeats), best(theirs, args.repeats)))
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            rows.append(("softmax fwd+bwd",
                         best(lambda: lt.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).sum().backward(),
                              args.repeats),
                         best(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).sum().backward(),
                              args.repeats)))
            for name, ours, theirs in rows:
                print(f"N={n:6d} causal={causal!s:5} {name:16s} linattn {ours * 1e3:10.2f} ms  torch "
                      f"{theirs * 1e3:10.2f} ms  ratio {theirs / ours:6.2f}", flush=True)
        n *= 2


if __name__ == "__main__":
    main()
