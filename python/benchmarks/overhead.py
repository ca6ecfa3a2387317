"""What the Python layer costs: per-call overhead on tiny inputs, and one long-sequence shape against
PyTorch's own math in the same run (ratios, since this machine's absolute times drift).

Run: PYTHONPATH=build/python /usr/bin/python3 python/benchmarks/overhead.py
"""

import time

import numpy as np
import torch

import linattn
import linattn.torch as lt


def best(f, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    torch.set_num_threads(2)
    linattn.set_num_threads(2)
    x = np.ones((1, 1, 1, 1), np.float32)
    t = torch.ones(1, 1, 1, 1, requires_grad=True)
    call = best(lambda: linattn.softmax_attention(x, x, x), 2000)
    print(f"numpy call, [1,1,1,1] softmax:         {call * 1e6:8.1f} us")
    print(f"torch forward+backward, [1,1,1,1]:     "
          f"{best(lambda: lt.softmax_attention(t, t, t, layout="bnhd").sum().backward(), 500) * 1e6:8.1f} us")

    B, N, H, D = 1, 4096, 8, 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, N, H, D)).astype(np.float32) for _ in range(3))
    bhnd = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for a in (q, k, v)]
    tq, tk, tv = (torch.from_numpy(a).transpose(1, 2) for a in (q, k, v))

    def torch_softmax():
        return torch.softmax(tq @ tk.transpose(-1, -2) / D**0.5, -1) @ tv

    def torch_linear():
        fq, fk = torch.nn.functional.elu(tq) + 1, torch.nn.functional.elu(tk) + 1
        return (fq @ (fk.transpose(-1, -2) @ tv)) / (fq @ fk.sum(-2)[..., None] + 1e-6)

    rows = [
        ("softmax, [B,N,H,D] arrays", lambda: linattn.softmax_attention(q, k, v), 3),
        ("softmax, [B,H,N,D] memory (view)", lambda: linattn.softmax_attention(*bhnd), 3),
        ("softmax, torch math", torch_softmax, 3),
        ("linear elu, [B,N,H,D] arrays", lambda: linattn.linear_attention(q, k, v), 10),
        ("linear elu, [B,H,N,D] memory (view)", lambda: linattn.linear_attention(*bhnd), 10),
        ("linear elu, torch math", torch_linear, 10),
    ]
    print(f"\nB={B} N={N} H={H} D={D}, 2 threads, best of n:")
    for name, f, n in rows:
        print(f"  {name:38s} {best(f, n) * 1e3:9.1f} ms")


if __name__ == "__main__":
    main()
