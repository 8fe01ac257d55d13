"""The ATen ops fusejit takes, each as a function from the op's arguments (fusejit Tensors where
the graph had tensors, Python numbers and lists elsewhere) to its result on fusejit.

torch.compile's graphs reach fusejit lowered to ATen by AOTAutograd (fusejit.dynamo). An op
missing here, or one whose arguments a translation refuses (a rounding division, a float64
tensor, a move between devices), stays in torch: `supports` says which and why."""
import operator
import threading

import torch

import fusejit as fj

aten = torch.ops.aten

DTYPES = {
    torch.float32: fj.float32,
    torch.float16: fj.float16,
    torch.bfloat16: fj.bfloat16,
    torch.int32: fj.int32,
    torch.int64: fj.int64,
    torch.int8: fj.int8,
    torch.bool: fj.bool_,
}


def _scalar_or(x, other):
    """A Tensor operand from x, a Tensor or a Python number (on other's Context)."""
    return x if isinstance(x, fj.Tensor) else other.context.scalar(float(x), _scalar_dtype(x, other))


def _scalar_dtype(value, like):
    if isinstance(value, bool):
        return fj.bool_
    if isinstance(value, int) and like.dtype in (fj.int8, fj.int32, fj.int64):
        return like.dtype
    return like.dtype if like.dtype.is_floating_point else fj.float32


def _binary(fn):
    def run(a, b, **_):
        if not isinstance(a, fj.Tensor):
            return fn(_scalar_or(a, b), b)
        return fn(a, b)

    return run


def _add(a, b, alpha=1):
    return _binary(fj.add)(a, b * alpha if alpha != 1 else b)


def _sub(a, b, alpha=1):
    return _binary(fj.sub)(a, b * alpha if alpha != 1 else b)


def _reduce(fn):
    def run(x, dims=None, keepdim=False, dtype=None):
        out = fn(x, list(dims) if dims else None, keepdim)
        return fj.cast(out, DTYPES[dtype]) if dtype is not None else out

    return run


def _native_layer_norm(x, shape, weight, bias, eps):
    axes = list(range(-len(shape), 0))
    mean = fj.mean(x, axes, True)
    rstd = fj.rsqrt(fj.var(x, axes, 0.0, True) + eps)  # unused ones are never computed
    return fj.layer_norm(x, weight, bias, eps, len(shape)), mean, rstd


def _slice(x, dim=0, start=None, end=None, step=1):
    extent = x.shape[dim]
    start = 0 if start is None else start
    end = extent if end is None else min(end, extent)
    if start == 0 and end >= extent and step == 1:
        return x
    return fj.slice(x, dim, start, end, step)


def _select(x, dim, index):
    if index < 0:
        index += x.shape[dim]
    return fj.squeeze(fj.narrow(x, dim, index, 1), dim)


def _full(shape, value, dtype=None, **_):
    ctx = _CONTEXT.current
    return ctx.full(list(shape), float(value), DTYPES[dtype or torch.float32])


def _scalar_tensor(value, dtype=None, **_):
    return _CONTEXT.current.scalar(float(value), DTYPES[dtype or torch.float32])


def _arange(start, end=None, step=1, dtype=None, **_):
    if end is None:
        start, end = 0, start
    dtype = dtype or (torch.int64 if all(isinstance(v, int) for v in (start, end, step)) else torch.float32)
    return _CONTEXT.current.arange(start, end, step, DTYPES[dtype])


def _to_copy(x, dtype=None, **_):
    return x if dtype is None or DTYPES[dtype] == x.dtype else fj.cast(x, DTYPES[dtype])


def _addmm(bias, a, b, beta=1, alpha=1):
    prod = fj.matmul(a, b)
    return (prod * alpha if alpha != 1 else prod) + (bias * beta if beta != 1 else bias)


def _squeeze(x, dims=None):
    dims = [dims] if isinstance(dims, int) else (dims if dims is not None else range(x.ndim))
    for d in sorted((d % x.ndim for d in dims if x.shape[d % x.ndim] == 1), reverse=True):
        x = fj.squeeze(x, d)
    return x


def _expand(x, shape, **_):
    return fj.expand(x, list(shape))


class _Current(threading.local):
    """The Context that ops without tensor operands (full, arange) record into: the one of the
    graph piece this thread runs (set by fusejit.dynamo before each call)."""

    current = None


_CONTEXT = _Current()

# op -> translation. Overloads are listed one by one: a new overload is not taken by accident.
TABLE = {
    aten.abs.default: fj.abs,
    aten.neg.default: fj.neg,
    aten.exp.default: fj.exp,
    aten.log.default: fj.log,
    aten.sqrt.default: fj.sqrt,
    aten.rsqrt.default: fj.rsqrt,
    aten.sin.default: fj.sin,
    aten.cos.default: fj.cos,
    aten.tanh.default: fj.tanh,
    aten.sigmoid.default: fj.sigmoid,
    aten.relu.default: fj.relu,
    aten.silu.default: fj.silu,
    aten.reciprocal.default: fj.reciprocal,
    aten.gelu.default: lambda x, approximate="none": fj.gelu(x, approximate),
    aten.add.Tensor: _add,
    aten.sub.Tensor: _sub,
    aten.rsub.Scalar: lambda a, b, alpha=1: _binary(fj.sub)(b, a * alpha),
    aten.mul.Tensor: _binary(fj.mul),
    aten.div.Tensor: _binary(fj.div),
    aten.maximum.default: fj.maximum,
    aten.minimum.default: fj.minimum,
    aten.pow.Tensor_Scalar: lambda x, e: fj.pow(x, float(e)),
    aten.pow.Tensor_Tensor: fj.pow,
    aten.eq.Tensor: _binary(fj.eq),
    aten.eq.Scalar: _binary(fj.eq),
    aten.ne.Tensor: _binary(fj.ne),
    aten.ne.Scalar: _binary(fj.ne),
    aten.lt.Tensor: _binary(fj.lt),
    aten.lt.Scalar: _binary(fj.lt),
    aten.le.Tensor: _binary(fj.le),
    aten.le.Scalar: _binary(fj.le),
    aten.gt.Tensor: _binary(fj.gt),
    aten.gt.Scalar: _binary(fj.gt),
    aten.ge.Tensor: _binary(fj.ge),
    aten.ge.Scalar: _binary(fj.ge),
    aten.where.self: lambda c, a, b: fj.where(c, a, b),
    aten.masked_fill.Scalar: lambda x, mask, value: fj.where(mask, float(value), x),
    aten.clamp.default: lambda x, lo=None, hi=None: fj.clamp(x, lo, hi),
    aten.sum.dim_IntList: _reduce(fj.sum),
    aten.sum.default: lambda x, dtype=None: _reduce(fj.sum)(x, None, False, dtype),
    aten.mean.dim: _reduce(fj.mean),
    aten.mean.default: lambda x, dtype=None: _reduce(fj.mean)(x, None, False, dtype),
    aten.amax.default: _reduce(fj.max),
    aten.amin.default: _reduce(fj.min),
    aten.var.correction: lambda x, dims=None, correction=1, keepdim=False: fj.var(
        x, list(dims) if dims else None, 1.0 if correction is None else float(correction), keepdim),
    aten.argmax.default: lambda x, dim=None, keepdim=False: fj.argmax(x, dim, keepdim),
    aten.view.default: lambda x, shape: fj.reshape(x, list(shape)),
    aten._unsafe_view.default: lambda x, shape: fj.reshape(x, list(shape)),
    aten.reshape.default: lambda x, shape: fj.reshape(x, list(shape)),
    aten.permute.default: lambda x, dims: fj.permute(x, list(dims)),
    aten.t.default: lambda x: fj.transpose(x, 0, 1) if x.ndim == 2 else x,
    aten.transpose.int: fj.transpose,
    aten.expand.default: _expand,
    aten.unsqueeze.default: fj.unsqueeze,
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.slice.Tensor: _slice,
    aten.select.int: _select,
    aten.cat.default: lambda xs, dim=0: fj.concat(list(xs), dim),
    aten.clone.default: lambda x, **_: x,
    aten.alias.default: lambda x: x,
    aten._to_copy.default: _to_copy,
    aten.mm.default: fj.matmul,
    aten.bmm.default: fj.matmul,
    aten.addmm.default: _addmm,
    aten._softmax.default: lambda x, dim, half_to_float=False: fj.softmax(x, dim),
    aten._log_softmax.default: lambda x, dim, half_to_float=False: fj.log_softmax(x, dim),
    aten.native_layer_norm.default: _native_layer_norm,
    aten.embedding.default: lambda w, ids, *_: fj.embedding(w, ids),
    aten.index_select.default: fj.index_select,
    aten.gather.default: lambda x, dim, index, sparse_grad=False: fj.gather(x, dim, index),
    aten.full.default: _full,
    aten.scalar_tensor.default: _scalar_tensor,
    aten.arange.start: _arange,
    aten.arange.start_step: _arange,
    aten.arange.default: _arange,
    aten.sym_size.int: lambda x, dim: x.shape[dim],
    operator.getitem: operator.getitem,
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.floordiv: operator.floordiv,
}


def _meta_tensors(node):
    """The FakeTensors a node produces (its meta "val"), as a list."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if isinstance(v, torch.Tensor)]


def supports(node, device_type):
    """None when fusejit takes the call_function `node`, else why not (for explain)."""
    if node.target not in TABLE:
        return "no fusejit op"
    tensors = _meta_tensors(node) + [
        t for a in node.all_input_nodes for t in _meta_tensors(a)]
    for t in tensors:
        if t.dtype not in DTYPES:
            return f"dtype {t.dtype}"
        if t.device.type != device_type:
            return f"a {t.device.type} tensor where fusejit runs on {device_type}"
    if node.target is aten.div.Tensor and node.kwargs.get("rounding_mode"):
        return "rounding division"
    if node.target is aten._to_copy.default and (
            node.kwargs.get("device") is not None or node.kwargs.get("layout") is not None):
        return "a copy to another device or layout"
    if node.target in (aten.full.default, aten.scalar_tensor.default, aten.arange.start,
                       aten.arange.start_step, aten.arange.default):
        device = node.kwargs.get("device")
        if device is not None and torch.device(device).type != device_type:
            return f"a tensor created on {device}"
    return None
