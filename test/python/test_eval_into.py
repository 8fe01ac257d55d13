"""Tensor.eval_into: a result computed into the caller's numpy array or torch CPU tensor."""
import gc
import sys

import numpy as np
import pytest

import fusejit as fj


@pytest.fixture
def ctx():
    """The destinations here are host memory: a Context on the CPU reference, on a GPU machine
    too (a GPU Context writes device memory only)."""
    return fj.Context(device=fj.CPU)


def values(ctx, shape=(4, 6), dtype=fj.float32):
    x = fj.tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), context=ctx)
    return fj.relu(x * 2 - 5).astype(dtype)


def test_into_a_numpy_array(ctx):
    y = values(ctx)
    want = np.maximum(np.arange(24, dtype=np.float32).reshape(4, 6) * 2 - 5, 0)
    out = np.full((4, 6), -1.0, np.float32)
    assert y.eval_into(out) is y
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(y.to_numpy(), want)  # the tensor is computed too


def test_a_larger_buffer_keeps_its_tail(ctx):
    """At least the result's bytes, of any shape: the result fills the start, densely."""
    out = np.full(30, -7.0, np.float32)
    fj.eval_into(values(ctx), out)
    np.testing.assert_array_equal(out[:24], values(ctx).to_numpy().reshape(-1))
    np.testing.assert_array_equal(out[24:], np.full(6, -7.0, np.float32))


def test_a_computed_tensor_is_copied_in(ctx):
    y = values(ctx).eval()
    out = np.zeros((4, 6), np.float32)
    y.eval_into(out)
    np.testing.assert_array_equal(out, y.to_numpy())
    assert ctx.stats()["outputs_copied"] >= 1


def test_the_destination_is_handed_back(ctx):
    """fusejit holds the producer's tensor while it may write it, and lets go afterwards: the
    array's reference count is back where it was (on the CPU path, at once)."""
    out = np.zeros((4, 6), np.float32)
    before = sys.getrefcount(out)
    values(ctx).eval_into(out)
    gc.collect()
    assert sys.getrefcount(out) == before
    with pytest.raises(fj.UsageError):
        values(ctx).eval_into(np.zeros(3, np.float32))  # too small: handed back on errors too
    gc.collect()
    assert sys.getrefcount(out) == before


def test_wrong_dtype_is_refused(ctx):
    out = np.zeros((4, 6), np.float64)
    with pytest.raises(fj.UsageError, match="dtype.*not the tensor.s f32"):
        values(ctx).eval_into(out)
    with pytest.raises(fj.UsageError, match="dtype"):
        values(ctx, dtype=fj.float16).eval_into(np.zeros((4, 6), np.float32))


def test_too_small_is_refused(ctx):
    with pytest.raises(fj.UsageError, match="holds 92 bytes .* needs 96"):
        values(ctx).eval_into(np.zeros(23, np.float32))


def test_non_contiguous_is_refused(ctx):
    out = np.zeros((6, 4), np.float32).T  # (4, 6), column-major
    with pytest.raises(fj.UsageError, match="not contiguous"):
        values(ctx).eval_into(out)
    with pytest.raises(fj.UsageError, match="not contiguous"):
        values(ctx).eval_into(np.zeros((4, 12), np.float32)[:, ::2])
    # A row of a matrix is contiguous whatever its axis of extent 1 says.
    rows = np.zeros((3, 24), np.float32)
    values(ctx, shape=(1, 24)).eval_into(rows[1:2])
    np.testing.assert_array_equal(rows[1:2], values(ctx, shape=(1, 24)).to_numpy())
    assert not rows[0].any() and not rows[2].any()


def test_not_a_dlpack_producer(ctx):
    with pytest.raises(TypeError, match="__dlpack__"):
        values(ctx).eval_into([0.0] * 24)


def test_read_only_is_refused(ctx):
    out = np.zeros((4, 6), np.float32)
    out.flags.writeable = False
    with pytest.raises(BufferError):
        values(ctx).eval_into(out)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_into_a_torch_tensor(ctx, dtype):
    fj_dtype = {torch.float32: fj.float32, torch.float16: fj.float16,
                torch.bfloat16: fj.bfloat16}[dtype]
    out = torch.full((4, 6), -1.0, dtype=dtype)
    y = values(ctx, dtype=fj_dtype)
    y.eval_into(out)
    want = torch.relu(torch.arange(24.0).reshape(4, 6) * 2 - 5).to(dtype)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_torch_refusals(ctx):
    with pytest.raises(fj.UsageError, match="dtype"):
        values(ctx).eval_into(torch.zeros(4, 6, dtype=torch.int32))
    with pytest.raises(fj.UsageError, match="not contiguous"):
        values(ctx).eval_into(torch.zeros(6, 4).t())
    with pytest.raises(fj.UsageError, match="needs 96"):
        values(ctx).eval_into(torch.zeros(5, 4))

