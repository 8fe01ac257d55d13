"""Mistakes are Python exceptions carrying the C++ message, never crashes."""
import numpy as np
import pytest

import fusejit as fj


def test_broadcast_error_is_a_value_error_naming_the_shapes(ctx):
    x = fj.tensor(np.ones((2, 3), np.float32), context=ctx)
    y = fj.tensor(np.ones((4,), np.float32), context=ctx)
    with pytest.raises(ValueError, match=r"add: shapes \[2,3\] and \[4\] do not broadcast") as e:
        x + y
    assert isinstance(e.value, fj.UsageError) and isinstance(e.value, fj.Error)
    with pytest.raises(fj.UsageError, match="matmul"):
        x @ x


def test_bad_axes_and_shapes(ctx):
    x = fj.tensor(np.ones((2, 3), np.float32), context=ctx)
    with pytest.raises(fj.UsageError, match="sum"):
        fj.sum(x, axis=5)
    with pytest.raises(fj.UsageError, match="reshape"):
        x.reshape(4, 2)
    with pytest.raises(fj.UsageError, match="approximate"):
        fj.gelu(x, approximate="fast")
    with pytest.raises(IndexError, match="out of bounds"):
        x[2]
    with pytest.raises(fj.UsageError, match="3 indices for a tensor of rank 2"):
        x[0, 0, 0]
    with pytest.raises(fj.UsageError, match="step"):
        x[::-1]


def test_wrong_argument_types_are_type_errors(ctx):
    x = fj.tensor(np.ones((2, 3), np.float32), context=ctx)
    with pytest.raises(TypeError):
        x + "one"
    with pytest.raises(TypeError, match="index_select"):
        x[[0, 1]]
    with pytest.raises(TypeError, match="complex64 has no fusejit dtype"):
        fj.tensor(np.ones(2, np.complex64), context=ctx)


def test_mixing_contexts_is_refused(ctx):
    other = fj.Context()
    x = fj.tensor(np.ones(3, np.float32), context=ctx)
    y = fj.tensor(np.ones(3, np.float32), context=other)
    with pytest.raises(fj.UsageError, match="Context"):
        (x + y).to_numpy()


def test_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("FUSEJIT_CACHE", "sometimes")
    with pytest.raises(fj.UsageError, match="FUSEJIT_CACHE"):
        fj.Context()
    monkeypatch.delenv("FUSEJIT_CACHE")
    with pytest.raises(fj.UsageError, match="FUSEJIT_LOG"):
        fj.Context(options={"LOG": "loud"})


def test_placeholder_cannot_be_evaluated(ctx):
    p = ctx.placeholder([2, 2])
    with pytest.raises(fj.Error, match="placeholder"):
        (p + 1).to_numpy()


def test_truth_value_of_many_elements(ctx):
    with pytest.raises(ValueError, match="ambiguous"):
        bool(fj.tensor([1.0, 2.0], context=ctx))
