"""The GIL is released while fusejit runs long C++ work (an eval on the CPU reference, a copy
out), so that other Python threads make progress meanwhile."""
import sys
import threading
import time

import numpy as np
import pytest

import fusejit as fj


@pytest.fixture
def ctx():
    """The CPU reference on any machine: its evals are the long C++ work these tests need, and
    numpy memory is read in place by it alone (a GPU Context takes device memory)."""
    return fj.Context(device=fj.CPU)


class Counter(threading.Thread):
    """Counts while running, sleeping a millisecond between counts: a sleep gives the GIL back
    at once, so the thread never keeps the main thread waiting for it."""

    def __init__(self):
        super().__init__(daemon=True)
        self.count = 0
        self.started = threading.Event()
        self.stop = False

    def run(self):
        self.started.set()
        while not self.stop:
            self.count += 1
            time.sleep(0.001)


@pytest.fixture
def no_forced_switch():
    """Python takes the GIL from a thread only every switch interval (5 ms by default): with an
    interval of a minute, another thread runs only while the main thread releases the GIL
    itself, as fusejit does in an eval. Without that release, the counter cannot move."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    yield
    sys.setswitchinterval(before)


def long_product(ctx):
    """A matmul big enough that the CPU reference takes well over 100 ms (about 0.2 s on a
    core of the CI machine)."""
    rng = np.random.default_rng(0)
    a = fj.tensor(rng.standard_normal((1024, 1024), dtype=np.float32), context=ctx)
    b = fj.tensor(rng.standard_normal((1024, 1024), dtype=np.float32), context=ctx)
    return fj.relu(a @ b) + 1


def during(fn):
    """The counts the counter thread made while fn ran, and fn's seconds."""
    counter = Counter()
    counter.start()
    counter.started.wait()
    before = counter.count
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    counts = counter.count - before
    counter.stop = True
    counter.join()
    return counts, seconds


def test_another_thread_runs_during_an_eval(ctx, no_forced_switch):
    y = long_product(ctx)
    counts, seconds = during(y.eval)
    assert counts > 0, f"no other thread ran during the eval ({seconds:.3f} s): the GIL was held"


@pytest.mark.parametrize("how", ["to_numpy", "fj.eval", "eval_all", "eval_into"])
def test_every_long_entry_point_releases_the_gil(ctx, no_forced_switch, how):
    y = long_product(ctx)
    out = np.empty((1024, 1024), np.float32)
    run = {
        "to_numpy": y.to_numpy,
        "fj.eval": lambda: fj.eval(y),
        "eval_all": ctx.eval_all,
        "eval_into": lambda: y.eval_into(out),
    }[how]
    counts, _ = during(run)
    assert counts > 0


def test_threads_share_a_context(ctx):
    """Ops recorded by one thread while another evaluates on the same Context: neither waits
    for the other forever (the evaluating thread holds the Context's lock without the GIL)."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((64, 64), dtype=np.float32)
    errors = []

    def work():
        try:
            for _ in range(20):
                x = fj.from_dlpack(data.copy(), context=ctx)  # numpy's deleter takes the GIL
                np.testing.assert_allclose((x @ x).to_numpy(), data @ data, rtol=1e-4, atol=1e-4)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    assert not errors, errors
