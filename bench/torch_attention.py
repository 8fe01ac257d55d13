#!/usr/bin/env python3
"""PyTorch on the attention shapes of bench/attention/ (scripts/attention-check): per trace, the
median time of torch.nn.functional.scaled_dot_product_attention (the backend PyTorch picks) and
of torch.compile on the pattern as the trace writes it (matmul, scale, where over an arange
comparison for causal, softmax in f32, matmul), in ms, CUDA events after warm-up, over copies of
q, k and v in turn where a call moves less than twice the L2 (bench/rotation.py), as fusejit
times.

  bench/torch_attention.py TRACE...     prints "<name> <sdpa_ms> <compile_ms>" per trace

The problem comes from the trace's name, <mask>_<b>x<h>x<s>[x<s_kv>]_d<d>[_kv<h>]_bf16 (mask
"none" or "causal"; s query rows against s_kv keys, s_kv = s when absent: the decode shapes
have one query row), as test/traces/make_attention_traces.py --bench writes it.
"""
import math
import os
import re
import sys

from rotation import input_sets


ITERS, WARMUP = 30, 5


def median_ms(torch, fn, sets, iters=ITERS, warmup=WARMUP):
    """The median of `iters` timed calls after `warmup`, the calls taking their arguments from
    `sets` in turn (bench/rotation.py)."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        args = sets[(warmup + i) % len(sets)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
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

        sets = input_sets(torch, [q, k, v], out_bytes=q.numel() * q.element_size(),
                          runs=ITERS + WARMUP)

        def sdpa(q, k, v):
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

        sdpa_ms = median_ms(torch, sdpa, sets)
        try:
            compiled = torch.compile(naive)
            compile_ms = median_ms(torch, compiled, sets)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"torch_attention: torch.compile failed on {name}: {e}", file=sys.stderr)
            compile_ms = float("nan")
        print(f"{name} {sdpa_ms:.4f} {compile_ms:.4f}", flush=True)
        del q, k, v, sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
