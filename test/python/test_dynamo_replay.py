"""The backend's replayed calls (fusejit.dynamo, step 4 of its docstring): from the second call
of a signature on, a piece runs as a fusejit.Replay. Each test checks the results against eager
at every call, so a Replay that read a stale input, or handed out a buffer the next call
rewrites, fails here."""
import contextlib
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import fusejit as fj  # noqa: E402
from conftest import DEVICE  # noqa: E402
from fusejit import dynamo  # noqa: E402

# conftest.py: a clean Dynamo, seeded, every tensor on DEVICE, and no autograd.
pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")


@pytest.fixture(autouse=True)
def replay_not_turned_off(monkeypatch):
    """Calls replay whatever the environment says (autouse: before fresh_dynamo_no_grad)."""
    monkeypatch.delenv("FUSEJIT_DYNAMO_REPLAY", raising=False)


def delta(before):
    after = dynamo.stats()
    return {k: after[k] - before[k] for k in after}


def mlp():
    lin1, lin2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 24)

    def f(x):
        return torch.softmax(lin2(F.gelu(lin1(x))), dim=-1) + x

    return f


def fresh_calls(calls, batch=6):
    """`calls` calls of a compiled mlp on fresh inputs, each checked against eager; returns the
    change in dynamo.stats()."""
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")
    before = dynamo.stats()
    for _ in range(calls):
        x = torch.randn(batch, 24)  # a fresh tensor: its address may or may not be the last one's
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    return delta(before)


def test_new_inputs_every_call_agree_with_eager():
    d = fresh_calls(5)
    assert d["calls"] == 5
    assert d["replayed_calls"] >= 3, d
    assert 1 <= d["replays_built"] <= 3, d


def test_outputs_are_not_rewritten_by_the_next_call():
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")
    xs = [torch.randn(6, 24) for _ in range(4)]
    outs = [compiled(x) for x in xs]  # the last three are replayed
    assert dynamo.stats()["replayed_calls"] > 0
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, f(x), atol=1e-5, rtol=1e-5)


def test_an_input_written_in_place_is_read_again():
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")
    x = torch.randn(6, 24)
    before = dynamo.stats()
    for step in range(4):
        x.copy_(torch.randn(6, 24))  # same address, new values
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5, msg=f"call {step}")
    assert delta(before)["replayed_calls"] == 3


def test_a_weight_changed_in_place_is_seen():
    lin = torch.nn.Linear(16, 16)
    compiled = torch.compile(lambda x: torch.tanh(lin(x)), backend="fusejit")
    x = torch.randn(3, 16)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), torch.tanh(lin(x)), atol=1e-5, rtol=1e-5)
        lin.weight.mul_(-0.5)
    assert dynamo.stats()["replayed_calls"] > 0


def test_a_new_size_gets_its_own_replay():
    f = mlp()
    compiled = torch.compile(f, backend="fusejit", dynamic=True)
    before = dynamo.stats()
    for batch in (3, 5, 3, 5, 3, 5):
        x = torch.randn(batch, 24)
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    d = delta(before)
    assert d["translations"] <= 1 and d["calls"] == 6
    assert d["replayed_calls"] >= 2, d


def test_sizes_that_dynamo_makes_dynamic_by_itself():
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")  # a second size: a graph with symbolic sizes
    before = dynamo.stats()
    for batch in (3, 5, 7, 3, 5, 7, 5):
        x = torch.randn(batch, 24)
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5, msg=f"batch {batch}")
    assert delta(before)["replayed_calls"] >= 3


def test_transposed_and_broadcast_inputs():
    compiled = torch.compile(lambda a, b: torch.relu(a * 2 + b), backend="fusejit")
    base = torch.randn(9, 7)
    for _ in range(3):
        a, b = base.t(), torch.randn(9).expand(7, 9)  # read in place: permuted, stride-0 axis
        torch.testing.assert_close(compiled(a, b), torch.relu(a * 2 + b))
        base.add_(1)


def test_replay_off_records_every_call(monkeypatch):
    monkeypatch.setenv("FUSEJIT_DYNAMO_REPLAY", "0")
    d = fresh_calls(3)
    assert d["calls"] == 3 and d["replayed_calls"] == 0 and d["replays_built"] == 0


def test_a_model_with_a_split_replays_its_pieces():
    lin = torch.nn.Linear(12, 12)

    def f(x):
        return torch.cumsum(torch.relu(lin(x)), dim=-1).sigmoid() * 2  # cumsum stays in torch

    compiled = torch.compile(f, backend="fusejit")
    before = dynamo.stats()
    for _ in range(4):
        x = torch.randn(5, 12)
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    assert delta(before)["replayed_calls"] >= 4, "both pieces replay from the second call on"


def test_an_input_at_an_unaligned_address_is_staged():
    compiled = torch.compile(lambda x: torch.exp(x) * 2, backend="fusejit")
    base = torch.randn(1000)
    x = base[3:515]  # 12 bytes past an allocation's start: a Replay reads it through its buffer
    before = dynamo.stats()
    for _ in range(3):
        torch.testing.assert_close(compiled(x), torch.exp(x) * 2)
        base.mul_(0.5)
    assert delta(before)["replayed_calls"] == 2


def test_a_replay_that_does_not_fit_leaves_the_calls_recorded(monkeypatch):
    def no_room(outputs):
        raise fj.OutOfMemoryError("out of GPU memory: allocating a Replay's buffers (test)")

    monkeypatch.setattr(dynamo.fj, "Replay", no_room)
    d = fresh_calls(4)
    assert d["calls"] == 4 and d["replayed_calls"] == 0 and d["replays_built"] == 0


def test_a_graph_with_a_constant_tensor_runs_whole():
    lin = torch.nn.Linear(16, 16)

    def f(x):
        return torch.tanh(lin(x[:, [-1], :]))  # the index [-1] is a constant of the graph

    e = fj.explain(f, torch.randn(2, 5, 16))
    assert e.splits == [] and len(e.pieces) == 1
    compiled = torch.compile(f, backend="fusejit")
    before = dynamo.stats()
    for _ in range(3):
        x = torch.randn(2, 5, 16)
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    assert delta(before)["replayed_calls"] == 2


def run_threads(compiled, f, threads=4, device_mode=True):
    """Each of `threads` threads calls `compiled` 5 times on fresh inputs and compares with `f`,
    under the test's device mode (so that Dynamo's guards pass and the threads share the
    compiled function) or without it (each thread's first call compiles the function again).
    Without the device mode the first calls take turns: while one thread's graph is traced by
    FX (a process-wide flag in torch), torch refuses any other thread's call of a compiled
    function ("Detected that you are using FX to symbolically trace a dynamo-optimized
    function"), under every backend; the four calls after it run together. The errors, each
    with its thread."""
    import threading

    errors = []
    compiling = threading.Lock()

    def worker(seed):
        try:
            g = torch.Generator(device=DEVICE).manual_seed(seed)
            with torch.device(DEVICE) if device_mode else contextlib.nullcontext(), torch.no_grad():
                for i in range(5):
                    x = torch.randn(6, 24, generator=g, device=DEVICE)
                    with compiling if i == 0 and not device_mode else contextlib.nullcontext():
                        y = compiled(x)
                    torch.testing.assert_close(y, f(x), atol=1e-5, rtol=1e-5)
        except Exception as e:  # noqa: BLE001 (reported below, with its thread)
            errors.append(f"thread {seed}: {e!r}")

    workers = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return errors


def test_threads_calling_one_compiled_function():
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")
    compiled(torch.randn(6, 24))  # compiled once, before the threads
    before = dynamo.stats()
    assert not run_threads(compiled, f)
    d = delta(before)
    assert d["graphs"] == 0  # one compiled function, shared
    assert d["calls"] == 20


def test_threads_compiling_one_function_each():
    # Without the main thread's device mode, Dynamo's guards fail in each thread and every thread
    # compiles the function again: pieces of several graphs on the backend's one Context at once.
    f = mlp()
    compiled = torch.compile(f, backend="fusejit")
    compiled(torch.randn(6, 24))
    # Only the results are checked: how often each thread compiles, and whether Dynamo falls
    # back to eager past its recompile limit, are Dynamo's to decide.
    assert not run_threads(compiled, f, device_mode=False)
