#!/usr/bin/env python3
"""Writes the odd-shapes suite, test/traces/odd/<name>.trace: the layouts of the layout suite
(bench/make_layout_traces.py) at shapes nobody tuned for: prime and odd lengths, rows of one
element and of a million, tiny tensors, 3-D reductions over inner and outer axes at once,
transposes whose sides are not multiples of a tile, broadcasts of odd extents. They are small
(checked against the CPU reference, not timed): scripts/gpu-check runs them with --check in
both rounding modes, and CI compiles every kernel they generate for sm_90.

  test/traces/make_odd_traces.py OUT_DIR      (writes OUT_DIR/*.trace, prints one name a line)

test/CMakeLists.txt reruns it into a temporary folder and compares with test/traces/odd/.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from make_layout_traces import (  # noqa: E402
    Trace, layer_norm, logsumexp_rows, rms_norm, softmax, write_suite)


def suite():
    """Yields (name, Trace, outputs)."""
    for dt in ("f32", "bf16", "f16"):
        for rows, width in ((3, 1), (7, 3), (1023, 31), (5, 33), (13, 50257), (2, 100003),
                            (1, 1000003)):
            t = Trace()
            yield f"softmax_{rows}x{width}_{dt}", t, [softmax(t, t.input(dt, (rows, width)), 1)]
        for shape in ((1, 1), (257, 4097), (2, 65537), (3, 17, 129)):
            t = Trace()
            x, w, b = t.input(dt, shape), t.input(dt, shape[-1:]), t.input(dt, shape[-1:])
            name = "x".join(map(str, shape))
            yield f"layernorm_{name}_{dt}", t, [layer_norm(t, x, w, b)]
        t = Trace()
        x, w = t.input(dt, (31, 257)), t.input(dt, (257,))
        yield f"rmsnorm_31x257_{dt}", t, [rms_norm(t, x, w)]
        for rows, width in ((4099, 7), (3, 200003)):
            t = Trace()
            yield f"logsumexp_{rows}x{width}_{dt}", t, [logsumexp_rows(t, t.input(dt, (rows, width)))]

        # columns: tall and three wide, short and wide, two axes of three at once
        t = Trace()
        yield f"colsum_100003x3_{dt}", t, [t.reduce("sum", t.input(dt, (100003, 3)), [0], False)]
        t = Trace()
        yield f"colmean_17x100000_{dt}", t, [t.reduce("mean", t.input(dt, (17, 100000)), [0], True)]
        t = Trace()
        x = t.input(dt, (33, 7, 65))
        yield f"summax_axes02_{dt}", t, [t.reduce("sum", x, [0, 2], False),
                                         t.reduce("max", x, [0, 2], False)]
        t = Trace()
        yield f"colsoftmax_1025x513_{dt}", t, [softmax(t, t.input(dt, (1025, 513)), 0)]
        t = Trace()
        yield f"midsoftmax_3x1001x5_{dt}", t, [softmax(t, t.input(dt, (3, 1001, 5)), 1)]

        # transposes whose sides are not tile multiples
        t = Trace()
        x, z = t.input(dt, (1023, 1025)), t.input(dt, (1025, 1023))
        yield f"transpose_add_1023x1025_{dt}", t, [t.binary("add", t.permute(x, [1, 0]), z)]
        t = Trace()
        x = t.input(dt, (3, 5, 1031))
        yield f"permute201_3x5x1031_{dt}", t, [t.unary("exp", t.permute(x, [2, 0, 1]))]
        t = Trace()
        x, w = t.input(dt, (2, 129, 4095)), t.input(dt, (129,))
        yield f"permute021_mul_2x129x4095_{dt}", t, [t.binary("mul", t.permute(x, [0, 2, 1]), w)]

        # broadcasts of odd extents, and the tiniest tensors
        t = Trace()
        a, b, c = t.input(dt, (7, 1, 13)), t.input(dt, (1, 11, 13)), t.input(dt, (7, 11, 1))
        yield f"broadcast3d_7x11x13_{dt}", t, [t.binary("add", t.binary("mul", a, b), c)]
        t = Trace()
        yield f"tiny_exp_1_{dt}", t, [t.unary("exp", t.input(dt, (1,)))]
        t = Trace()
        x = t.input(dt, (1, 1))
        yield f"tiny_sum_1x1_{dt}", t, [t.reduce("sum", x, [0, 1], False)]
        # a whole-tensor mean of squares over a prime count (well conditioned: one sign)
        t = Trace()
        x = t.input(dt, (1000003,))
        sq = t.binary("mul", x, x)
        yield f"meansq_1000003_{dt}", t, [t.reduce("mean", sq, [0], False)]


def main(argv):
    return write_suite(argv, suite(), lambda name, t: name)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
