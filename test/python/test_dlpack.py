"""Zero-copy exchange through DLPack, both ways: with numpy and torch CPU tensors on a CPU
reference Context, then with torch CUDA tensors on a GPU one."""
import gc

import numpy as np
import pytest

import fusejit as fj

torch = pytest.importorskip("torch")


@pytest.fixture
def ctx():
    """Host memory is exchanged here: a Context on the CPU reference, on a GPU machine too (the
    CUDA exchanges below make their own)."""
    return fj.Context(device=fj.CPU)


def test_torch_reads_a_fusejit_result_in_place(ctx):
    y = fj.exp(fj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), context=ctx))
    t = torch.from_dlpack(y)
    assert t.data_ptr() == y.data_ptr()  # the same memory
    assert t.shape == (2, 3) and t.dtype == torch.float32 and t.device.type == "cpu"
    torch.testing.assert_close(t, torch.exp(torch.arange(6.0).reshape(2, 3)))
    assert y.__dlpack_device__() == (1, 0)


def test_an_export_outlives_the_tensor_and_its_context():
    ctx = fj.Context(device=fj.CPU)
    y = fj.tensor(np.full((4,), 7, np.int64), context=ctx) * 2
    t = torch.from_dlpack(y)
    del y, ctx
    gc.collect()
    assert t.tolist() == [14, 14, 14, 14]


def test_fusejit_reads_torch_memory_in_place(ctx):
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = fj.from_dlpack(a, context=ctx)
    assert x.data_ptr() == a.data_ptr()
    np.testing.assert_array_equal((x * 2).to_numpy(), (a * 2).numpy())
    a.add_(100)  # fusejit reads the memory anew at each eval
    np.testing.assert_array_equal((x * 2).to_numpy(), (a * 2).numpy())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_strided_torch_layouts(ctx, dtype, tol):
    """Transposed, sliced, stepped and broadcast layouts are read in place (the layouts of
    test/python/dlpack_torch.py)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(257, 129, generator=g).to(dtype)
    y = torch.randn(129, generator=g).to(dtype).expand(257, 129)  # stride 0
    xt = x.t().contiguous().t()  # strides (1, 257)
    qkv = torch.randn(257, 3 * 129, generator=g).to(dtype)
    rows = torch.randn(514, 129, generator=g).to(dtype)
    cases = [(xt, y), (qkv[:, 129:258], rows[::2])]
    for a, b in cases:
        got = fj.relu(fj.from_dlpack(a, context=ctx) * 2 + fj.from_dlpack(b, context=ctx))
        want = torch.relu(a.float() * 2 + b.float())
        out = torch.from_dlpack(got).float()
        assert ((out - want).norm() / want.norm()).item() <= tol


def test_dtypes_both_ways(ctx):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
                  torch.bool):
        a = (torch.arange(10) % 3).to(dtype)
        x = fj.from_dlpack(a, context=ctx)
        back = torch.from_dlpack(fj.where(x == x, x, x))  # computed, so exported by fusejit
        assert back.dtype == dtype
        assert torch.equal(back, a)


def test_numpy_both_ways(ctx):
    a = np.arange(8, dtype=np.float32)
    x = fj.from_dlpack(a, context=ctx)
    a[0] = 42  # read in place
    y = x + 1
    out = np.from_dlpack(y)
    assert out[0] == 43 and out.ctypes.data == y.data_ptr()


def test_source_kept_alive_until_fusejit_is_done(ctx):
    a = torch.arange(5, dtype=torch.float32)
    x = fj.from_dlpack(a, context=ctx)
    del a
    gc.collect()
    np.testing.assert_array_equal((x + 0).to_numpy(), np.arange(5, dtype=np.float32))


def test_capsules_are_consumed_once(ctx):
    capsule = torch.arange(3, dtype=torch.float32).__dlpack__()
    x = fj.from_dlpack(capsule, context=ctx)
    with pytest.raises(TypeError, match="consumed once"):
        fj.from_dlpack(capsule, context=ctx)
    np.testing.assert_array_equal(x.to_numpy(), [0, 1, 2])


def test_refused_imports_leave_the_producer_whole(ctx):
    a = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(fj.UsageError, match="cast the tensor first"):
        fj.from_dlpack(a, context=ctx)
    assert a.sum().item() == 0  # still usable


def test_export_arguments(ctx):
    y = fj.tensor([1.0, 2.0], context=ctx) * 1
    with pytest.raises(ValueError, match="stream must be None"):
        y.__dlpack__(stream=5)
    with pytest.raises(BufferError, match="copy"):
        y.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="device"):
        y.__dlpack__(dl_device=(2, 0))
    capsule = y.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    assert torch.from_dlpack(capsule).tolist() == [1.0, 2.0]
    del capsule  # a capsule no one consumed frees its export


# CUDA: the same exchange on the GPU (scripts/gpu-check's python suite runs these; without a GPU
# they are skipped). kDLCUDA is device type 2 in DLPack.
on_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not fj.Context.gpu_available()[0],
    reason="needs a CUDA device seen by both torch and fusejit")


def gpu_context(stream=None):
    """A Context on device 0, queueing on `stream` (None: a stream of fusejit's own)."""
    return fj.Context(device=0, stream=stream)


@on_gpu
def test_cuda_round_trip_on_torchs_current_stream():
    ctx = gpu_context(torch.cuda.current_stream())
    a = torch.arange(3 * 1000, dtype=torch.float32, device="cuda").reshape(3, 1000) / 1000
    x = fj.from_dlpack(a, context=ctx)
    assert x.data_ptr() == a.data_ptr()  # fusejit reads torch's memory in place
    y = fj.exp(x) * 2
    t = torch.from_dlpack(y)
    assert t.data_ptr() == y.data_ptr()  # torch reads fusejit's result in place
    assert t.device == a.device and t.shape == (3, 1000)
    assert y.__dlpack_device__() == (2, 0)
    torch.testing.assert_close(t, torch.exp(a) * 2)


@on_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_cuda_dtypes_both_ways(dtype):
    ctx = gpu_context(torch.cuda.current_stream())
    a = (torch.arange(1000, device="cuda") % 7).to(dtype)
    back = torch.from_dlpack(fj.from_dlpack(a, context=ctx) * 2)
    assert back.dtype == dtype and back.device == a.device
    assert torch.equal(back, a * 2)


@on_gpu
def test_cuda_exchange_is_ordered_by_streams_not_by_the_host():
    """fusejit on a stream of its own: the import waits for torch's pending write, the export
    makes torch's stream wait for fusejit's kernel; nobody synchronizes the host in between.
    A delay queued on torch's stream before the write makes a missing wait show as stale
    values."""
    ctx = gpu_context()
    a = torch.zeros(1 << 24, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # about 25 ms of GPU time on torch's current stream
    a.fill_(3.0)
    y = fj.from_dlpack(a, context=ctx) * 2 + 1
    t = torch.from_dlpack(y)  # on torch's current stream: waits for fusejit's kernel
    assert t.data_ptr() == y.data_ptr()
    assert torch.all(t == 7.0).item()


@on_gpu
def test_cuda_export_on_another_torch_stream():
    ctx = gpu_context(torch.cuda.current_stream())
    a = torch.randn(4096, 512, device="cuda")
    y = fj.softmax(fj.from_dlpack(a, context=ctx), -1)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.from_dlpack(y)  # this stream waits for fusejit's work (an event)
        s = t.sum(-1)
    side.synchronize()
    torch.testing.assert_close(s, torch.ones(4096, device="cuda"))
