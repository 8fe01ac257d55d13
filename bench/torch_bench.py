#!/usr/bin/env python3
"""Times the seed workloads in PyTorch eager and under torch.compile, at the sizes of
examples/traces/, for comparison with fusejit_bench in the same device call.

Prints one line per workload: `<workload>_<dtype> <eager_ms> <compile_ms>` (medians of CUDA-event
timed runs after warm-up). Usage: torch_bench.py [--only NAME,...] > torch.tsv
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def workloads():
    def ew_chain(x, w, b):
        return torch.relu(x * w + b)

    def long_chain(x, w, b):
        return torch.tanh(torch.sigmoid(x * w + b) * x) * 0.5 + torch.sqrt(torch.abs(w - b))

    def bias_gelu(x, b, w):
        return F.gelu(x + b) * w

    def sumsq(x):
        return (x * x).sum(-1)

    def naive_softmax(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def softmax(x):
        return torch.softmax(x, -1)

    def layernorm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)

    def add_layernorm(x, y, w, b):
        s = x + y
        return s, F.layer_norm(s, (s.shape[-1],), w, b)

    def gemm_bias_relu(x, w, b):
        return torch.relu(x @ w + b)

    def gemm_bias_gelu(x, w, b):
        return F.gelu(x @ w + b, approximate="tanh")

    def two_gemm_mul(x, w1, w2):
        return (x @ w1) * (x @ w2)

    def gemm_layernorm(x, w, b):
        y = x @ w + b
        return F.layer_norm(y, (y.shape[-1],))

    def mlp(x, w1, b1, w2, b2):
        return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    n, g = 16384, 8192
    mat3 = [(n, n)] * 3
    mat_vec2 = [(n, n), (n,), (n,)]
    gemm_bias = [(g, g), (g, g), (g,)]
    memory = [
        ("ew_chain", ew_chain, mat3), ("long_chain", long_chain, mat3),
        ("bias_gelu", bias_gelu, mat_vec2), ("sumsq", sumsq, [(n, n)]),
        ("naive_softmax", naive_softmax, [(n, n)]), ("softmax", softmax, [(n, n)]),
        ("layernorm", layernorm, mat_vec2), ("rmsnorm", rmsnorm, [(n, n), (n,)]),
        ("add_layernorm", add_layernorm, [(n, n), (n, n), (n,), (n,)]),
    ]
    gemm = [
        ("gemm_bias_relu", gemm_bias_relu, gemm_bias), ("gemm_bias_gelu", gemm_bias_gelu, gemm_bias),
        ("two_gemm_mul", two_gemm_mul, [(g, g)] * 3), ("gemm_layernorm", gemm_layernorm, gemm_bias),
        ("mlp", mlp, [(g, g), (g, g), (g,), (g, g), (g,)]),
    ]
    for name, fn, shapes in memory:
        for dtype in (torch.float32, torch.bfloat16):
            yield f"{name}_{'f32' if dtype == torch.float32 else 'bf16'}", fn, shapes, dtype
    for name, fn, shapes in gemm:
        yield f"{name}_bf16", fn, shapes, torch.bfloat16


def median_ms(fn, args, iters=20, warmup=3):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for _ in range(warmup):
        fn(*args)
    for i in range(iters):
        start[i].record()
        fn(*args)
        stop[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, stop))
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, fn, shapes, dtype in workloads():
        if only and name not in only:
            continue
        inputs = [torch.randn(s, device="cuda", dtype=dtype) for s in shapes]
        with torch.no_grad():
            eager = median_ms(fn, inputs)
            compiled_fn = torch.compile(fn)
            compiled = median_ms(compiled_fn, inputs)
        print(f"{name} {eager:.4f} {compiled:.4f}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
