"""Writing into a buffer, sampling, keyed draws and Replay (docs/python.md, "Writing into a buffer
and replaying a step"): a replayed step against the same step recorded and evaluated each time."""
import gc

import numpy as np
import pytest

import fusejit as fj


def test_update_slice_writes_in_place_and_returns_dst(ctx, rng):
    a = rng.standard_normal((3, 6)).astype(np.float32)
    v = rng.standard_normal((3, 2)).astype(np.float32)
    dst = fj.tensor(a, context=ctx)
    assert fj.update_slice(dst, 1, 2, fj.tensor(v, context=ctx)) is dst
    want = a.copy()
    want[:, 2:4] = v
    np.testing.assert_array_equal(dst.to_numpy(), want)
    # a start tensor is read when the trace runs; a negative int counts from the end
    pos = fj.tensor(np.array([4], np.int32), context=ctx)
    fj.update_slice(dst, 1, pos, fj.tensor(v * 2, context=ctx))
    want[:, 4:6] = v * 2
    np.testing.assert_array_equal(dst.to_numpy(), want)
    fj.update_slice(dst, 0, -1, fj.tensor(a[:1] + 1, context=ctx))
    want[2] = a[0] + 1
    np.testing.assert_array_equal(dst.to_numpy(), want)


def test_replayed_counter_counts_its_runs(ctx):
    counter = fj.tensor(np.zeros(1, np.int32), context=ctx)
    fj.update_slice(counter, 0, 0, counter + 1)
    step = fj.Replay([counter])
    assert step.runs == 0
    for _ in range(3):
        step.run()
    assert step.runs == 3
    assert counter.to_numpy().tolist() == [3]
    assert step.outputs[0].to_numpy().tolist() == [3]
    assert ctx.stats()["replay_runs"] == 3
    if not ctx.has_gpu:
        assert not step.graph and "no GPU" in step.why_not_graph


def test_replay_keeps_its_context_alive():
    def make():
        c = fj.Context()
        counter = fj.tensor(np.zeros(1, np.int32), context=c)
        fj.update_slice(counter, 0, 0, counter + 1)
        return fj.Replay([counter])

    step = make()
    gc.collect()
    step.run()
    step.run()
    out = step.outputs[0]
    del step
    gc.collect()
    assert out.to_numpy().tolist() == [2]  # the output holds the Context, as any Tensor does


D, T, STEPS = 8, 6, 4  # width, history length, steps


def decode_state(ctx, rng_seed=0):
    """The buffers of a small decode-like loop: weights, hidden state, position, history, key."""
    r = np.random.default_rng(rng_seed)
    return dict(
        w=fj.tensor(r.standard_normal((D, D)).astype(np.float32) / np.sqrt(D), context=ctx),
        h=fj.tensor(r.standard_normal((1, D)).astype(np.float32), context=ctx),
        pos=fj.tensor(np.zeros(1, np.int32), context=ctx),
        hist=fj.tensor(np.zeros((T, D), np.float32), context=ctx),
        key=fj.tensor(np.array([1234, 0], np.int64), context=ctx),
    )


def record_step(ctx, s):
    """One step: h = tanh(h @ w + noise), noise drawn by the key; h written into the history at
    the position; the position and the key's offset advanced. Reads come before the writes."""
    noise = ctx.rand([1, D], s["key"]) * 0.1
    h = fj.tanh(s["h"] @ s["w"] + noise)
    fj.update_slice(s["hist"], 0, s["pos"], h)
    fj.update_slice(s["h"], 0, 0, h)
    fj.update_slice(s["pos"], 0, 0, s["pos"] + 1)
    fj.update_slice(s["key"], 0, 1, s["key"][1:2] + 1)
    return [s["h"], s["hist"], s["pos"], s["key"]]


def test_replayed_step_equals_the_step_evaluated_each_time(ctx):
    replayed = decode_state(ctx)
    step = fj.Replay(record_step(ctx, replayed))
    for _ in range(STEPS):
        step.run()
    assert step.runs == STEPS

    fresh = fj.Context()
    evaluated = decode_state(fresh)
    for _ in range(STEPS):
        fj.eval(*record_step(fresh, evaluated))

    assert replayed["pos"].to_numpy().tolist() == [STEPS]
    assert replayed["key"].to_numpy().tolist() == [1234, STEPS]
    for name in ("pos", "key"):
        np.testing.assert_array_equal(replayed[name].to_numpy(), evaluated[name].to_numpy())
    for name in ("h", "hist"):
        np.testing.assert_allclose(replayed[name].to_numpy(), evaluated[name].to_numpy(),
                                   rtol=1e-6, atol=1e-6)
    hist = replayed["hist"].to_numpy()
    assert np.all(hist[STEPS:] == 0) and np.all(np.abs(hist[:STEPS]).sum(axis=1) > 0)
    # each step wrote its own row, at the position it read
    assert len({row.tobytes() for row in hist[:STEPS]}) == STEPS
    # the outputs are the buffers given, in their order
    np.testing.assert_array_equal(step.outputs[1].to_numpy(), hist)


def test_keyed_draws_equal_seeded_ones(ctx, rng):
    key = fj.tensor(np.array([1234, 7], np.int64), context=ctx)
    np.testing.assert_array_equal(ctx.rand([3, 5], key).to_numpy(),
                                  ctx.rand([3, 5], 1234, 7).to_numpy())
    np.testing.assert_array_equal(ctx.randn([3, 5], key=key).to_numpy(),
                                  ctx.randn([3, 5], seed=1234, offset=7).to_numpy())
    logits = fj.tensor(rng.standard_normal((4, 50)).astype(np.float32), context=ctx)
    keyed = fj.sample(logits, 0.8, key).to_numpy()
    assert keyed.dtype == np.int64 and keyed.shape == (4,)
    np.testing.assert_array_equal(keyed, fj.sample(logits, 0.8, seed=1234, offset=7).to_numpy())
    np.testing.assert_array_equal(fj.sample(logits, 0.8, key=key).to_numpy(), keyed)


def test_sample_filters_and_argmax(ctx, rng):
    a = rng.standard_normal((4, 50)).astype(np.float32)
    logits = fj.tensor(a, context=ctx)
    # temperature 0, and a draw among one kept logit, are argmax
    np.testing.assert_array_equal(fj.sample(logits, 0.0, seed=3).to_numpy(), a.argmax(-1))
    np.testing.assert_array_equal(
        fj.sample(fj.top_k_filter(logits, 1), 1.0, seed=3).to_numpy(), a.argmax(-1))
    kth = np.sort(a, axis=-1)[:, -5:-4]
    np.testing.assert_array_equal(fj.top_k_filter(logits, 5).to_numpy(),
                                  np.where(a >= kth, a, -np.inf))
    # top_p keeps the fewest largest logits whose probability reaches p
    p = np.exp(a - a.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    order = np.argsort(-a, axis=-1)
    kept = (np.cumsum(np.take_along_axis(p, order, -1), -1) >= 0.5).argmax(-1) + 1
    want = np.full_like(a, -np.inf)
    for row, n in enumerate(kept):
        want[row, order[row, :n]] = a[row, order[row, :n]]
    np.testing.assert_array_equal(fj.top_p_filter(logits, 0.5).to_numpy(), want)
    np.testing.assert_array_equal(fj.top_p_filter(logits, 1.0).to_numpy(), a)


def test_replay_errors_name_the_problem(ctx):
    with pytest.raises(fj.UsageError, match="Replay: no outputs"):
        fj.Replay([])
    done = (fj.tensor(np.ones(3, np.float32), context=ctx) + 1).eval()
    with pytest.raises(fj.UsageError, match="already evaluated"):
        fj.Replay([done])


def test_write_and_draw_errors(ctx):
    x = fj.tensor(np.ones((2, 3), np.float32), context=ctx)
    with pytest.raises(fj.UsageError, match="update_slice.*pending"):
        fj.update_slice(x + 1, 0, 0, x[:1])
    with pytest.raises(TypeError, match="start is a float"):
        fj.update_slice(x, 0, 0.5, x[:1])
    with pytest.raises(fj.UsageError, match="update_slice: the start .* one i32 or i64"):
        fj.update_slice(x, 0, fj.tensor([0.0], context=ctx), x[:1])
    with pytest.raises(fj.UsageError, match=r"rand: the key is i32\[2\]; it must be i64\[2\]"):
        ctx.rand([2], fj.tensor(np.zeros(2, np.int32), context=ctx))
    with pytest.raises(fj.UsageError, match="top_k"):
        fj.top_k_filter(x, 0)
    with pytest.raises(fj.UsageError, match="top_p"):
        fj.top_p_filter(x, 1.5)
    with pytest.raises(fj.UsageError, match="temperature"):
        fj.sample(x, -1.0)
