#!/usr/bin/env python3
"""Writes the attention suite, test/traces/attention/<name>.trace: attention written from
primitives (matmul(q, kᵀ), a scale, a mask, softmax, matmul with v) in the variants the
matcher takes, at small odd sizes: the scale on the scores or folded into q, no mask, an additive mask
broadcast over batch and heads (and masks broadcast over each axis), a causal mask from an
arange comparison (i32 positions, and bf16 ones up to 256), a boolean mask input;
f16 and bf16; head dims 64 and 128; sequence lengths that are no multiple of a tile; k and v
heads broadcast over q's (grouped-query, through reshape and expand); q, k and v read from
[b, s, h, d] through permutes with the output permuted back, and sliced out of one fused
projection (at a 16-byte aligned start, and 8 bytes off it); and, named refused_*, patterns
the fused region does not compute, which are planned unfused with a reason (bf16 positions
that tie past 256, a mask that broadcasts q kᵀ's single query row or key). They are small
(checked against the CPU reference, not timed): scripts/gpu-check's `attention` suite runs
each with the kernel, with cuDNN and unfused, with --check, and CI plans each and compiles its
kernels for sm_90 and sm_80.

  test/traces/make_attention_traces.py OUT_DIR      (writes OUT_DIR/*.trace, one name a line)
  test/traces/make_attention_traces.py --bench OUT_DIR
      the benchmark shapes, timed by scripts/attention-check (bench/attention/): bf16,
      [8,16,4096,128] and [4,32,2048,64] causal and not, [8,16,2048,128], and grouped-query
      [8,32,2048,128] with 8 kv heads; decode, one query row of Llama-3-8B's 32 heads against
      8 kv heads of 8k, 32k and 128k keys at batch 1 and of 8k at batch 8 (the target: 85% of
      the copy bandwidth on the KV bytes); named <mask>_<b>x<h>x<s>[x<s_kv>]_d<d>[_kv<h>]_bf16,
      which bench/torch_attention.py reads to build the same problem in PyTorch.

test/CMakeLists.txt reruns it into a temporary folder and compares with test/traces/attention/.
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from make_layout_traces import Trace, softmax, write_suite  # noqa: E402


class AttentionTrace(Trace):
    """Trace plus the ops a mask and grouped heads need."""

    def const(self, dtype, value):
        if math.isinf(value):
            return self._node(dtype, (), "const -inf" if value < 0 else "const inf")
        return super().const(dtype, value)

    def expand(self, x, shape):
        return self._node(self.dtype(x), shape, f"expand %{x}")

    def arange(self, n, dtype):
        return self._node(dtype, (n,), "arange")

    def compare(self, op, a, b):
        sa, sb = self.shape(a), self.shape(b)
        rank = max(len(sa), len(sb))
        pa, pb = (1,) * (rank - len(sa)) + sa, (1,) * (rank - len(sb)) + sb
        return self._node("bool", tuple(max(p, q) for p, q in zip(pa, pb)), f"{op} %{a}, %{b}")

    def where(self, c, a, b):
        shapes = [self.shape(x) for x in (c, a, b)]
        rank = max(len(s) for s in shapes)
        padded = [(1,) * (rank - len(s)) + s for s in shapes]
        shape = tuple(max(d) for d in zip(*padded))
        return self._node(self.dtype(a if self.shape(a) else b), shape, f"where %{c}, %{a}, %{b}")

    def slice(self, x, axis, start, length):
        shape = list(self.shape(x))
        shape[axis] = length
        return self._node(self.dtype(x), tuple(shape), f"slice %{x} axis={axis} start={start} step=1")

    def last_two_swapped(self, x):
        r = len(self.shape(x))
        return self.permute(x, list(range(r - 2)) + [r - 1, r - 2])


def attention(dt, b, h, sq, skv, d, mask="none", scale_on="scores", kv_heads=None,
              layout="bhsd", mask_shape=None, positions="i32", q_rows=None, k_rows=None, lead=0):
    """Returns (trace, outputs). layout: "bhsd" inputs, "bshd" ones permuted, or "qkv": q, k
    and v sliced out of one [b, s, lead + 3 * h * d] input (a fused projection, `lead` elements
    into each row) and permuted, the output permuted back as with "bshd". mask_shape: the
    additive or boolean mask's shape (default
    [sq, skv] and [b, 1, sq, skv]); positions: the dtype of the causal mask's aranges;
    q_rows, k_rows: fewer query rows or keys in q or k than the mask has (the mask broadcasts
    the scores themselves)."""
    t = AttentionTrace()
    kvh = kv_heads or h
    if layout == "bshd":
        q = t.permute(t.input(dt, (b, sq, h, d)), [0, 2, 1, 3])
        k = t.permute(t.input(dt, (b, skv, kvh, d)), [0, 2, 1, 3])
        v = t.permute(t.input(dt, (b, skv, kvh, d)), [0, 2, 1, 3])
    elif layout == "qkv":
        qkv = t.input(dt, (b, sq, lead + 3 * h * d))
        q, k, v = (t.permute(t.reshape(t.slice(qkv, 2, lead + i * h * d, h * d), (b, sq, h, d)),
                             [0, 2, 1, 3]) for i in range(3))
    else:
        q = t.input(dt, (b, h, q_rows or sq, d))
        k = t.input(dt, (b, kvh, k_rows or skv, d))
        v = t.input(dt, (b, kvh, skv, d))
    if kvh != h:  # grouped-query: each kv head serves h / kvh query heads
        group = h // kvh

        def spread(x):
            one = t.reshape(x, (b, kvh, 1, skv, d))
            return t.reshape(t.expand(one, (b, kvh, group, skv, d)), (b, h, skv, d))

        k, v = spread(k), spread(v)
    c = t.const(dt, 1 / math.sqrt(d))
    if scale_on == "q":
        q = t.binary("mul", q, c)
    s = t.matmul(q, t.last_two_swapped(k))
    if scale_on == "scores":
        s = t.binary("mul", s, c)
    if mask == "additive":
        s = t.binary("add", s, t.input(dt, mask_shape or (sq, skv)))
    elif mask == "causal":
        pos_q, pos_k = t.arange(sq, positions), t.arange(skv, positions)
        future = t.compare("gt", t.reshape(pos_k, (1, skv)), t.reshape(pos_q, (sq, 1)))
        s = t.where(future, t.const(dt, -math.inf), s)
    elif mask == "boolean":
        keep = t.input("bool", mask_shape or (b, 1, sq, skv))
        s = t.where(keep, s, t.const(dt, -math.inf))
    out = t.matmul(softmax(t, s, -1), v)
    if layout in ("bshd", "qkv"):
        out = t.reshape(t.permute(out, [0, 2, 1, 3]), (b, sq, h * d))
    return t, [out]


def suite():
    """Yields (name, Trace, outputs)."""
    for dt in ("bf16", "f16"):
        for d in (64, 128):
            for mask in ("none", "causal", "additive", "boolean"):
                t, outs = attention(dt, 2, 4, 77, 77, d, mask)
                yield f"{mask}_2x4x77_d{d}_{dt}", t, outs
        t, outs = attention(dt, 1, 2, 130, 130, 64, "causal", scale_on="q")
        yield f"causal_qscale_1x2x130_d64_{dt}", t, outs
        t, outs = attention(dt, 2, 8, 65, 65, 128, "causal", kv_heads=2)
        yield f"gqa_causal_2x8x65_d128_{dt}", t, outs
        t, outs = attention(dt, 2, 3, 50, 50, 64, "none", layout="bshd")
        yield f"bshd_2x3x50_d64_{dt}", t, outs
        # GPT-2's c_attn: q, k and v read in place from the fused projection; then slices 8
        # bytes into each row, which cuDNN refuses and the kernel reads with narrow loads.
        t, outs = attention(dt, 2, 3, 50, 50, 64, "causal", layout="qkv")
        yield f"qkvslices_2x3x50_d64_{dt}", t, outs
        t, outs = attention(dt, 2, 3, 50, 50, 64, "causal", layout="qkv", lead=4)
        yield f"qkvslices_lead4_2x3x50_d64_{dt}", t, outs
        t, outs = attention(dt, 1, 2, 1, 1, 64, "none")
        yield f"none_1x2x1_d64_{dt}", t, outs
        t, outs = attention(dt, 1, 2, 33, 200, 64, "additive")
        yield f"cross_1x2x33x200_d64_{dt}", t, outs
    # Masks broadcast over each axis of the scores [b, h, q, k] (1 where it broadcasts; a
    # shorter mask aligns from the right), read by strides of 0 there.
    b, h, s = 2, 4, 77
    for kind, dims in (("additive", "1hqk"), ("additive", "b1qk"), ("additive", "bh1k"),
                       ("additive", "bhq1"), ("additive", "b11k"), ("additive", "k"),
                       ("additive", "11"), ("boolean", "b11k")):
        extent = {"b": b, "h": h, "q": s, "k": s, "1": 1}
        t, outs = attention("bf16", b, h, s, s, 64, kind,
                            mask_shape=tuple(extent[c] for c in dims))
        yield f"{kind}_mask{dims}_{b}x{h}x{s}_d64_bf16", t, outs
    # Causal from bf16 positions: exact up to 256 (fused), past it they round and tie.
    t, outs = attention("bf16", 1, 2, 257, 257, 64, "causal", positions="bf16")
    yield "causal_bf16pos_1x2x257_d64_bf16", t, outs
    # Refused, planned unfused (the names say so; test/tools/attention_traces.sh checks the
    # reason is printed): positions that tie, and a mask that broadcasts q kᵀ's one query row
    # or one key to 64.
    t, outs = attention("bf16", 1, 2, 300, 300, 64, "causal", positions="bf16")
    yield "refused_causal_bf16pos_1x2x300_d64_bf16", t, outs
    t, outs = attention("bf16", 1, 2, 64, 64, 64, "additive", mask_shape=(1, 2, 64, 64), q_rows=1)
    yield "refused_qrow1_1x2x64_d64_bf16", t, outs
    t, outs = attention("bf16", 1, 2, 64, 64, 64, "additive", mask_shape=(1, 2, 64, 64), k_rows=1)
    yield "refused_kcol1_1x2x64_d64_bf16", t, outs


def bench_suite():
    """Yields (name, Trace, outputs) at the benchmark sizes."""
    for b, h, sq, d in ((8, 16, 4096, 128), (4, 32, 2048, 64)):
        for mask in ("none", "causal"):
            t, outs = attention("bf16", b, h, sq, sq, d, mask)
            yield f"{mask}_{b}x{h}x{sq}_d{d}_bf16", t, outs
    t, outs = attention("bf16", 8, 16, 2048, 2048, 128, "none")
    yield "none_8x16x2048_d128_bf16", t, outs
    t, outs = attention("bf16", 8, 32, 2048, 2048, 128, "causal", kv_heads=8)
    yield "causal_8x32x2048_d128_kv8_bf16", t, outs
    for b, skv in ((1, 8192), (1, 32768), (1, 131072), (8, 8192)):
        t, outs = attention("bf16", b, 32, 1, skv, 128, "none", kv_heads=8)
        yield f"none_{b}x32x1x{skv}_d128_kv8_bf16", t, outs


def main(argv):
    if len(argv) == 3 and argv[1] == "--bench":
        return write_suite([argv[0], argv[2]], bench_suite(), lambda name, t: name)
    return write_suite(argv, suite(), lambda name, t: name)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
