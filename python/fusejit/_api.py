"""The Python side of the lazy API: numpy in and out, the default Context, plan and explain,
DLPack import. The C++ extension (fusejit._fusejit) holds everything else."""
import threading

import numpy as np

from fusejit import _fusejit
from fusejit._fusejit import Context, DType, Tensor

float32 = DType.float32
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
int64 = DType.int64
int8 = DType.int8
bool_ = DType.bool

# numpy's dtype for each fusejit dtype that numpy has (bfloat16 it has not: see to_numpy).
_NUMPY = {
    DType.float32: np.float32,
    DType.float16: np.float16,
    DType.int32: np.int32,
    DType.int64: np.int64,
    DType.int8: np.int8,
    DType.bool: np.bool_,
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}
_FROM_NUMPY[np.dtype(np.float64)] = DType.float32  # as torch.as_tensor(x, dtype=float32)

_default = None
_default_lock = threading.Lock()


def default_context():
    """The Context that tensor(), from_numpy() and from_dlpack() use when given none: GPU 0
    (the CPU reference without one), on fusejit's own stream, options from the FUSEJIT_*
    environment variables as they are at its creation."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def _dtype_of(value):
    if isinstance(value, DType):
        return value
    name = str(np.dtype(value)) if not isinstance(value, str) else value
    for d in DType.__members__.values():
        if str(d) == name or d.name == name:
            return d
    raise TypeError(f"dtype {value!r}: fusejit has float32, float16, bfloat16, int8, int32, int64 and bool")


def tensor(data, dtype=None, context=None):
    """A tensor holding a copy of `data` (anything numpy.asarray takes). The dtype is `dtype`,
    else the array's (float64 becomes float32, as fusejit has no float64)."""
    ctx = context or default_context()
    array = np.asarray(data)
    if dtype is None:
        if array.dtype not in _FROM_NUMPY:
            raise TypeError(f"tensor: numpy dtype {array.dtype} has no fusejit dtype; pass dtype= "
                            "or convert the array (float32, float16, int8, int32, int64, bool)")
        dtype = _FROM_NUMPY[array.dtype]
    dtype = _dtype_of(dtype)
    shape = list(array.shape)
    convert = dtype == DType.bfloat16  # numpy has none: fusejit converts, to nearest even
    array = np.ascontiguousarray(array, dtype=np.float64 if convert else _NUMPY[dtype])
    return ctx._from_array(array.reshape(-1).view(np.uint8), shape, dtype, convert)


def from_numpy(array, context=None):
    """tensor(array) with the array's own dtype (a copy; np.from_dlpack goes the other way
    zero-copy, fusejit.from_dlpack(array) this way)."""
    return tensor(array, context=context)


def to_numpy(x):
    """Computes `x` if needed and returns a copy of its values as a numpy array (bfloat16
    values as float32, exactly: numpy has no bfloat16)."""
    if x.dtype == DType.bfloat16:
        bits = np.empty(x.shape, dtype=np.uint16)
        x._copy_to(bits.reshape(-1).view(np.uint8))
        return (bits.astype(np.uint32) << 16).view(np.float32)
    out = np.empty(x.shape, dtype=_NUMPY[x.dtype])
    x._copy_to(out.reshape(-1).view(np.uint8))
    return out


def eval(*tensors):
    """Computes the tensors together, in one trace (they may share kernels)."""
    _fusejit.eval(list(tensors))


def plan(*tensors):
    """The fusion plan of the trace that computes `tensors`, as `fusejit plan` prints it for
    that trace: each region with its nodes, the decisions with the reason for each cut, and the
    cuBLASLt calls. The tensors stay pending; nothing runs."""
    return _fusejit.plan_text(list(tensors))


def explain(*args, **kwargs):
    """explain(t1, t2, ...): plan(t1, t2, ...), as an object that prints as the plan and has
    .kernels, .library_calls and .regions.
    explain(fn, *inputs): what torch.compile(fn, backend="fusejit") makes of fn (see
    fusejit.dynamo.explain): the graphs fusejit runs and the ops left to torch, by name."""
    if args and callable(args[0]) and not isinstance(args[0], Tensor):
        from fusejit import dynamo

        return dynamo.explain(*args, **kwargs)
    return PlanExplanation(list(args))


class PlanExplanation:
    """The plan of some pending tensors: str() is the full text; kernels, library_calls and
    regions (one line each) summarize it."""

    def __init__(self, tensors):
        self.text = _fusejit.plan_text(tensors)
        summary = _fusejit.plan_summary(tensors)
        self.kernels = summary["kernels"]
        self.library_calls = summary["library_calls"]
        self.regions = summary["regions"]

    def __str__(self):
        return self.text

    __repr__ = __str__


def from_dlpack(source, context=None):
    """A fusejit Tensor reading `source`'s memory in place (zero-copy): any DLPack producer
    (a torch tensor, a numpy array, ...) or a 'dltensor' capsule. The memory must be the
    Context's: CPU memory on the CPU path, the Context's GPU otherwise. On a GPU the producer
    is asked to order its work before the Context's stream (no host synchronization). fusejit
    reads the memory at each eval that needs it and never writes it; the producer's tensor is
    kept alive until fusejit is done with it."""
    ctx = context or default_context()
    return _fusejit._from_capsule(ctx, _capsule_of(source, ctx))


def _capsule_of(source, ctx):
    """source's DLPack capsule, asked for on ctx's stream when it is CUDA memory (the producer
    orders its work on the memory before the Context's), or source itself (a capsule)."""
    if not hasattr(source, "__dlpack__"):
        return source
    device_type, _ = source.__dlpack_device__()
    if device_type in (2, 13):  # kDLCUDA, kDLCUDAManaged
        return source.__dlpack__(stream=ctx.stream or 1)
    return source.__dlpack__()


def eval_into(x, out):
    """Computes `x` into `out`'s memory and returns `x`. `out` is any DLPack producer (a numpy
    array, a torch tensor, ...) or a 'dltensor' capsule: writable, of x's dtype, contiguous, on
    the Context's device, holding at least x's bytes (x is written at its start, densely; bytes
    past them are left as they are). A pending `x` is written there by the kernel that computes
    it where it can be, and copied there otherwise; `x` may then read its values from `out`
    (on a GPU), so leave `out` unchanged while you use `x`; fusejit keeps it alive (holds the
    producer's tensor) as long as it may write or read it. On a
    GPU the write is queued on the Context's stream, as every eval: read `out` after
    `x.context.synchronize()`, or on that stream (a Context made on torch's current stream
    orders it with torch's work), not before."""
    x._eval_into_capsule(_capsule_of(out, x.context))
    return x


def _to_numpy_method(self):
    return to_numpy(self)


def _repr(self):
    return f"fusejit.Tensor(shape={self.shape}, dtype={self.dtype})"


Tensor.to_numpy = _to_numpy_method
Tensor.eval_into = eval_into
Tensor.__repr__ = _repr
Tensor.__array__ = lambda self, dtype=None, copy=None: (
    to_numpy(self) if dtype is None else to_numpy(self).astype(dtype))
