#!/usr/bin/env python3
"""Times the llama-style transformer block of examples/transformer_block.cpp in PyTorch, eager
and under torch.compile, at the same sizes and dtype, for the side-by-side figures that the
example prints in the same device call. Prints one line:

  TORCH transformer_block B S H NH FFN DTYPE eager_ms=... compile_ms=... sdpa_eager_ms=...

The block is the same math as the example: RMSNorm, q/k/v projections, rotary embeddings
(rotate-half written as slices and a concatenation), causal attention from matmul, scale, mask
and softmax, the output projection, a residual, RMSNorm, a SwiGLU MLP and a residual. The
sdpa_eager column is the same block with the attention core replaced by
F.scaled_dot_product_attention (a fused attention kernel), for reference only: fusejit does
not fuse attention into one kernel yet (it runs matmul, a fused mask+softmax kernel, matmul).
"""
import argparse
import math
import sys

from torch_bench import median_ms


def rms_norm(x, w, eps):
    import torch
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate(x, cos, sin):
    import torch
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def block(x, p, heads, sdpa=False):
    import torch
    import torch.nn.functional as F
    b, s, h = x.shape
    hd = h // heads
    xn = rms_norm(x, p["attn_norm"], 1e-6)

    def split(t):
        return t.view(b, s, heads, hd).transpose(1, 2)

    q = rotate(split(xn @ p["wq"].T), p["cos"], p["sin"])
    k = rotate(split(xn @ p["wk"].T), p["cos"], p["sin"])
    v = split(xn @ p["wv"].T)
    if sdpa:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(p["mask"], float("-inf"))
        o = torch.softmax(scores.float(), dim=-1).to(x.dtype) @ v
    hres = x + o.transpose(1, 2).reshape(b, s, h) @ p["wo"].T
    hn = rms_norm(hres, p["mlp_norm"], 1e-6)
    return hres + (F.silu(hn @ p["w1"].T) * (hn @ p["w3"].T)) @ p["w2"].T


def parameters(args, dtype):
    import torch
    h, f, hd = args.hidden, args.ffn, args.hidden // args.heads

    def weight(rows, cols):
        return torch.randn(rows, cols, device="cuda", dtype=dtype) / math.sqrt(cols)

    pos = torch.arange(args.seq, device="cuda", dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, hd, 2, device="cuda", dtype=torch.float32) / hd)
    angles = torch.cat((pos * freq, pos * freq), dim=-1)
    idx = torch.arange(args.seq, device="cuda")
    return {
        "attn_norm": torch.ones(h, device="cuda", dtype=dtype),
        "mlp_norm": torch.ones(h, device="cuda", dtype=dtype),
        "wq": weight(h, h), "wk": weight(h, h), "wv": weight(h, h), "wo": weight(h, h),
        "w1": weight(f, h), "w3": weight(f, h), "w2": weight(h, f),
        "cos": angles.cos().to(dtype), "sin": angles.sin().to(dtype),
        "mask": idx[None, :] > idx[:, None],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--ffn", type=int, default=11008)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_transformer: torch is not installed; skipped", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_transformer: no CUDA device; skipped", file=sys.stderr)
        return 0
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    p = parameters(args, dtype)
    x = torch.randn(args.batch, args.seq, args.hidden, device="cuda", dtype=dtype)
    with torch.no_grad():
        eager = median_ms(lambda t: block(t, p, args.heads), [x], args.iters, args.warmup)
        compiled_fn = torch.compile(lambda t: block(t, p, args.heads))
        compiled = median_ms(compiled_fn, [x], args.iters, args.warmup)
        sdpa = median_ms(lambda t: block(t, p, args.heads, sdpa=True), [x], args.iters,
                         args.warmup)
    print(f"TORCH transformer_block {args.batch} {args.seq} {args.hidden} {args.heads} "
          f"{args.ffn} {args.dtype} eager_ms={eager:.3f} compile_ms={compiled:.3f} "
          f"sdpa_eager_ms={sdpa:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
