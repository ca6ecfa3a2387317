"""A training step of a small attention model with torch and linattn on 1 and on 2 threads.

    python scripts/torch_threads_step.py [--steps 20]

linattn is imported before torch, so its default OMP_WAIT_POLICY=PASSIVE reaches the shared OpenMP
runtime (run with OMP_WAIT_POLICY=active to see spinning). Prints the median and the range of the
step times in ms for each thread count (docs/pytorch.md "Threads").
"""

import argparse
import os
import statistics
import time

import linattn  # noqa: F401  (first: the wait policy is read when OpenMP loads)
import linattn.torch as lt
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        y = lt.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(Block(256, 8), Block(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.tokens, 256)
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, B={args.batch}, N={args.tokens}, "
          f"d_model=256, 2 blocks, os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    for threads in (1, 2, 1, 2):
        torch.set_num_threads(threads)
        times = []
        for _ in range(args.steps + 2):
            start = time.perf_counter()
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            times.append(time.perf_counter() - start)
        times = sorted(t * 1e3 for t in times[2:])
        print(f"threads {threads} (linattn {linattn.num_threads()}): median {statistics.median(times):7.1f} ms, "
              f"min {times[0]:7.1f}, max {times[-1]:7.1f}")


if __name__ == "__main__":
    main()
