#!/usr/bin/env python3
"""The PyTorch side of `fusejit_bench --overhead`: the host time of calling the same 10-op
elementwise chain on 1,024 floats, in eager mode (ten kernels) and under torch.compile (one
kernel after warm-up). The figure is the wall-clock time of the call on the host, median of
2,000 calls; the GPU work is waited for between calls, untimed, as the fusejit side does.
Prints one line per workload, `<name> <eager_us> <compile_us>`, which
`fusejit_bench --overhead --torch FILE` prints next to its own figures.
"""
import statistics
import sys
import time

import torch

ITERS = 2000
ELEMS = 1024


def chain(x, ops=10):
    """bench/overhead.cpp's chain: unary ops alternating with a binary op with x."""
    y = x
    steps = [torch.exp, lambda y: y * x, torch.tanh, lambda y: y + x, torch.sigmoid,
             lambda y: y - x, torch.relu, lambda y: y * x, torch.sin, lambda y: y + x]
    for i in range(ops):
        y = steps[i % 10](y)
    return y


def host_us(fn, x):
    for _ in range(ITERS // 10):  # warm-up (and torch.compile's compile)
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        fn(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        times.append((t1 - t0) * 1e6)
    return statistics.median(times)


def main():
    if not torch.cuda.is_available():
        print("torch_overhead.py: no GPU", file=sys.stderr)
        return 1
    x = torch.full((ELEMS,), 0.5, device="cuda")
    with torch.no_grad():
        eager = host_us(chain, x)
        compiled = host_us(torch.compile(chain), x)
    print(f"eval_10_op_chain {eager:.2f} {compiled:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
