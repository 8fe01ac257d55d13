"""The ATen ops that real models (nanoGPT's GPT, gpt-fast's Transformer) reach fusejit with:
split, stack, list and tensor indexing, a KV-cache index_put, scaled_dot_product_attention,
casts that name their own device. Each through torch.compile(backend="fusejit") against eager,
with no op left to torch (fusejit.explain's splits), on CPU tensors: on a machine without a GPU
fusejit runs them on its CPU reference (with a GPU the backend leaves CPU tensors to torch,
and these tests skip)."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import fusejit as fj  # noqa: E402
from fusejit import dynamo  # noqa: E402

pytestmark = pytest.mark.skipif(
    fj.Context.gpu_available()[0], reason="CPU tensors stay in torch where fusejit has a GPU")

FLOATS = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def check(fn, *args, tol=1e-5, splits=()):
    """fn compiled with fusejit against eager on args: the same results, a fusejit piece ran,
    and exactly `splits` left to torch (none by default)."""
    before = dynamo.stats()["calls"]
    with torch.no_grad():
        got = torch.compile(fn, backend="fusejit")(*args)
        want = fn(*args)
    assert dynamo.stats()["calls"] > before, "no fusejit piece ran"
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert fj.explain(fn, *args).splits == list(splits)
    return got


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_split_and_split_with_sizes(dtype, tol):
    x = torch.randn(2, 5, 24, dtype=dtype)

    def qkv(x):  # nanoGPT: c_attn(x).split(n_embd, dim=2), the last piece shorter here
        q, k, v = (x * 2).split(10, dim=2)
        return q.sum(-1) + k.sum(-1) + v.sum(-1) * 3

    def sizes(x):  # gpt-fast: wqkv(x).split([dim, kv, kv], dim=-1)
        q, k, v = (x + 1).split([12, 4, 8], dim=-1)
        return torch.cat([v, q, k * k], dim=-1)

    check(qkv, x, tol=tol)
    check(sizes, x, tol=tol)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim):
    def rope(a, b):  # gpt-fast's apply_rotary_emb stacks the two halves on a new last axis
        return torch.stack([a * 2 - b, a + b, -a], dim=dim).flatten(-2)

    check(rope, torch.randn(3, 4, 6), torch.randn(3, 4, 6))


def test_negative_list_index_and_lift_fresh_copy():
    """nanoGPT's last position, x[:, [-1], :]: a constant index tensor (lift_fresh_copy) with a
    negative entry."""
    def last(x):
        return torch.relu(x)[:, [-1], :] * 2

    got = check(last, torch.randn(2, 7, 5))
    assert got.shape == (2, 1, 5)
    e = fj.explain(last, torch.randn(2, 7, 5))
    assert any("aten.lift_fresh_copy.default" in p and "aten.index.Tensor" in p
               for p in map(" ".join, e.pieces))


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_index_with_a_tensor(dtype, tol):
    """gpt-fast: freqs_cis[input_pos] (rows of a table) and causal_mask[None, None, input_pos]
    (the None entries before the index are whole axes); a 2-D and a negative index too."""
    table = torch.randn(16, 8, dtype=dtype)
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool))

    def rows(pos):
        return table[pos] * 2

    def masked(pos, s):
        return torch.where(mask[None, None, pos], s, -1.0)

    def grid(x, idx):
        return x[:, idx] + 1

    check(rows, torch.tensor([3, 0, 15, -2]), tol=tol)
    check(masked, torch.arange(4, 9), torch.randn(1, 2, 5, 16, dtype=dtype), tol=tol)
    got = check(grid, torch.randn(3, 10, 4, dtype=dtype), torch.tensor([[1, -1, 4], [0, 9, 2]]),
                tol=tol)
    assert got.shape == (3, 2, 3, 4)


def test_index_with_an_int32_index_at_the_last_axis():
    check(lambda x, i: x[:, :, i] * 3, torch.randn(2, 3, 9),
          torch.tensor([8, 0, -9], dtype=torch.int32))


def test_index_with_two_tensors_stays_in_torch():
    def pick(x, i, j):
        return x[i, j] + 1

    check(pick, torch.randn(5, 6), torch.tensor([0, 4]), torch.tensor([1, 5]),
          splits=["aten.index.Tensor (2 index tensors (fusejit takes one, the other entries "
                  "None))"])


def refusals(fn, *args):
    """{op: why} from fusejit._aten.supports over fn's ATen graph, traced with fake tensors:
    for what eager torch or Dynamo would not run through torch.compile here (a mask's
    data-dependent size, dropout in the CPU kernel)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusejit import _aten

    graph = make_fx(fn, tracing_mode="fake")(*args).graph
    graph.eliminate_dead_code()  # the getitems of unused outputs, as AOTAutograd's graphs
    return {str(n.target): _aten.supports(n, "cpu") for n in graph.nodes
            if n.op == "call_function"}


def test_boolean_index_stays_in_torch():
    why = refusals(lambda x, m: x[m] + 1, torch.randn(4, 3), torch.tensor([1, 0, 1, 1]).bool())
    assert why["aten.index.Tensor"] == \
        "a boolean index (a mask: the result's size depends on the data)"


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_kv_cache_index_put(dtype, tol):
    """gpt-fast's KVCache.update: k_out[:, :, input_pos] = k_val on a cache that is a graph
    input, returned here (torch.compile functionalizes the write into index_put)."""
    def update(cache, pos, k):
        out = cache.clone()
        out[:, :, pos] = k * 2
        return out

    cache = torch.randn(1, 2, 12, 4, dtype=dtype)
    check(update, cache, torch.tensor([3, 4, 5]), torch.randn(1, 2, 3, 4, dtype=dtype), tol=tol)
    check(update, cache, torch.tensor([11, 0]), torch.randn(1, 2, 2, 4, dtype=dtype), tol=tol)
    check(update, cache, torch.tensor([-1]), torch.randn(1, 2, 1, 4, dtype=dtype), tol=tol)


def test_index_put_in_place_on_an_input_buffer():
    """The module-buffer form: the write lands in the caller's cache (AOTAutograd copies the
    index_put's result back), and what reads the cache after the write sees the new rows."""
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.zeros(1, 2, 8, 4))

        def forward(self, pos, k):
            self.k[:, :, pos] = k
            return self.k.sum(-1)

    eager, compiled = Cache(), Cache()
    pos, k = torch.tensor([2, 3]), torch.randn(1, 2, 2, 4)
    with torch.no_grad():
        got = torch.compile(compiled, backend="fusejit")(pos, k)
        want = eager(pos, k)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled.k, eager.k)
    assert fj.explain(Cache(), pos, k).splits == []


def test_index_put_broadcasts_values():
    def fill(x, pos, v):
        return torch.ops.aten.index_put(x, [None, pos], v) + 0

    check(fill, torch.randn(3, 6, 4), torch.tensor([1, 4]), torch.randn(4))


def test_index_put_with_accumulate_stays_in_torch():
    def add_at(x, pos, v):
        return torch.ops.aten.index_put(x * 2, [pos], v, accumulate=True) + 1

    x, pos, v = torch.randn(6, 3), torch.tensor([1, 1, 4]), torch.randn(3, 3)
    check(add_at, x, pos, v, splits=[
        "aten.index_put.default (index_put with accumulate=True (a scatter-add))"])


def scores_reference(q, k, v, mask=None, causal=False, scale=None):
    """Attention in f32 by hand: what the fusejit translation computes."""
    q, k, v = q.float(), k.float(), v.float()
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_sdpa_causal(dtype, tol):
    q, k, v = (torch.randn(2, 3, 10, 16, dtype=dtype) for _ in range(3))

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    got = check(attn, q, k, v, tol=tol)
    torch.testing.assert_close(got.float(), scores_reference(q, k, v, causal=True), atol=tol,
                               rtol=tol)
    # is_causal is top-left aligned where the query rows are fewer than the keys.
    check(attn, q[:, :, :4], k, v, tol=tol)


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_sdpa_boolean_mask(dtype, tol):
    """gpt-fast's prefill: a boolean mask over [1, 1, rows, cache] picked by position."""
    q, k, v = (torch.randn(1, 4, 6, 8, dtype=dtype) for _ in range(3))
    mask = torch.rand(1, 1, 6, 6) > 0.4
    mask[..., 0] = True  # no row fully masked: torch and softmax disagree on those (NaN)

    def attn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    got = check(attn, q, k, v, mask, tol=tol)
    torch.testing.assert_close(got.float(), scores_reference(q, k, v, mask), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,tol", FLOATS)
def test_sdpa_float_mask_and_scale(dtype, tol):
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=dtype) for _ in range(3))
    bias = torch.randn(5, 5, dtype=dtype)

    def attn(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)

    got = check(attn, q, k, v, bias, tol=tol)
    torch.testing.assert_close(got.float(), scores_reference(q, k, v, bias, scale=0.3),
                               atol=tol, rtol=tol)


def test_sdpa_broadcast_batch():
    """k and v shared by every head (a batch axis of 1, broadcast by the matmuls)."""
    q = torch.randn(2, 4, 7, 8)
    k, v = torch.randn(2, 1, 9, 8), torch.randn(2, 1, 9, 8)
    check(lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, is_causal=False, scale=0.5)[0] * 1, q, k, v)


def test_sdpa_heads_that_do_not_broadcast_stay_in_torch():
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    why = refusals(lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v)[0], q, k, k)
    assert why["aten._scaled_dot_product_flash_attention_for_cpu.default"].startswith(
        "attention whose heads do not broadcast (q [1, 4, 6, 8], k [1, 2, 6, 8]")


def test_sdpa_reading_the_log_sum_exp_stays_in_torch():
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))

    def both(q, k, v):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
        return out * 2, lse + 1

    e = fj.explain(both, q, k, v)
    assert [s.split(" (")[0] for s in e.splits] == [
        "aten._scaled_dot_product_flash_attention_for_cpu.default"]
    assert "an output past the first" in e.splits[0]


def test_sdpa_with_dropout_stays_in_torch():
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    why = refusals(lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.5)[0] + 1, q, k, v)
    assert why["aten._scaled_dot_product_flash_attention_for_cpu.default"] == \
        "attention with dropout_p=0.5"
    assert why["aten.add.Tensor"] is None


@pytest.mark.parametrize("target", [
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
])
@pytest.mark.parametrize("mask", [None, "float", "bool"])
def test_every_sdpa_variant_translates(target, mask):
    """The GPU variants cannot run here: their translations are called directly, on fusejit
    tensors, against attention in torch; the output comes first in a tuple of the op's length.
    (torch turns a boolean attn_mask into a float one before these ops, so a boolean mask
    reaches them only from graphs that call the op itself: checked here.)"""
    from fusejit import _aten

    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 5)
    names = [a.name for a in target._schema.arguments]
    if mask is not None and "attn_bias" not in names and "attn_mask" not in names:
        pytest.skip("this variant takes no mask")
    m = {None: None, "float": torch.randn(1, 1, 6, 6), "bool": torch.rand(6, 6) > 0.5}[mask]
    if m is not None and m.dtype == torch.bool:
        m[:, 0] = True  # no row fully masked
    fm = fj.from_dlpack(m) if m is not None else None
    fargs = [fj.from_dlpack(t) for t in (q, k, v)]

    def call(**kwargs):
        if "attn_bias" in names:
            return _aten.TABLE[target](*fargs, fm, True, **kwargs)
        if "attn_mask" in names:
            return _aten.TABLE[target](*fargs, attn_mask=fm, **kwargs)
        return _aten.TABLE[target](*fargs, **kwargs)

    out = call(scale=0.25)
    assert len(out) == len(target._schema.returns)
    assert all(o is None for o in out[1:])
    torch.testing.assert_close(torch.from_dlpack(out[0].eval()),
                               scores_reference(q, k, v, m, scale=0.25), atol=1e-5, rtol=1e-5)
    if m is None:
        causal = call(is_causal=True)[0]
        torch.testing.assert_close(torch.from_dlpack(causal.eval()),
                                   scores_reference(q, k, v, causal=True), atol=1e-5, rtol=1e-5)


def test_to_copy_naming_its_own_device_is_a_cast():
    """AOTAutograd spells out layout=torch.strided and the input's device on gpt-fast's casts."""
    def cast(x):
        return torch.ops.aten._to_copy(x * 2, dtype=torch.bfloat16, layout=torch.strided,
                                       device=torch.device("cpu")) + 1

    check(cast, torch.randn(4, 8), tol=2e-2)


def test_to_copy_to_another_device_stays_in_torch():
    from fusejit import _aten

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 3)
    for kwargs, why in [
            (dict(device=torch.device("cuda", 0)), "a copy from cpu to cuda:0"),
            (dict(layout=torch.sparse_coo), "a copy to layout torch.sparse_coo"),
            (dict(device=torch.device("cpu"), layout=torch.strided), None)]:
        node = graph.call_function(torch.ops.aten._to_copy.default, (x,), kwargs)
        node.meta["val"] = x.meta["val"]
        assert _aten.supports(node, "cpu") == why


def test_attention_block():
    """A nanoGPT-style attention block end to end: one projection split into q, k, v, heads,
    causal SDPA, the output projection, the last position by a list index."""
    torch.manual_seed(1)
    attn, proj = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)

    def block(x):
        b, t, c = x.shape
        q, k, v = attn(x).split(32, dim=2)
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return proj(y.transpose(1, 2).contiguous().view(b, t, c))[:, [-1], :]

    check(block, torch.randn(2, 9, 32), tol=1e-4)


@pytest.mark.parametrize("mask", ["causal", "boolean", "additive"])
def test_sdpa_translation_is_the_fused_attention_pattern(mask):
    """What the SDPA translation records is attention as fusejit's fusion finds it
    (docs/fused-attention.md): the plan fuses it into one attention region (on a GPU, one
    kernel or cuDNN call), with the mask of the right kind. Planning runs nothing."""
    from fusejit import _aten

    q, k, v = (fj.from_dlpack(torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)) for _ in range(3))
    kwargs = {"causal": dict(is_causal=True),
              "boolean": dict(attn_mask=fj.from_dlpack(torch.rand(1, 1, 64, 64) > 0.3)),
              "additive": dict(attn_mask=fj.from_dlpack(torch.randn(64, 64, dtype=torch.bfloat16)))}
    out = _aten.TABLE[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default](
        q, k, v, **kwargs[mask])[0]
    fused = [line for line in fj.plan(out).splitlines()
             if "fused" in line and "attention softmax(q kᵀ * 0.125" in line]
    assert len(fused) == 1 and mask in fused[0], fj.plan(out)
