"""torch.compile(backend="fusejit") against eager PyTorch: on CUDA tensors where fusejit has a
GPU (the backend leaves CPU tensors to torch there), else on CPU tensors and the CPU path."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import fusejit as fj  # noqa: E402
from fusejit import dynamo  # noqa: E402

# conftest.py: a clean Dynamo, seeded, and every tensor a test makes on its DEVICE.
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def run_both(fn, *args, atol=1e-5, rtol=1e-5, **compile_kwargs):
    """fn compiled with fusejit and eager on args; checks they agree and that fusejit ran."""
    before = dynamo.stats()["calls"]
    with torch.no_grad():
        got = torch.compile(fn, backend="fusejit", **compile_kwargs)(*args)
        want = fn(*args)
    assert dynamo.stats()["calls"] > before, "no fusejit piece ran"
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
    return got


def test_backend_is_registered():
    assert "fusejit" in torch._dynamo.list_backends()


def test_elementwise_chain():
    def f(x, y):
        return torch.relu(x * 2 - y).sigmoid() + torch.tanh(y) / (x.abs() + 1)

    run_both(f, torch.randn(64, 33), torch.randn(33))
    e = fj.explain(f, torch.randn(64, 33), torch.randn(33))
    assert e.splits == [] and len(e.pieces) == 1


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_softmax(dtype, tol):
    run_both(lambda x: torch.softmax(x / 0.7, dim=-1), torch.randn(16, 100, dtype=dtype),
             atol=tol, rtol=tol)


def test_layer_norm():
    ln = torch.nn.LayerNorm(48)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    run_both(ln, torch.randn(4, 10, 48), atol=1e-4, rtol=1e-4)


def test_matmul_bias_gelu():
    lin = torch.nn.Linear(32, 64)
    run_both(lambda x: F.gelu(lin(x)), torch.randn(8, 32), atol=1e-4, rtol=1e-4)
    run_both(lambda x: F.gelu(lin(x), approximate="tanh"), torch.randn(2, 8, 32), atol=1e-4,
             rtol=1e-4)


def causal_attention(q, k, v):
    """Attention written by hand: scores, a causal mask from positions, softmax, values."""
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    # On q's device: a frame torch.compile traces does not see the fixture's device mode.
    pos = torch.arange(s, device=q.device)
    mask = pos[None, :] > pos[:, None]
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_hand_written_attention():
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    run_both(causal_attention, q, k, v, atol=1e-4, rtol=1e-4)
    assert fj.explain(causal_attention, q, k, v).splits == []


class WithCumsum(torch.nn.Module):
    """A model with an op fusejit lacks (cumsum) between two pieces it takes."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.lin(x)) * 0.5
        return torch.softmax(torch.cumsum(h, dim=-1), dim=-1) + 1


def test_unsupported_op_splits_the_graph():
    model, x = WithCumsum(), torch.randn(4, 16)
    run_both(model, x, atol=1e-5, rtol=1e-5)
    e = fj.explain(model, x)
    assert e.splits == ["aten.cumsum.default (no fusejit op)"]
    assert len(e.pieces) == 2  # before and after the split
    assert "split: aten.cumsum.default (no fusejit op) stays in torch" in str(e)


def test_dynamic_batch_needs_one_translation():
    lin = torch.nn.Linear(24, 24)

    def f(x):
        return torch.softmax(F.gelu(lin(x)) * 2, dim=-1)

    compiled = torch.compile(f, backend="fusejit", dynamic=True)
    before = dynamo.stats()
    with torch.no_grad():
        for batch in (3, 5, 9, 17):
            x = torch.randn(batch, 24)
            torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    after = dynamo.stats()
    assert after["translations"] - before["translations"] == 1
    assert after["graphs"] - before["graphs"] == 1
    assert after["calls"] - before["calls"] == 4


def test_translation_cache_reuses_a_graph_seen_before():
    def f(x):
        return torch.exp(x) * 3 - 1

    run_both(f, torch.randn(5, 7))
    torch._dynamo.reset()  # Dynamo compiles again: the same graph, translated already
    before = dynamo.stats()
    run_both(f, torch.randn(5, 7))
    after = dynamo.stats()
    assert after["translations"] == before["translations"]
    assert after["translation_cache_hits"] > before["translation_cache_hits"]


def test_graphs_needing_gradients_run_in_torch():
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    out = torch.compile(lambda t: torch.tanh(lin(t)).sum(), backend="fusejit")(x)
    out.backward()
    want = torch.autograd.grad(torch.tanh(lin(x)).sum(), x)[0]
    torch.testing.assert_close(x.grad, want)


def test_integer_and_mixed_dtypes():
    def f(ids, table):
        return F.embedding(ids, table).sum(-1) + ids.to(torch.float32)

    run_both(f, torch.randint(0, 10, (3, 5)), torch.randn(10, 4), atol=1e-5, rtol=1e-5)


def test_weight_only_int8_linear():
    """gpt-fast's WeightOnlyInt8Linear: linear(x, w.to(x.dtype)) * scales. On a GPU, a decode
    step's few rows read the int8 weights in the gemv kernel; here, that it translates."""
    w = torch.randint(-127, 128, (96, 64), dtype=torch.int8)
    scales = torch.rand(96) * 0.02 + 0.01

    def f(x):
        return F.linear(x, w.to(dtype=x.dtype)) * scales

    run_both(f, torch.randn(2, 64), atol=1e-4, rtol=1e-4)
    run_both(f, torch.randn(3, 5, 64), atol=1e-4, rtol=1e-4)
