"""torch.compile(fn, backend="fusejit"): Dynamo's graphs, lowered to ATen, run by fusejit.

    compiled = torch.compile(model, backend="fusejit")   # the entry point finds this backend
    print(fusejit.explain(model, x))                     # what fusejit takes, what stays in torch

How a graph runs (inference: a graph that needs gradients runs in torch, as aot_eager):
1. AOTAutograd lowers Dynamo's FX graph to ATen ops (no decompositions: fusejit has softmax,
   layer norm and GELU of its own) and hands the inference graph to `_compile`.
2. A graph whose every op fusejit takes (fusejit._aten.supports) is one piece, its constant
   tensors made inputs. Any other is cut into the largest pieces of ops fusejit takes by
   torch's CapabilityBasedPartitioner; every other op stays in torch, between the pieces. Each
   op left out is a split, named with its op and the reason in `splits` and explain().
3. Each piece is translated once per (graph, input dtypes): its nodes become a list of steps
   over fusejit ops (the translation cache). A call replays the steps on fusejit Tensors that
   read torch's memory in place (DLPack), evaluates the outputs together (one fusejit trace:
   the kernel cache on disk and the trace memo as for any fusejit user) and hands them to torch
   without a copy.
4. From the second call with the same input sizes on, a piece runs as a fusejit.Replay: its
   trace recorded once more and built, then each call only checks its inputs, copies those whose
   memory moved since the call before into buffers of the Replay's own, queues the Replay (on a
   GPU one CUDA graph launch) and hands torch a copy of each output (the Replay's buffers are
   rewritten by the next call). No translation, no recording, no plan lookup per call. An input
   read in place that later arrives at another address is staged from then on (the Replay is
   built again; after 3 builds the calls of that signature are recorded). A piece keeps the
   Replays of its last 4 input sizes; each holds about an eval's peak of activations between
   calls (an eval frees them). FUSEJIT_DYNAMO_REPLAY=0 records every call instead.
Symbolic sizes (torch.compile(dynamic=True), torch._dynamo.mark_dynamic, or Dynamo's automatic
dynamic shapes) reach a piece as int inputs; the axes they size are marked dynamic on the
fusejit inputs (Context.mark_dynamic), so a new batch size or sequence length reuses the
translation, the plan and the kernels.
"""
import collections
import os
import threading

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

import fusejit as fj
from fusejit import _aten
from fusejit import _translation_cache as _disk

_lock = threading.Lock()
# (ATen graph code, input dtypes) -> _Program; ("disk", key) -> (_Program, constant tensors,
# ops) of a translation read from or written to the disk (_translation_cache)
_translations = {}
_stats = {"graphs": 0, "translations": 0, "translation_cache_hits": 0, "translations_loaded": 0,
          "calls": 0, "replays_built": 0, "replayed_calls": 0}
_REPLAYS_PER_PIECE = 4  # input signatures whose Replay a piece keeps (the least recent goes)
_REBUILDS = 3  # Replays built again for inputs that moved, before the signature stays recorded
_REPLAY_ALIGNMENT = 256  # bytes: a Replay reads an input in place only at such an address
_contexts = {}  # (device type, index) -> fusejit.Context
# (device type, index) -> the lock a piece holds from recording a call to its last use of the
# Context: an eval or a Replay's construction takes every write recorded into the Context so far,
# another thread's too (docs/api.md), so the pieces of every thread that share it take turns.
_context_locks = {}
_reports = []  # one _GraphReport per graph compiled, for explain()
# .disk: (directory, key, number of inputs) of the graph backend() is compiling, for _compile
# (which AOTAutograd calls on the same thread) to keep its translation on disk.
_pending = threading.local()


def stats():
    """Counters of the backend: graphs compiled, translations made, reused in this process
    (translation_cache_hits) and built from the disk without AOTAutograd (translations_loaded),
    calls run, and of those calls how many ran as a Replay (replayed_calls), Replays built
    (replays_built)."""
    with _lock:
        return dict(_stats)


def _context(device):
    """The backend's Context for `device`, and the lock its users hold (_context_locks)."""
    key = (device.type, device.index or 0)
    with _lock:
        if key not in _contexts:
            if device.type == "cuda":
                stream = torch.cuda.current_stream(device)
                _contexts[key] = fj.Context(device=key[1], stream=stream if stream.cuda_stream else None)
            else:
                _contexts[key] = fj.Context()
            _context_locks[key] = threading.RLock()
        return _contexts[key], _context_locks[key]


class _Support(OperatorSupport):
    def __init__(self, device_type, refused):
        super().__init__()
        self.device_type = device_type
        self.refused = refused  # node -> reason, for the splits

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        why = _aten.supports(node, self.device_type)
        if why is not None:
            self.refused[node] = why
        return why is None


class _Program:
    """A piece of graph as steps over fusejit ops: (node name, function, args, kwargs), with
    the graph's nodes in args replaced by _Ref. `targets` names each step's op (for the disk)."""

    def __init__(self, gm=None):
        self.inputs, self.steps, self.targets, self.output = [], [], [], None
        for node in gm.graph.nodes if gm is not None else ():
            if node.op == "placeholder":
                self.inputs.append(node.name)
            elif node.op == "get_attr":
                self.steps.append((node.name, _attr(gm, node.target), (), {}))
                self.targets.append(None)  # a constant: such a program is never kept on disk
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: _Ref(n.name))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: _Ref(n.name))
                self.steps.append((node.name, _aten.TABLE[node.target], args, kwargs))
                self.targets.append(_target_name(node.target))
            elif node.op == "output":
                self.output = torch.fx.node.map_arg(node.args[0], lambda n: _Ref(n.name))

    def run(self, values):
        env = dict(zip(self.inputs, values))
        for name, fn, args, kwargs in self.steps:
            env[name] = fn(*_resolve(args, env), **_resolve(kwargs, env))
        return _resolve(self.output, env)

    def to_json(self):
        """The program as JSON values (_translation_cache.encode); raises Uncacheable."""
        enc = lambda v: _disk.encode(v, _Ref)  # noqa: E731
        if None in self.targets:
            raise _disk.Uncacheable("a constant")
        steps = [[name, target, enc(args), enc(kwargs)]
                 for (name, _, args, kwargs), target in zip(self.steps, self.targets)]
        return {"inputs": self.inputs, "steps": steps, "output": enc(self.output)}

    @classmethod
    def from_json(cls, data):
        """to_json's inverse; raises ValueError (or KeyError, TypeError) on what it cannot read."""
        program, dec = cls(), lambda v: _disk.decode(v, _Ref)  # noqa: E731
        program.inputs = [str(n) for n in data["inputs"]]
        for name, target, args, kwargs in data["steps"]:
            if target not in _targets():
                raise ValueError(f"unknown op {target!r:.60}")
            args, kwargs = dec(args), dec(kwargs)
            if not isinstance(args, tuple) or not isinstance(kwargs, dict):
                raise ValueError("a step's args are not a tuple and kwargs")
            program.steps.append((str(name), _aten.TABLE[_targets()[target]], args, kwargs))
            program.targets.append(target)
        program.output = dec(data["output"])
        return program


def _target_name(target):
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # aten.add.Tensor
    return f"{target.__module__}.{target.__name__}"  # _operator.getitem


_target_names = None


def _targets():
    """{_target_name(op): op} over the ops fusejit takes."""
    global _target_names
    if _target_names is None:
        _target_names = {_target_name(t): t for t in _aten.TABLE}
    return _target_names


class _Ref:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _resolve(value, env):
    if isinstance(value, _Ref):
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return value


def _attr(gm, target):
    value = _attr_value(gm, target)
    return lambda: value  # a constant that is not a tensor (_whole_piece makes tensors inputs)


def _attr_value(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


class _Piece(torch.nn.Module):
    """A piece of the graph that fusejit runs: called by the partitioned graph with torch
    tensors (and ints, for symbolic sizes); returns torch tensors over fusejit's memory (the
    first call) or torch's own (replayed calls)."""

    def __init__(self, program, example_inputs, dynamic):
        super().__init__()
        self.program = program
        self.dynamic = dynamic  # _dynamic_axes
        # What a Replay is specific to, besides what Dynamo's guards fix (the sizes and strides
        # of every tensor input without a symbolic size): the int inputs (symbolic sizes), and
        # the layout of the tensors with symbolic sizes.
        self.values_at = [i for i, v in enumerate(example_inputs) if not isinstance(v, torch.Tensor)]
        self.dynamic_at = sorted(self.dynamic)
        # signature -> _Replayed, or _Recorded (the call before, or why it is never replayed)
        self.replays = collections.OrderedDict()

    def forward(self, *inputs):
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
        ctx, lock = _context(device)
        with lock:
            return self._call(ctx, device, inputs)

    def _call(self, ctx, device, inputs):
        """forward's work, under the Context's lock."""
        if os.environ.get("FUSEJIT_DYNAMO_REPLAY", "1").strip() in ("0", "off", "false"):
            return self._record(ctx, inputs)
        sig = (tuple(inputs[i] for i in self.values_at),
               tuple((tuple(inputs[i].shape), inputs[i].stride()) for i in self.dynamic_at))
        entry = self.replays.get(sig)
        if isinstance(entry, _Replayed):
            out = entry.run(ctx, device, inputs)
            if out is not None:
                self.replays.move_to_end(sig)
                return out
            # An input read in place came at another address: staged from now on.
            entry = _Recorded(entry.builds, entry.staged | entry.moved(inputs), inputs)
            if entry.builds >= _REBUILDS:
                entry.why_not = f"inputs read in place moved after {entry.builds} Replays"
                _log(f"fusejit: a piece is recorded at every call from now on: {entry.why_not}")
        if entry is None:  # the first call of this signature
            entry = _Recorded(0, frozenset(), inputs)
        elif not entry.why_not:  # the second, or one after an input moved
            try:
                entry = _Replayed(self, ctx, device, inputs, entry.staged | entry.moved(inputs),
                                  entry.builds + 1)
            except (fj.UsageError, fj.OutOfMemoryError) as e:
                # An output that is an input (nothing to compute), or no room for the
                # Replay's intermediates next to torch's: an eval frees each after its use.
                entry.why_not = str(e)
                _log(f"fusejit: a piece is recorded at every call: {e}")
        self._keep(sig, entry)
        if isinstance(entry, _Replayed):
            return entry.run(ctx, device, inputs)
        entry.ptrs = _pointers(inputs)
        return self._record(ctx, inputs)

    def _keep(self, sig, entry):
        self.replays[sig] = entry
        self.replays.move_to_end(sig)
        while len(self.replays) > _REPLAYS_PER_PIECE:
            self.replays.popitem(last=False)

    def _values(self, ctx, inputs, staged=frozenset(), buffers=None):
        """The program's inputs on fusejit: tensors read in place, or for the positions in
        `staged`, from a buffer of their own (put in `buffers`)."""
        values = []
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                values.append(x)
                continue
            if buffers is not None and x.data_ptr() % _REPLAY_ALIGNMENT:
                staged = staged | {i}  # a Replay reads in place only aligned memory
            t = None if i in staged else _import(x, ctx)
            if t is None and buffers is not None:  # staged, or a layout read through a copy
                buffers[i] = buf = torch.empty(x.shape, dtype=x.dtype, device=x.device)
                buf.copy_(x)
                t = _import(buf, ctx)
            elif t is None:
                t = _import(x.contiguous(), ctx)
            for axis, name in self.dynamic.get(i, ()):
                if x.shape[axis] != 1:
                    ctx.mark_dynamic(t, axis, name)
            values.append(t)
        _aten._CONTEXT.current = ctx
        return values

    def _record(self, ctx, inputs):
        """One call recorded and evaluated: the outputs are torch views of fusejit's memory."""
        values = self._values(ctx, inputs)
        with _lock:
            _stats["calls"] += 1
        outs, single = _flatten(self.program.run(values))
        pending = [o for o in outs if isinstance(o, fj.Tensor)]
        if pending:
            fj.eval(*_distinct(pending))
        result = [torch.from_dlpack(o) if isinstance(o, fj.Tensor) else o for o in outs]
        return result[0] if single else tuple(result)


def _translate(gm, example_inputs):
    """gm as a _Piece: its program from the translation cache, or translated now."""
    dtypes = tuple(getattr(v, "dtype", type(v).__name__) for v in example_inputs)
    key = (gm.code, dtypes)
    with _lock:
        program = _translations.get(key)
        if program is None:
            _stats["translations"] += 1
            program = _translations[key] = _Program(gm)
        else:
            _stats["translation_cache_hits"] += 1
    return _Piece(program, example_inputs, _dynamic_axes(gm))


class _Recorded:
    """A signature's calls that record: the input addresses of the last one, the inputs that
    have moved before (staged by the next Replay), and why it is never replayed, if it is not."""

    def __init__(self, builds, staged, inputs):
        self.builds, self.staged, self.why_not = builds, frozenset(staged), ""
        self.ptrs = _pointers(inputs)

    def moved(self, inputs):
        return frozenset(i for i, p in enumerate(_pointers(inputs)) if p != self.ptrs[i])


class _Replayed:
    """A piece's trace for one input signature, built as a fusejit.Replay. Inputs that stay at
    one address (weights, caches) are read in place; the Replay keeps them alive. The others
    (`staged`) are copied into buffers of its own at each call."""

    def __init__(self, piece, ctx, device, inputs, staged, builds):
        self.builds, self.staged, self.buffers = builds, frozenset(staged), {}
        values = piece._values(ctx, inputs, self.staged, self.buffers)
        self.staged = frozenset(self.buffers)
        self.ptrs = _pointers(inputs)
        # (position, address) of each input read in place: what every call checks.
        self.in_place = [(i, p) for i, p in enumerate(self.ptrs)
                         if p is not None and i not in self.staged]
        outs, self.single = _flatten(piece.program.run(values))
        tensors = _distinct([o for o in outs if isinstance(o, fj.Tensor)])
        if not tensors:
            raise fj.UsageError("the piece computes no tensor")
        index = {id(t): k for k, t in enumerate(tensors)}
        # Per output: its position in the Replay's outputs, or a value of the recording (a size).
        self.layout = [(index[id(o)], None) if isinstance(o, fj.Tensor) else (None, o) for o in outs]
        self.replay = fj.Replay(tensors)
        with _lock:
            _stats["replays_built"] += 1

    def moved(self, inputs):
        return frozenset(i for i, p in enumerate(_pointers(inputs))
                         if i not in self.staged and p != self.ptrs[i])

    def run(self, ctx, device, inputs):
        """The outputs of one call, or None when an input read in place has moved."""
        for i, p in self.in_place:
            if inputs[i].data_ptr() != p:
                return None
        for i, buf in self.buffers.items():
            buf.copy_(inputs[i])
        _after_torch(ctx, device)
        self.replay.run()
        with _lock:
            _stats["calls"] += 1
            _stats["replayed_calls"] += 1
        # torch.from_dlpack orders torch's stream after the run; the copy frees the Replay's
        # buffers for the next call (and makes each call's outputs its own).
        outs = [torch.from_dlpack(o).clone() for o in self.replay.outputs]
        result = [outs[k] if k is not None else v for k, v in self.layout]
        return result[0] if self.single else tuple(result)


def _pointers(inputs):
    return [x.data_ptr() if isinstance(x, torch.Tensor) else None for x in inputs]


def _after_torch(ctx, device):
    """Orders the Context's stream after the work queued so far on torch's current one (which
    wrote the staged buffers and may have written inputs read in place)."""
    if device.type != "cuda":
        return
    current = torch.cuda.current_stream(device)
    if current.cuda_stream == ctx.stream:
        return
    event = torch.cuda.Event()
    event.record(current)
    torch.cuda.ExternalStream(ctx.stream, device=device).wait_event(event)


def _flatten(out):
    """(outputs as a list, whether the piece returned a single value)."""
    single = not isinstance(out, (tuple, list))
    return ([out] if single else list(out)), single


def _distinct(tensors):
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _import(x, ctx):
    """x read in place by fusejit, or None when fusejit cannot read its layout (overlapping
    strides)."""
    if x.dtype not in _aten.DTYPES:
        raise fj.UsageError(f"fusejit.dynamo: an input of dtype {x.dtype} reached fusejit")
    try:
        return fj.from_dlpack(x.detach(), context=ctx)
    except fj.UsageError:
        return None


def _dynamic_axes(gm):
    """{input position: [(axis, symbol name)]} for the tensor inputs whose sizes are symbolic."""
    out = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for axis, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt) and not isinstance(size.node.maybe_as_int(), int):
                out.setdefault(i, []).append((axis, str(size.node.expr).replace(" ", "")))
    return out


class _GraphReport:
    def __init__(self, pieces, splits):
        self.pieces = pieces  # per piece: the ATen ops fusejit runs
        self.splits = splits  # per op left to torch: "aten.cumsum.default (no fusejit op)"


def _device_type(example_inputs):
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return "cpu"


def _runs_on(example_inputs):
    """The device type of the tensors fusejit takes: that of the inputs, or "none" for CPU
    tensors where fusejit runs on a GPU (they stay in torch)."""
    device_type = _device_type(example_inputs)
    if device_type == "cpu" and fj.Context.gpu_available()[0]:
        return "none"
    return device_type


def _compile(gm, example_inputs):
    """AOTAutograd's inference compiler: the partitioned graph, fusejit pieces in it."""
    device_type = _runs_on(example_inputs)
    from functorch.compile import make_boxed_func

    refused = {}
    support = _Support(device_type, refused)
    whole = _whole_piece(gm, support)
    if whole is not None:  # every op is fusejit's: no partitioning, one piece
        piece, constants = whole
        _report([_ops_of(gm)], [])
        _keep_translation(gm, piece, constants)
        return make_boxed_func(lambda *args: piece(*args, *constants))
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions() if _does_work(p.nodes)]
    fused = partitioner.fuse_partitions(partitions, prefix="fusejit_")
    pieces = []
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and node.target.startswith("fusejit_"):
            sub = getattr(fused, node.target)
            examples = [a.meta.get("val") for a in node.args]
            setattr(fused, node.target, _translate(sub, examples))
            pieces.append(_ops_of(sub))
    splits = [f"{_op_name(n.target)} ({why})" for n, why in refused.items()
              if n.op == "call_function" and n.target not in (_aten.aten.sym_size.int,)]
    fused.recompile()
    _report(pieces, splits)
    return make_boxed_func(fused.forward)


def _whole_piece(gm, support):
    """(the graph as one _Piece, the constant tensors to pass it after the graph's inputs) when
    fusejit takes every op of it, or None (then the partitioner cuts it): torch's partitioner
    costs time quadratic in the nodes (0.2 s on GPT-2 774M's graph), for nothing when there is
    nothing to cut. A constant (get_attr, e.g. the index of `x[:, [-1]]`) becomes an input, read
    in place, as the partitioner would make it; a graph with an unused input goes through the
    partitioner, which leaves the input out."""
    ops = []
    for node in gm.graph.nodes:
        if node.op == "placeholder" and not node.users:
            return None
        if node.op == "get_attr" and not isinstance(_attr_value(gm, node.target), torch.Tensor):
            return None
        if node.op == "call_function":
            if not support.is_node_supported(None, node):
                return None
            ops.append(node)
    if not _does_work(ops):
        return None
    constants = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in [n for n in gm.graph.nodes if n.op == "get_attr"]:
        value = _attr_value(gm, node.target)
        anchor = placeholders[-1] if placeholders else next(iter(gm.graph.nodes))
        insert = gm.graph.inserting_after if placeholders else gm.graph.inserting_before
        with insert(anchor):
            ph = gm.graph.placeholder(f"fusejit_constant_{len(constants)}")
        ph.meta["val"] = value
        node.replace_all_uses_with(ph)
        gm.graph.erase_node(node)
        placeholders.append(ph)
        constants.append(value)
    if constants:
        gm.recompile()
    return _translate(gm, [n.meta.get("val") for n in placeholders]), constants


def _ops_of(gm):
    return [_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _report(pieces, splits):
    with _lock:
        _stats["graphs"] += 1
        _reports.append(_GraphReport(pieces, splits))
    for s in splits:
        _log(f"fusejit: split at {s}: it stays in torch")


def _does_work(nodes):
    """A partition of size and getitem nodes alone is no kernel: leave it to torch."""
    return any(n.target not in (_aten.aten.sym_size.int,) and not isinstance(
        n.target, type(len)) for n in nodes)


def _op_name(target):
    name = getattr(target, "__name__", str(target))
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target.overloadpacket.__name__}.{target._overloadname}"
    return name


def _log(line):
    import logging

    logging.getLogger("fusejit.dynamo").info(line)


def _training_compiler(gm, example_inputs):
    """A graph that needs gradients runs in torch: fusejit compiles inference only."""
    from functorch.compile import make_boxed_func

    _log("fusejit: a graph that needs gradients runs in torch (inference only)")
    return make_boxed_func(gm.forward)


def backend(gm, example_inputs, **kwargs):
    """The torch.compile backend (entry point torch_dynamo_backends: fusejit). A graph whose
    translation a process before kept on disk (_translation_cache) is built from it, without
    AOTAutograd; any other goes through AOTAutograd to _compile, which keeps what it may."""
    from torch._dynamo.backends.common import aot_autograd

    disk = _disk_slot(gm, example_inputs)
    if disk is not None:
        loaded = _load_translation(disk)
        if loaded is not None:
            program, constants, ops, mutated = loaded
            _report([ops], [])
            # Static sizes only: no dynamic axes.
            return _loaded_function(_Piece(program, [*example_inputs, *constants], {}),
                                    constants, mutated)
    _pending.disk = disk
    try:
        return aot_autograd(fw_compiler=_training_compiler, bw_compiler=_training_compiler,
                            inference_compiler=_compile)(gm, example_inputs, **kwargs)
    finally:
        _pending.disk = None


def _loaded_function(piece, constants, mutated):
    """What AOTAutograd's compiled function does, for a piece built from the disk: run it, copy
    the new values of the inputs it mutates (its first outputs) into them, return the rest."""
    if not mutated:
        return lambda *args: piece(*args, *constants)

    def run(*args):
        outs = piece(*args, *constants)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        with torch.no_grad():
            for i, new in zip(mutated, outs):
                args[i].detach().copy_(new)
        return tuple(outs[len(mutated):])

    return run


def _disk_slot(gm, example_inputs):
    """(directory, key, number of inputs) where the graph's translation is kept on disk, or
    None: no disk cache (FUSEJIT_CACHE), or a graph the disk does not keep."""
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), None)
    if device is None or device.type not in ("cpu", "cuda"):
        return None
    runs_on = _runs_on(example_inputs)
    if runs_on == "none":  # CPU tensors on a GPU machine: torch runs them, nothing to keep
        return None
    if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in example_inputs):
        return None  # AOTAutograd's training path: torch runs it (_training_compiler)
    try:
        key = _disk.key(gm, example_inputs, [runs_on])
    except _disk.Uncacheable as e:
        _log(f"fusejit: the graph's translation is not kept on disk: {e}")
        return None
    directory = _disk.directory(_context(device)[0].cache_dir)
    return (directory, key, len(example_inputs)) if directory else None


def _load_translation(disk):
    """(program, constant tensors, ops, mutated inputs) of a translation kept on disk, from this
    process's translation cache when it has read or written it, or None (none, or unusable)."""
    directory, key, n_inputs = disk
    with _lock:
        loaded = _translations.get(("disk", key))
        if loaded is not None:
            _stats["translation_cache_hits"] += 1
            return loaded
    entry = _disk.load(directory, key)
    if entry is None:
        return None
    try:
        program = _Program.from_json(entry["program"])
        ops = [str(op) for op in entry["ops"]]
        constants = [_disk.decode_tensor(c) for c in entry["constants"]]
        if len(program.inputs) != n_inputs + len(constants):
            raise ValueError(f"{len(program.inputs)} inputs where the graph has {n_inputs} "
                             f"and {len(constants)} constants")
        mutated = [int(i) for i in entry["mutated"]]
        if any(not 0 <= i < n_inputs for i in mutated) or len(set(mutated)) != len(mutated):
            raise ValueError(f"mutated inputs {mutated} of {n_inputs}")
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        _log(f"fusejit: ignoring the translation {key} in {directory}: {e}")
        return None
    with _lock:
        _stats["translations_loaded"] += 1
        _translations[("disk", key)] = program, constants, ops, mutated
    return program, constants, ops, mutated


def _keep_translation(gm, piece, constants):
    """Writes the whole-graph piece's translation for the graph backend() compiles, when the
    disk keeps it (_translation_cache says which)."""
    disk, _pending.disk = getattr(_pending, "disk", None), None
    if disk is None or piece.dynamic:
        return
    directory, key, n_inputs = disk
    mutated = _disk.aot_wrapping(gm, n_inputs + len(constants))
    if mutated is None:
        _log("fusejit: the graph's translation is not kept on disk: AOTAutograd's runtime "
             "wrappers change its inputs or outputs")
        return
    try:
        entry = {"program": piece.program.to_json(), "ops": _ops_of(gm),
                 "constants": [_disk.encode_tensor(c) for c in constants], "mutated": mutated}
    except _disk.Uncacheable as e:
        _log(f"fusejit: the graph's translation is not kept on disk: {e}")
        return
    _disk.store(directory, key, entry)
    with _lock:
        _translations[("disk", key)] = piece.program, list(constants), entry["ops"], mutated


class Explanation:
    """What torch.compile(fn, backend="fusejit") made of fn for some inputs: .graphs (Dynamo's
    graphs), .pieces (per piece fusejit runs, its ATen ops) and .splits (each op left to torch,
    with the reason). str() lists them."""

    def __init__(self, reports):
        self.graphs = len(reports)
        self.pieces = [p for r in reports for p in r.pieces]
        self.splits = [s for r in reports for s in r.splits]

    def __str__(self):
        lines = [f"{self.graphs} graph(s), {len(self.pieces)} fusejit piece(s), "
                 f"{len(self.splits)} split(s)"]
        for i, ops in enumerate(self.pieces):
            lines.append(f"  fusejit piece {i}: {len(ops)} ops: {' '.join(ops)}")
        for s in self.splits:
            lines.append(f"  split: {s} stays in torch")
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn, *args, **kwargs):
    """Compiles fn with the fusejit backend afresh (torch._dynamo.reset()) and runs it on args;
    returns the Explanation of the graphs that made."""
    import torch._dynamo

    torch._dynamo.reset()
    with _lock:
        start = len(_reports)
    with torch.no_grad():
        torch.compile(fn, backend=backend)(*args, **kwargs)
    with _lock:
        reports = _reports[start:]
    torch._dynamo.reset()
    return Explanation(reports)
