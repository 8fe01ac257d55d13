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


def _split(x, split_size, dim=0):
    """torch.split into pieces of split_size (the last one shorter): slices, no copies."""
    extent = x.shape[dim]
    if extent == 0:
        return [x]
    starts = range(0, extent, split_size)
    return _split_with_sizes(x, [min(split_size, extent - s) for s in starts], dim)


def _split_with_sizes(x, sizes, dim=0):
    out, start = [], 0
    for size in sizes:
        out.append(_slice(x, dim, start, start + size))
        start += size
    return out


def _stack(xs, dim=0):
    dim = dim % (xs[0].ndim + 1)  # stack's dim counts the new axis: -1 appends one
    return fj.concat([fj.unsqueeze(x, dim) for x in xs], dim)


def _the_index(indices):
    """(dim, index) of the one tensor of an index list whose other entries are None."""
    dims = [d for d, i in enumerate(indices) if i is not None]
    return dims[0], indices[dims[0]]


def _index(x, indices):
    """x[..., idx, ...] with one index tensor at dim d (the None entries before it take whole
    axes, as `:` does): the slices along d at idx, which may have any shape; the result is
    x.shape[:d] + idx.shape + x.shape[d+1:]. index_select counts a negative index from the end
    once, as torch does (include/fusejit/tensor.h, "Indexed reads"), so [-1] needs no fix-up."""
    d, idx = _the_index(indices)
    if idx.ndim == 1:
        return fj.index_select(x, d, idx)
    out = fj.index_select(x, d, fj.reshape(idx, [-1]))  # a 0-dim index drops the axis
    return fj.reshape(out, list(x.shape[:d]) + list(idx.shape) + list(x.shape[d + 1:]))


def _index_put(x, indices, values, accumulate=False):
    """x with x[..., idx, ...] = values, idx one 1-D index tensor at dim d, written as a
    select: there is no scatter op, and a KV-cache update (k_cache[:, :, pos] = k) is a where
    over the cache. For each position j along d, k(j) is the last i with idx[i] == j (from
    comparing arange(size) against idx, [size, n]); positions that no index hits keep x, the
    others take values[..., k(j), ...]. Of repeated indices the last wins, as on torch's CPU
    (torch leaves the choice undefined)."""
    d, idx = _the_index(indices)
    size, n, ctx = x.shape[d], idx.shape[0], x.context
    idx = fj.where(idx < 0, idx + size, idx)  # compared below: -1 must be size - 1 here
    positions = fj.reshape(ctx.arange(0, size, 1, idx.dtype), [size, 1])
    entries = fj.reshape(ctx.arange(0, n, 1, idx.dtype), [1, n])
    source = fj.max(fj.where(fj.eq(positions, fj.reshape(idx, [1, n])), entries,
                             ctx.scalar(-1, idx.dtype)), [1])  # [size]: k(j), or -1
    # values broadcast to the indexed shape x.shape[:d] + [n] + x.shape[d+1:], as torch does.
    indexed = list(x.shape[:d]) + [n] + list(x.shape[d + 1:])
    if values.dtype != x.dtype:
        values = fj.cast(values, x.dtype)
    if list(values.shape) != indexed:
        lead = [1] * (len(indexed) - values.ndim)  # torch broadcasts from the right
        values = fj.expand(fj.reshape(values, lead + list(values.shape)), indexed)
    hit = fj.reshape(source >= 0, [size] + [1] * (x.ndim - d - 1))
    return fj.where(hit, fj.index_select(values, d, source), x)


def _attention(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q kᵀ * scale + mask) v as fusejit's attention fusion finds it (fusion/attention.h,
    docs/fused-attention.md): the scores' matmul, casts and the constant scale on them, one
    mask, a softmax over the last axis, the matmul with v. The scores are f32 from the cast on,
    as torch's kernels keep them, and the probabilities go back to q's dtype for the second
    matmul. A boolean mask keeps the scores where it holds (-inf elsewhere), a float mask is
    added; is_causal is the lower triangle of (rows, cols) = (q's, k's positions) counted from
    the top left, as torch's is_causal, built from arange compares (which the fusion takes as a
    causal mask). Both a mask and is_causal give two masks, which stay unfused."""
    ctx = q.context
    scale = 1.0 / (q.shape[-1] ** 0.5) if scale is None else float(scale)
    s = fj.matmul(q, fj.transpose(k, -2, -1))
    if s.dtype != fj.float32:
        s = fj.cast(s, fj.float32)
    s = s * scale
    minus_inf = ctx.scalar(float("-inf"), fj.float32)
    if mask is not None:
        if mask.dtype == fj.bool_:
            s = fj.where(mask, s, minus_inf)
        else:
            s = s + (mask if mask.dtype == fj.float32 else fj.cast(mask, fj.float32))
    if causal:
        rows, cols = q.shape[-2], k.shape[-2]
        row = fj.reshape(ctx.arange(0, rows, 1, fj.int64), [rows, 1])
        col = fj.reshape(ctx.arange(0, cols, 1, fj.int64), [1, cols])
        s = fj.where(col > row, minus_inf, s)
    p = fj.softmax(s, -1)
    return fj.matmul(p if q.dtype == fj.float32 else fj.cast(p, q.dtype), v)


# The SDPA ops torch lowers F.scaled_dot_product_attention to, one per backend: their outputs
# past the first (log-sum-exp, RNG state, ...) are None here, and `supports` refuses a graph
# that reads one. Each returns a tuple of the op's length, the output first.
def _sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    return (_attention(q, k, v, None, is_causal, scale),) + (None,) * 8


def _sdpa_efficient(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *,
                    scale=None):
    return (_attention(q, k, v, attn_bias, is_causal, scale),) + (None,) * 3


def _sdpa_cudnn(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                return_debug_mask=False, *, scale=None):
    return (_attention(q, k, v, attn_bias, is_causal, scale),) + (None,) * 8


def _sdpa_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return _attention(q, k, v, attn_mask, is_causal, scale), None


_SDPA = {
    aten._scaled_dot_product_flash_attention.default: _sdpa_flash,
    aten._scaled_dot_product_efficient_attention.default: _sdpa_efficient,
    aten._scaled_dot_product_cudnn_attention.default: _sdpa_cudnn,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_cpu,
}


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
    aten.stack.default: _stack,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.index.Tensor: _index,
    aten.index_put.default: _index_put,
    aten.clone.default: lambda x, **_: x,
    aten.alias.default: lambda x: x,
    aten.lift_fresh_copy.default: lambda x: x,  # a constant tensor made an input: read in place
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
    **_SDPA,
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


def _produced(node):
    """The tensors of a node that fusejit would compute: of an SDPA op, the output alone (the
    others, RNG state in uint64 among them, are never computed: `_sdpa_refusal`)."""
    tensors = _meta_tensors(node)
    return tensors[:1] if node.target in _SDPA else tensors


def supports(node, device_type):
    """None when fusejit takes the call_function `node`, else why not (for explain)."""
    if node.target not in TABLE:
        return "no fusejit op"
    tensors = _produced(node) + [t for a in node.all_input_nodes for t in _produced(a)]
    for t in tensors:
        if t.dtype not in DTYPES:
            return f"dtype {t.dtype}"
        if t.device.type != device_type:
            return f"a {t.device.type} tensor where fusejit runs on {device_type}"
    if node.target is aten.div.Tensor and node.kwargs.get("rounding_mode"):
        return "rounding division"
    if node.target is aten._to_copy.default:
        return _to_copy_refusal(node)
    if node.target in (aten.index.Tensor, aten.index_put.default):
        return _index_refusal(node)
    if node.target in _SDPA:
        return _sdpa_refusal(node)
    if node.target in (aten.full.default, aten.scalar_tensor.default, aten.arange.start,
                       aten.arange.start_step, aten.arange.default):
        device = node.kwargs.get("device")
        if device is not None and torch.device(device).type != device_type:
            return f"a tensor created on {device}"
    return None


def _arguments(node):
    """The op's arguments by name, defaults filled in, from the node's args and kwargs."""
    out = {}
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def _meta(arg):
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _to_copy_refusal(node):
    """AOTAutograd writes layout=torch.strided and the input's own device out in full on many
    casts (gpt-fast's `.to(dtype)`): those are casts. A real move, or a sparse or other
    layout, stays in torch."""
    layout, device = node.kwargs.get("layout"), node.kwargs.get("device")
    if layout is not None and layout != torch.strided:
        return f"a copy to layout {layout}"
    src = _meta(node.args[0])
    if device is not None and src is not None:
        dst = torch.device(device)
        index, own = dst.index, src.device.index
        if dst.type != src.device.type or (index is not None and own is not None and index != own):
            return f"a copy from {src.device} to {dst}"
    return None


def _index_refusal(node):
    """fusejit takes one integer index tensor among Nones (x[:, idx], cache[:, :, pos] = v)."""
    args = _arguments(node)
    indexed = [(d, i) for d, i in enumerate(args["indices"]) if i is not None]
    if len(indexed) != 1:
        return f"{len(indexed)} index tensors (fusejit takes one, the other entries None)"
    idx = _meta(indexed[0][1])
    if idx is None:
        return "an index that is not a tensor"
    if idx.dtype == torch.bool:
        return "a boolean index (a mask: the result's size depends on the data)"
    if idx.dtype not in (torch.int32, torch.int64):
        return f"an index of dtype {idx.dtype}"
    if node.target is aten.index_put.default:
        if args["accumulate"]:
            return "index_put with accumulate=True (a scatter-add)"
        if idx.ndim != 1:
            return f"index_put with a {idx.ndim}-D index (fusejit takes 1-D)"
    return None


def _same_size(a, b):
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return a == b if isinstance(a, int) and isinstance(b, int) else statically_known_true(a == b)


def _broadcasts(a, b):
    """True when batch shapes a and b broadcast (each pair of sizes equal, or one of them 1)."""
    return all(_same_size(x, y) or _same_size(x, 1) or _same_size(y, 1)
               for x, y in zip(reversed(a), reversed(b)))


def _sdpa_refusal(node):
    args = _arguments(node)
    if args["dropout_p"]:
        return f"attention with dropout_p={args['dropout_p']}"
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return "the graph reads an output past the first (log-sum-exp, RNG state): fusejit " \
                   "computes the attention output only"
    q, k, v = (_meta(args[n]) for n in ("query", "key", "value"))
    if q is None or k is None or v is None:
        return "attention operands that are not tensors"
    if not (_broadcasts(q.shape[:-2], k.shape[:-2]) and _broadcasts(q.shape[:-2], v.shape[:-2])):
        return f"attention whose heads do not broadcast (q {list(q.shape)}, k {list(k.shape)}, " \
               f"v {list(v.shape)}: grouped heads must be repeated or expanded first)"
    return None
