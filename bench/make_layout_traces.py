#!/usr/bin/env python3
"""Writes the layout suite, bench/traces/<class>_<dtype>.trace, in the trace text format of
docs/trace-format.md: transposed and permuted reads, column reductions, 3-D broadcasts, row
normalizations (softmax, layer norm, RMS norm) from narrower than a warp to vocabulary widths
with few and many rows, logsumexp over rows, softmax over columns, and pointwise sweeps of odd sizes (a prime
length, rows of a vocabulary's width); each in f32, bf16 and f16. Every trace moves at least 256 MiB (each input read once, each output written once), so
that it is timed at the bandwidth limit, not at the launch latency.

The traces are spelled as the API records them (jit/api/ops.cpp): composites decomposed into
primitives, f16/bf16 normalizations cast to f32, computed, and cast back; scalars take the
tensor's dtype. Pure Python, so that the suite is reproducible anywhere:

  bench/make_layout_traces.py OUT_DIR      (writes OUT_DIR/*.trace, prints one line per trace)

test/CMakeLists.txt reruns it into a temporary folder and compares with bench/traces/.
"""
import math
import os
import sys

DTYPES = ("f32", "bf16", "f16")
SIZE = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "bool": 1}
MIN_BYTES = 256 << 20


def number(v):
    """The shortest decimal that round-trips, as the trace printer (std::to_chars) spells it."""
    if v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return repr(v)


class Trace:
    """Builds one trace: each method appends a node and returns its id."""

    def __init__(self):
        self.lines = []
        self.types = []  # (dtype, shape) per node id
        self.input_ids = []

    def _node(self, dtype, shape, text):
        i = len(self.types)
        self.types.append((dtype, tuple(shape)))
        dims = ",".join(str(d) for d in shape)
        self.lines.append(f"%{i} : {dtype}[{dims}] = {text}")
        return i

    def dtype(self, x):
        return self.types[x][0]

    def shape(self, x):
        return self.types[x][1]

    def input(self, dtype, shape):
        i = self._node(dtype, shape, "input")
        self.input_ids.append(i)
        return i

    def const(self, dtype, value):
        return self._node(dtype, (), f"const {number(value)}")

    def unary(self, op, x):
        return self._node(self.dtype(x), self.shape(x), f"{op} %{x}")

    def binary(self, op, a, b):
        sa, sb = self.shape(a), self.shape(b)
        rank = max(len(sa), len(sb))
        pa, pb = (1,) * (rank - len(sa)) + sa, (1,) * (rank - len(sb)) + sb
        shape = tuple(max(p, q) for p, q in zip(pa, pb))
        for p, q in zip(pa, pb):
            assert p == q or 1 in (p, q), (sa, sb)
        da, db = self.dtype(a), self.dtype(b)
        dtype = da if da == db else "f32"  # only f32 with a half type is mixed here
        return self._node(dtype, shape, f"{op} %{a}, %{b}")

    def cast(self, x, dtype):
        return self._node(dtype, self.shape(x), f"cast %{x}")

    def reduce(self, op, x, axes, keepdim):
        shape = self.shape(x)
        axes = sorted(a % len(shape) for a in axes)
        if keepdim:
            out = tuple(1 if i in axes else d for i, d in enumerate(shape))
        else:
            out = tuple(d for i, d in enumerate(shape) if i not in axes)
        attrs = f" axes=[{','.join(str(a) for a in axes)}]" + (" keepdim" if keepdim else "")
        return self._node(self.dtype(x), out, f"{op} %{x}{attrs}")

    def permute(self, x, axes):
        shape = tuple(self.shape(x)[a] for a in axes)
        return self._node(self.dtype(x), shape, f"permute %{x} axes=[{','.join(map(str, axes))}]")

    def matmul(self, a, b):
        sa, sb = self.shape(a), self.shape(b)
        assert sa[-1] == sb[-2], (sa, sb)
        batch = tuple(max(p, q) for p, q in zip(sa[:-2], sb[:-2]))
        return self._node(self.dtype(a), batch + (sa[-2], sb[-1]), f"matmul %{a}, %{b}")

    def reshape(self, x, shape):
        assert math.prod(shape) == math.prod(self.shape(x))
        return self._node(self.dtype(x), shape, f"reshape %{x}")

    def text(self, outputs):
        self.outputs = outputs
        body = "\n".join(self.lines)
        return f"fusejit-trace 1\n{body}\noutput {', '.join(f'%{o}' for o in outputs)}\n"

    def bytes_moved(self):
        ids = self.input_ids + self.outputs
        return sum(math.prod(self.shape(i)) * SIZE[self.dtype(i)] for i in ids)


# ---- the computations, spelled as the API records them ---------------------------------------


def upcast(t, x):
    return x if t.dtype(x) == "f32" else t.cast(x, "f32")


def downcast(t, y, dtype):
    return y if dtype == "f32" else t.cast(y, dtype)


def softmax(t, x, axis):
    u = upcast(t, x)
    shifted = t.binary("sub", u, t.reduce("max", u, [axis], True))
    e = t.unary("exp", shifted)
    return downcast(t, t.binary("div", e, t.reduce("sum", e, [axis], True)), t.dtype(x))


def layer_norm(t, x, w, b, eps=1e-5):
    u = upcast(t, x)
    centered = t.binary("sub", u, t.reduce("mean", u, [-1], True))
    variance = t.reduce("mean", t.binary("mul", centered, centered), [-1], True)
    inv = t.unary("rsqrt", t.binary("add", variance, t.const("f32", eps)))
    y = t.binary("mul", centered, inv)
    y = t.binary("mul", y, upcast(t, w))
    y = t.binary("add", y, upcast(t, b))
    return downcast(t, y, t.dtype(x))


def rms_norm(t, x, w, eps=1e-6):
    u = upcast(t, x)
    ms = t.reduce("mean", t.binary("mul", u, u), [-1], True)
    y = t.binary("mul", u, t.unary("rsqrt", t.binary("add", ms, t.const("f32", eps))))
    y = t.binary("mul", y, upcast(t, w))
    return downcast(t, y, t.dtype(x))


def logsumexp_rows(t, x):
    # torch.logsumexp(x, -1): max + log(sum(exp(x - max))), the row axis dropped.
    u = upcast(t, x)
    m = t.reduce("max", u, [-1], True)
    s = t.reduce("sum", t.unary("exp", t.binary("sub", u, m)), [-1], True)
    y = t.binary("add", t.unary("log", s), m)
    y = t.reshape(y, t.shape(y)[:-1])
    return downcast(t, y, t.dtype(x))


# ---- the suite -------------------------------------------------------------------------------


def rows_for(width, dtype, per_element_copies=2):
    """The fewest rows of `width` whose read and write reach MIN_BYTES."""
    row_bytes = width * SIZE[dtype] * per_element_copies
    return -(-MIN_BYTES // row_bytes)


# Row widths for the normalizations: narrower than a warp, LLM hidden widths, vocabulary widths.
# Rows: "many" fills the GPU many times over; "few" is the fewest rows that still move
# MIN_BYTES, so a row must be split across blocks to fill the GPU.
def row_shapes(dtype, variants):
    shapes = {
        "w16": (1 << 22, 16),
        "w4096": (16384, 4096),
        "w8192": (8192, 8192),
        "w32000_few": (rows_for(32000, dtype), 32000),
        "w32000_many": (4096, 32000),
        "w128256_few": (rows_for(128256, dtype), 128256),
        "w128256_many": (2048, 128256),
    }
    return [(v, shapes[v]) for v in variants]


ALL_ROWS = ("w16", "w4096", "w8192", "w32000_few", "w32000_many", "w128256_few", "w128256_many")
# Layer norm and RMS norm share softmax's schedules (one row per block or warp, split rows); a
# subset of widths keeps the suite's GPU time in budget while covering each schedule once.
NORM_ROWS = ("w16", "w4096", "w32000_many", "w128256_few")


def suite():
    """Yields (name, Trace, outputs)."""
    for dt in DTYPES:
        # y = x^T + z
        t = Trace()
        x, z = t.input(dt, (4096, 12288)), t.input(dt, (12288, 4096))
        yield f"transpose_add_{dt}", t, [t.binary("add", t.permute(x, [1, 0]), z)]

        # y = x.permute(0, 2, 1) * w: a batched transpose with a vector along the new last axis
        t = Trace()
        x, w = t.input(dt, (32, 2048, 1024)), t.input(dt, (2048,))
        yield f"permute021_mul_{dt}", t, [t.binary("mul", t.permute(x, [0, 2, 1]), w)]

        # y = x.permute(2, 0, 1) * 0.5: the innermost axis becomes the outermost
        t = Trace()
        x = t.input(dt, (256, 256, 1024))
        yield f"permute201_scale_{dt}", t, [
            t.binary("mul", t.permute(x, [2, 0, 1]), t.const(dt, 0.5))]

        # column reductions: tall and narrow, and wide
        t = Trace()
        x = t.input(dt, (1 << 21, 64))
        yield f"colsum_narrow_{dt}", t, [t.reduce("sum", x, [0], False)]
        t = Trace()
        x = t.input(dt, (8192, 16384))
        yield f"colmean_wide_{dt}", t, [t.reduce("mean", x, [0], False)]

        # y = a[B,1,N] * b[1,M,N] + c[B,M,1]
        t = Trace()
        a, b, c = t.input(dt, (64, 1, 1024)), t.input(dt, (1, 2048, 1024)), t.input(dt, (64, 2048, 1))
        yield f"broadcast3d_{dt}", t, [t.binary("add", t.binary("mul", a, b), c)]

        for v, shape in row_shapes(dt, ALL_ROWS):
            t = Trace()
            x = t.input(dt, shape)
            yield f"softmax_{v}_{dt}", t, [softmax(t, x, 1)]
        for v, shape in row_shapes(dt, NORM_ROWS):
            t = Trace()
            x, w, b = t.input(dt, shape), t.input(dt, shape[1:]), t.input(dt, shape[1:])
            yield f"layernorm_{v}_{dt}", t, [layer_norm(t, x, w, b)]
        for v, shape in row_shapes(dt, NORM_ROWS):
            t = Trace()
            x, w = t.input(dt, shape), t.input(dt, shape[1:])
            yield f"rmsnorm_{v}_{dt}", t, [rms_norm(t, x, w)]

        # logsumexp over rows: the output is one value per row, so the read is the traffic
        for v, (_, width) in row_shapes(dt, ("w32000_many", "w128256_few")):
            t = Trace()
            x = t.input(dt, (rows_for(width, dt, per_element_copies=1), width) if v.endswith(
                "few") else (8192, width))
            yield f"logsumexp_{v}_{dt}", t, [logsumexp_rows(t, x)]

        # a batched matmul whose batch dims broadcast on both sides (attention-like scores):
        # one strided-batched cuBLASLt call per outer index, never an expand kernel
        t = Trace()
        a, b = t.input(dt, (16, 1, 1024, 64)), t.input(dt, (1, 16, 64, 1024))
        yield f"bmm_broadcast_{dt}", t, [t.matmul(a, b)]

        # odd sizes: a prime length (whole vectors, then a scalar tail), every operand
        # contiguous; and rows of a vocabulary's odd width with a bias along them
        t = Trace()
        x, w, z = t.input(dt, (100000007,)), t.input(dt, (100000007,)), t.input(dt, (100000007,))
        yield f"ew_prime_{dt}", t, [t.unary("relu", t.binary("add", t.binary("mul", x, w), z))]
        t = Trace()
        x, b = t.input(dt, (4096, 50257)), t.input(dt, (50257,))
        yield f"bias_gelu_w50257_{dt}", t, [t.unary("gelu", t.binary("add", x, b))]

        # softmax over axis 0 (columns)
        t = Trace()
        x = t.input(dt, (8192, 8192))
        yield f"colsoftmax_{dt}", t, [softmax(t, x, 0)]


def write_suite(argv, traces, describe):
    """The main of a suite generator: writes each (name, Trace, outputs) of `traces` to
    OUT_DIR/<name>.trace (OUT_DIR = argv[1]) and prints describe(name, trace) for each."""
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} OUT_DIR", file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    for name, t, outputs in traces:
        text = t.text(outputs)
        line = describe(name, t)
        with open(os.path.join(out, name + ".trace"), "w", encoding="ascii") as f:
            f.write(text)
        print(line)
    return 0


def describe_layout(name, t):
    moved = t.bytes_moved()
    assert moved >= MIN_BYTES, f"{name} moves only {moved} bytes"
    return f"{name} {moved}"


def main(argv):
    return write_suite(argv, suite(), describe_layout)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
