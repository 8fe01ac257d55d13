#!/usr/bin/env python3
"""PyTorch on the attention shapes of bench/attention/ (scripts/attention-check): per trace, the
median time of torch.nn.functional.scaled_dot_product_attention (the backend PyTorch picks) and
of torch.compile on the pattern as the trace writes it (matmul, scale, where over an arange
comparison for causal, softmax in f32, matmul), in ms, CUDA events after warm-up.

  bench/torch_attention.py TRACE...     prints "<name> <sdpa_ms> <compile_ms>" per trace

The problem comes from the trace's name, <mask>_<b>x<h>x<s>[x<s_kv>]_d<d>[_kv<h>]_bf16 (mask
"none" or "causal"; s query rows against s_kv keys, s_kv = s when absent: the decode shapes
have one query row), as test/traces/make_attention_traces.py --bench writes it.
"""
import math
import os
import re
import sys


def median_ms(torch, fn, iters=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main(argv):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_attention: no torch", file=sys.stderr)
        return 1
    pattern = re.compile(r"(none|causal)_(\d+)x(\d+)x(\d+)(?:x(\d+))?_d(\d+)(?:_kv(\d+))?_bf16$")
    for path in argv[1:]:
        name = os.path.basename(path).removesuffix(".trace")
        m = pattern.match(name)
        if not m:
            print(f"torch_attention: cannot read the problem from {name}", file=sys.stderr)
            continue
        mask, b, h, s, d = m.group(1), *map(int, m.group(2, 3, 4, 6))
        skv = int(m.group(5) or s)
        kvh = int(m.group(7) or h)
        causal = mask == "causal"
        q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, kvh, skv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, kvh, skv, d, device="cuda", dtype=torch.bfloat16)
        scale = 1 / math.sqrt(d)

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=kvh != h)

        def naive(q, k, v):
            if kvh != h:
                k = k.repeat_interleave(h // kvh, dim=1)
                v = v.repeat_interleave(h // kvh, dim=1)
            scores = (q @ k.transpose(-1, -2)) * scale
            if causal:
                pos = torch.arange(s, device=q.device)
                scores = torch.where(pos[None, :] > pos[:, None], float("-inf"), scores)
            p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            return p @ v

        sdpa_ms = median_ms(torch, sdpa)
        try:
            compiled = torch.compile(naive)
            compile_ms = median_ms(torch, lambda: compiled(q, k, v))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"torch_attention: torch.compile failed on {name}: {e}", file=sys.stderr)
            compile_ms = float("nan")
        print(f"{name} {sdpa_ms:.4f} {compile_ms:.4f}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
