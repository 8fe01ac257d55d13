"""The torch.compile backend's translations on disk, so that a new process skips AOTAutograd.

A graph that fusejit runs whole (no split; constant tensors of up to 4096 elements) is kept, once translated, as its
steps over fusejit ops in `<cache dir>/dynamo/<key>.json`. A later process that gets the same
Dynamo graph for the same inputs builds its piece from that file and never runs AOTAutograd's
tracing, which is most of a warm start's time after Dynamo's own.

The key hashes what decides the ATen graph AOTAutograd would make and what fusejit makes of
it: the Dynamo graph's code, each input's type, dtype, sizes, strides, device and
requires_grad, grad and inference mode, the default dtype, autocast entered outside the compiled
function, where fusejit runs, the torch and fusejit versions, and a hash of the
translator's source files. Only graphs whose translation cannot depend on anything else are kept:
  - static sizes only (a symbolic size may add guards while AOTAutograd traces),
  - no get_attr or call_module node (their tensors are not in the code),
  - no output that aliases an input or another output, no input given twice, no mutation but
    of an input's data (AOTAutograd's runtime wrappers would be needed, which a loaded piece
    does not have; a data mutation it repeats: the new values are copied into the inputs).
An entry that cannot be read, is not JSON, or names an op or value fusejit does not know is
ignored (and written again by the AOTAutograd path); nothing in it is ever executed as code.
"""
import hashlib
import json
import os
import stat
import tempfile

import torch

FORMAT = 1
MAX_ENTRIES = 512  # entries kept in the directory; the least recently written go first


class Uncacheable(Exception):
    """The graph or a value of its translation is one this cache does not keep."""


MAX_ENTRY_BYTES = 64 << 20  # a larger file is not read


def directory(cache_dir):
    return os.path.join(cache_dir, "dynamo") if cache_dir else None


def key(gm, example_inputs, extra):
    """The hex key of (graph, inputs, extra: what else the caller's translation depends on),
    or raises Uncacheable saying why not."""
    import fusejit

    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            raise Uncacheable(f"a {node.op} node ({node.target})")
    inputs = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            if type(x) not in (torch.Tensor, torch.nn.Parameter):
                raise Uncacheable(f"an input of type {type(x).__name__}")
            sizes = list(x.shape) + list(x.stride()) + [x.storage_offset()]
            if not all(isinstance(s, int) for s in sizes):
                raise Uncacheable("symbolic sizes")
            inputs.append(["tensor", str(x.dtype), list(x.shape), list(x.stride()),
                           str(x.device), x.requires_grad])
        elif type(x) in (int, float, bool):
            inputs.append([type(x).__name__, x])
        else:
            raise Uncacheable(f"an input of type {type(x).__name__}")
    described = json.dumps([FORMAT, fusejit.__version__, _translator_digest(), torch.__version__,
                            _ambient_state(), inputs, extra, gm.code])
    return hashlib.sha256(described.encode()).hexdigest()[:40]


def _ambient_state():
    """The global state AOTAutograd traces under that Dynamo's code does not show: grad and
    inference mode, the default dtype (factory calls without a dtype), and autocast entered
    outside the compiled function (it inserts casts into the ATen graph)."""
    try:
        autocast = [[d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d))]
                    for d in ("cpu", "cuda")]
    except (AttributeError, TypeError, RuntimeError) as e:  # a torch without these
        raise Uncacheable(f"autocast state unknown ({e})")
    return [torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
            str(torch.get_default_dtype()), autocast]


_digest = None


def _translator_digest():
    """A hash of the translator's own source (this package's dynamo, _aten and this module):
    what fusejit takes, and how, may change without the version changing (a development
    build), and an entry written by another translator is then never read."""
    global _digest
    if _digest is None:
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ("dynamo.py", "_aten.py", "_translation_cache.py"):
            try:
                with open(os.path.join(here, name), "rb") as f:
                    h.update(f.read())
            except OSError:
                h.update(name.encode())
        _digest = h.hexdigest()[:16]
    return _digest


def aot_wrapping(gm, n_inputs):
    """The inputs AOTAutograd's runtime wrappers copy the graph's first outputs back into (their
    positions, in order: AOTAutograd puts a mutated input's new value before the user's outputs
    and copies it into the input after the call), or None when the wrappers do anything else a
    loaded piece would have to repeat. From the metadata AOTAutograd traced (its TracingContext):
    data mutations only (no metadata or storage mutation, no resize, no stream), outputs that
    alias nothing, no effect token, and the graph takes the inputs Dynamo gives, one each."""
    from torch._guards import TracingContext

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != n_inputs:
        return None
    tc = TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    if meta is None:
        return None
    try:
        mutated = list(meta.mutated_inp_runtime_indices)
        if any(not i.mutates_data for i in (meta.input_info[k] for k in mutated)):
            return None
        if any(i.mutates_metadata or i.mutates_storage_metadata or i.mutation_inductor_storage_resize
               for i in meta.input_info):
            return None
        if any(k is not None for k in (meta.mutated_inp_stream_indices or [])):
            return None
        if any(o.output_type.name != "non_alias" or not issubclass(o.raw_type, torch.Tensor)
               for o in meta.output_info):
            return None
        if meta.num_intermediate_bases or meta.tokens or meta.is_rng_op_functionalized:
            return None
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        if not isinstance(outputs, (list, tuple)):
            return None
        return mutated if len(outputs) == len(mutated) + len(meta.output_info) else None
    except AttributeError:  # a torch whose metadata names these otherwise: keep nothing
        return None


def load(dir_path, k):
    """The entry for key k (a dict), or None when there is none or it is unusable."""
    path = os.path.join(dir_path, k + ".json")
    if os.path.islink(dir_path):
        _log(f"fusejit: {dir_path} is a symlink: translations are not read from it")
        return None
    try:
        # As the kernel cache does: a symlink at the entry's name is never followed, and only
        # a regular file is read.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
                raise ValueError("not a regular file of at most 64 MiB")
            entry = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        _log(f"fusejit: ignoring the translation {path}: {e}")
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
        _log(f"fusejit: ignoring the translation {path}: not format {FORMAT} for its key")
        return None
    return entry


def store(dir_path, k, entry):
    """Writes the entry atomically (a temporary file renamed over the name); a directory that
    cannot be written costs the next process its AOTAutograd tracing, nothing else."""
    try:
        if os.path.islink(dir_path):
            raise OSError(f"{dir_path} is a symlink")
        os.makedirs(dir_path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=k + ".", suffix=".tmp", dir=dir_path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(entry, format=FORMAT, key=k), f)
            os.replace(tmp, os.path.join(dir_path, k + ".json"))
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(dir_path)
    except OSError as e:
        _log(f"fusejit: could not keep a translation in {dir_path}: {e}")


def _prune(dir_path):
    names = [n for n in os.listdir(dir_path) if n.endswith(".json")]
    if len(names) <= MAX_ENTRIES:
        return
    paths = [os.path.join(dir_path, n) for n in names]
    paths.sort(key=lambda p: os.stat(p).st_mtime_ns)
    for p in paths[: len(paths) - MAX_ENTRIES]:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


MAX_CONSTANT_ELEMENTS = 4096  # a constant tensor larger than this is not kept


def encode_tensor(t):
    """A constant tensor (e.g. the index AOTAutograd lifts from `x[:, [-1]]`) as JSON."""
    if type(t) is not torch.Tensor or t.numel() > MAX_CONSTANT_ELEMENTS or t.is_complex():
        raise Uncacheable("a constant tensor this cache does not keep")
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # AOTAutograd calls the compiler under its FakeTensorMode
        values = t.detach().cpu().reshape(-1).tolist()
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "device": str(t.device), "values": values}


def decode_tensor(data):
    dtype = getattr(torch, str(data["dtype"]), None)
    if not isinstance(dtype, torch.dtype) or dtype.is_complex:
        raise ValueError(f"unknown dtype {data['dtype']!r:.40}")
    shape = [int(n) for n in data["shape"]]
    values = torch.tensor(data["values"], dtype=dtype)
    return values.reshape(shape).to(torch.device(str(data["device"])))


def encode(value, ref_type):
    """A step's argument as JSON: refs to other steps' values, and the plain values ATen ops
    take (numbers, strings, None, dtypes, devices, layouts, memory formats, and lists, tuples
    and dicts of them). Anything else raises Uncacheable."""
    if isinstance(value, ref_type):
        return {"ref": value.name}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {"tuple": [encode(v, ref_type) for v in value]}
    if isinstance(value, list):
        return {"list": [encode(v, ref_type) for v in value]}
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return {"dict": {k: encode(v, ref_type) for k, v in value.items()}}
    raise Uncacheable(f"an argument of type {type(value).__name__}")


def decode(value, ref_type):
    """encode's inverse; raises ValueError on anything encode does not write."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"unknown value {value!r:.80}")
    (tag, v), = value.items()
    if tag == "ref" and isinstance(v, str):
        return ref_type(v)
    if tag in ("dtype", "layout", "memory_format"):
        kind = {"dtype": torch.dtype, "layout": torch.layout,
                "memory_format": torch.memory_format}[tag]
        out = getattr(torch, v, None) if isinstance(v, str) else None
        if not isinstance(out, kind):
            raise ValueError(f"unknown {tag} {v!r:.40}")
        return out
    if tag == "device" and isinstance(v, str):
        return torch.device(v)
    if tag in ("tuple", "list") and isinstance(v, list):
        items = [decode(x, ref_type) for x in v]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(v, dict):
        return {k: decode(x, ref_type) for k, x in v.items()}
    raise ValueError(f"unknown value {value!r:.80}")


def _log(line):
    import logging

    logging.getLogger("fusejit.dynamo").info(line)
