"""The lazy API against numpy: ops, Python operators, broadcasting, views and indexing."""
import math

import numpy as np
import pytest

import fusejit as fj

UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": lambda a: np.log(np.abs(a) + 0.5),
    "sqrt": lambda a: np.sqrt(np.abs(a)),
    "rsqrt": lambda a: 1 / np.sqrt(np.abs(a) + 0.5),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "relu": lambda a: np.maximum(a, 0),
    "silu": lambda a: a / (1 + np.exp(-a)),
    "reciprocal": lambda a: 1 / (np.abs(a) + 0.5),
}
# Inputs shifted where the op's domain needs it, as in UNARY's references.
PREPARE = {
    "log": lambda x: fj.abs(x) + 0.5,
    "sqrt": fj.abs,
    "rsqrt": lambda x: fj.abs(x) + 0.5,
    "reciprocal": lambda x: fj.abs(x) + 0.5,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_agree_with_numpy(ctx, rng, name):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    x = PREPARE.get(name, lambda t: t)(fj.tensor(a, context=ctx))
    got = getattr(fj, name)(x).to_numpy()
    np.testing.assert_allclose(got, UNARY[name](a), rtol=1e-5, atol=1e-6)
    # the method form is the same op
    if name != "neg":
        np.testing.assert_allclose(getattr(x, name)().to_numpy(), got, rtol=0, atol=0)


def test_operators_broadcast_like_numpy(ctx, rng):
    a = rng.standard_normal((4, 1, 3)).astype(np.float32)
    b = rng.standard_normal((5, 1)).astype(np.float32)
    x, y = fj.tensor(a, context=ctx), fj.tensor(b, context=ctx)
    cases = [
        (x + y, a + b), (x - y, a - b), (x * y, a * b), (x / (y * y + 1), a / (b * b + 1)),
        (-x, -a), (abs(x), np.abs(a)), (x + 2, a + 2), (2 - x, 2 - a), (3 * x, 3 * a),
        (1 / (x * x + 1), 1 / (a * a + 1)), (x ** 2, a ** 2), (fj.maximum(x, y), np.maximum(a, b)),
        (fj.minimum(x, 0.25), np.minimum(a, 0.25)),
    ]
    for got, want in cases:
        assert got.shape == want.shape
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_comparisons_and_where(ctx, rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    x, y = fj.tensor(a, context=ctx), fj.tensor(b, context=ctx)
    for got, want in [(x < y, a < b), (x <= 0, a <= 0), (x > y, a > b), (x >= 0.5, a >= 0.5),
                      (x == x, a == a), (x != y, a != b)]:
        assert got.dtype == fj.bool_
        np.testing.assert_array_equal(got.to_numpy(), want)
    np.testing.assert_allclose(fj.where(x > 0, x, y).to_numpy(), np.where(a > 0, a, b))
    np.testing.assert_allclose(fj.where(x > 0, x, 0.0).to_numpy(), np.where(a > 0, a, 0))


def test_integer_dtypes_and_casts(ctx):
    a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    x = fj.tensor(a, context=ctx)
    assert x.dtype == fj.int32
    np.testing.assert_array_equal((x * 3 + 1).to_numpy(), a * 3 + 1)
    assert (x + 1).dtype == fj.int32
    assert (x + 0.5).dtype == fj.float32  # a float scalar promotes an integer tensor, as torch
    np.testing.assert_allclose((x + 0.5).to_numpy(), a + 0.5)
    np.testing.assert_array_equal(x.astype(fj.float16).to_numpy(), a.astype(np.float16))
    np.testing.assert_array_equal(fj.cast(x > 0, fj.int64).to_numpy(), (a > 0).astype(np.int64))


def test_int8_wraps_and_dequantizes(ctx):
    q = np.array([[100, -100, 127], [-128, 3, 0]], dtype=np.int8)
    x = fj.tensor(q, context=ctx)
    assert x.dtype == fj.int8
    np.testing.assert_array_equal((x + x).to_numpy(), (q.astype(np.int32) * 2).astype(np.int8))
    scale = fj.tensor(np.array([[0.5], [2.0]], np.float32), context=ctx)
    np.testing.assert_array_equal((x.astype(fj.float32) * scale).to_numpy(), q * np.array([[0.5], [2.0]]))


def test_half_precision_round_trips(ctx, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    h = fj.tensor(a, dtype=fj.float16, context=ctx)
    np.testing.assert_array_equal(h.to_numpy(), a.astype(np.float16))
    b = fj.tensor(a, dtype=fj.bfloat16, context=ctx)
    got = b.to_numpy()
    assert got.dtype == np.float32  # numpy has no bfloat16
    np.testing.assert_allclose(got, a, rtol=2 ** -8)
    np.testing.assert_allclose((b * 2).to_numpy(), got * 2, rtol=2 ** -8)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reductions(ctx, rng, name):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x = fj.tensor(a, context=ctx)
    ref = getattr(np, name if name in ("sum", "mean") else "a" + name)
    for axis, keepdim in [(None, False), (1, False), ((0, 2), True), (-1, True)]:
        got = getattr(fj, name)(x, axis=axis, keepdim=keepdim).to_numpy()
        want = ref(a, axis=axis, keepdims=keepdim)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(getattr(x, name)(axis, keepdim).to_numpy(), want, rtol=1e-5,
                                   atol=1e-5)


def test_views_and_indexing(ctx):
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    x = fj.tensor(a, context=ctx)
    cases = [
        (x.reshape(6, 4), a.reshape(6, 4)), (x.reshape((4, -1)), a.reshape(4, -1)),
        (x.permute(2, 0, 1), a.transpose(2, 0, 1)), (x.transpose(0, 2), a.swapaxes(0, 2)),
        (x.T, a.T), (x[1], a[1]), (x[-1, 1:], a[-1, 1:]), (x[:, ::2, 1], a[:, ::2, 1]),
        (x[..., 2], a[..., 2]), (x[None, 0, ..., 1:3], a[None, 0, ..., 1:3]),
        (x[:, None], a[:, None]), (x.unsqueeze(0).squeeze(0), a),
        (x[0:1].expand(3, 3, 4), np.broadcast_to(a[0:1], (3, 3, 4))),
        (fj.concat([x, x * 2], axis=1), np.concatenate([a, a * 2], axis=1)),
        (fj.chunk(x, 2, axis=2)[1], a[:, :, 2:]), (fj.narrow(x, 1, 1, 2), a[:, 1:3]),
    ]
    for got, want in cases:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.to_numpy(), want)
    assert len(x) == 2 and x.ndim == 3 and x.size == 24


def test_index_select_and_embedding(ctx, rng):
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([[1, 7], [9, 0]], dtype=np.int64)
    t, i = fj.tensor(table, context=ctx), fj.tensor(ids, context=ctx)
    np.testing.assert_array_equal(fj.embedding(t, i).to_numpy(), table[ids])
    np.testing.assert_array_equal(fj.index_select(t, 0, fj.tensor(ids[0], context=ctx)).to_numpy(),
                                  table[ids[0]])


def test_matmul_softmax_and_norms(ctx, rng):
    a = rng.standard_normal((2, 8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 12)).astype(np.float32)
    x, m = fj.tensor(a, context=ctx), fj.tensor(w, context=ctx)
    np.testing.assert_allclose((x @ m).to_numpy(), a @ w, rtol=1e-4, atol=1e-4)
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(fj.softmax(x).to_numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5,
                               atol=1e-6)
    mu, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    np.testing.assert_allclose(fj.layer_norm(x).to_numpy(), (a - mu) / np.sqrt(var + 1e-5),
                               rtol=1e-4, atol=1e-5)
    lin = fj.linear(x, fj.tensor(w.T.copy(), context=ctx), fj.tensor(w[0], context=ctx))
    np.testing.assert_allclose(lin.to_numpy(), a @ w + w[0], rtol=1e-4, atol=1e-4)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(fj.gelu(x).to_numpy(), 0.5 * a * (1 + erf(a / math.sqrt(2))),
                               rtol=1e-5, atol=1e-5)


def test_factories(ctx):
    np.testing.assert_array_equal(ctx.arange(5).to_numpy(), np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(ctx.arange(1, 7, 2, dtype=fj.int64).to_numpy(), [1, 3, 5])
    np.testing.assert_array_equal(ctx.full([2, 2], 3.5).to_numpy(), np.full((2, 2), 3.5))
    np.testing.assert_array_equal(ctx.zeros([3]).to_numpy() + 0, np.zeros(3))
    u = ctx.rand([1000], seed=1).to_numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
    np.testing.assert_array_equal(ctx.rand([8], seed=1).to_numpy(), ctx.rand([8], seed=1).to_numpy())


def test_eval_computes_several_together(ctx, rng):
    a = rng.standard_normal((4, 4)).astype(np.float32)
    x = fj.tensor(a, context=ctx)
    y, z = fj.exp(x), fj.exp(x) * 2
    fj.eval(y, z)
    stats = ctx.stats()
    assert stats["traces_evaluated"] == 1 and stats["outputs_computed"] == 2
    np.testing.assert_allclose(z.to_numpy(), np.exp(a) * 2, rtol=1e-6)
    assert y.eval() is y
    assert ctx.stats()["traces_evaluated"] == 1  # computed already: nothing more ran


def test_default_context_and_numpy_protocol(rng):
    a = rng.standard_normal((3,)).astype(np.float32)
    x = fj.tensor(a)
    assert x.context == fj.default_context()
    np.testing.assert_array_equal(np.asarray(x * 1), a)
    assert bool(fj.tensor([2.0]) > 1)
