#!/usr/bin/env python3
"""Times workloads in PyTorch eager and under torch.compile, for comparison with fusejit_bench
in the same device call. Prints one line per workload, `<name> <eager_ms> <compile_ms>` (medians
of CUDA-event timed runs after warm-up, over copies of the inputs in turn where a run moves less
than twice the L2, as fusejit times: bench/rotation.py), which `fusejit_bench --torch FILE` reads.

  torch_bench.py TRACE...          each trace file (docs/trace-format.md) interpreted in torch:
                                   eager runs the interpreted program op by op, compile runs
                                   torch.compile of the same program; the name is the file's stem
  torch_bench.py [--only NAME,...] the seed workloads of examples/traces/, written with torch's
                                   own ops (F.layer_norm, torch.softmax, ...)
  torch_bench.py --parse-only TRACE...  parses each trace and prints the torch program it becomes;
                                   needs no torch and no GPU (the CPU test of the interpreter)

A trace becomes a Python function of its inputs, one statement per node, with the meaning of
fusejit's reference interpreter (ir/interp.cpp): results take the node's stated dtype (the IR's
promotion, not torch's 0-dim rule), relu/maximum/minimum/max/min propagate NaN (as torch's do),
integer sums accumulate in i64, float inputs are torch.randn in their dtype, integer inputs
uniform in [-8, 8], bool inputs fair coins. gather wraps negative indices once and clamps the
rest, as fusejit does. rand and randn become torch.rand and torch.randn, and their key operand
(an i64[2] input holding the seed and offset) is passed but not read: torch's generator is not
fusejit's Philox layout, so traces with random ops are compared by time only, never by value.
The older spelling of the key as attributes (`rand seed=N offset=N`, no operand) is read too.
"""
import argparse
import os
import re
import signal
import sys
import time

from rotation import input_sets

# ---- the trace format (docs/trace-format.md) -------------------------------------------------

TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32",
               "i64": "int64", "bool": "bool"}
FLOATS = ("f32", "f16", "bf16")

UNARY = {
    "neg": "torch.neg({})", "abs": "torch.abs({})", "exp": "torch.exp({})",
    "log": "torch.log({})", "sqrt": "torch.sqrt({})", "rsqrt": "torch.rsqrt({})",
    "sin": "torch.sin({})", "cos": "torch.cos({})", "tanh": "torch.tanh({})",
    "sigmoid": "torch.sigmoid({})", "relu": "torch.relu({})", "gelu": "F.gelu({})",
    "gelu_tanh": "F.gelu({}, approximate='tanh')", "silu": "F.silu({})",
    "reciprocal": "torch.reciprocal({})",
}
# Unary ops whose integer operand enters as f32 (kFloatResult in ir/op.h).
FLOAT_RESULT_UNARY = set(UNARY) - {"neg", "abs", "relu"}
BINARY = {
    "add": "torch.add({}, {})", "sub": "torch.sub({}, {})", "mul": "torch.mul({}, {})",
    "div": "torch.div({}, {})", "maximum": "torch.maximum({}, {})",
    "minimum": "torch.minimum({}, {})", "pow": "torch.pow({}, {})",
}
COMPARE = {"eq": "torch.eq", "ne": "torch.ne", "lt": "torch.lt", "le": "torch.le",
           "gt": "torch.gt", "ge": "torch.ge"}
REDUCE = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin"}
RANDOM = {"rand": "torch.rand", "randn": "torch.randn"}
# concat takes one or more operands (VARIADIC).
VARIADIC = -1
ARITY = {"input": 0, "const": 0, "arange": 0, "where": 3, "cast": 1, "reshape": 1, "permute": 1,
         "expand": 1, "slice": 1, "concat": VARIADIC, "matmul": 2, "gather": 2, "rand": 1,
         "randn": 1, **{k: 1 for k in UNARY}, **{k: 2 for k in BINARY},
         **{k: 2 for k in COMPARE}, **{k: 1 for k in REDUCE}}

NODE = re.compile(r"%(\d+) : (\w+)\[([0-9,]*)\] = (\w+)(.*)$")


class TraceError(Exception):
    pass


class Node:
    def __init__(self, op, dtype, shape, inputs, axes=None, keepdim=False, value=None):
        self.op, self.dtype, self.shape, self.inputs = op, dtype, shape, inputs
        self.axes, self.keepdim, self.value = axes, keepdim, value
        self.ints = {}  # slice: axis, start, step; concat: axis

    def __repr__(self):
        attrs = f" axes={self.axes}" if self.axes is not None else ""
        attrs += " keepdim" if self.keepdim else ""
        attrs += f" value={self.value}" if self.value is not None else ""
        args = ", ".join(f"%{i}" for i in self.inputs)
        return f"{self.op} {self.dtype}{list(self.shape)} ({args}){attrs}"


def parse_trace(text, where="trace"):
    """The nodes (densely numbered, in file order) and the output ids of a trace's text."""
    lines = text.splitlines()
    if not lines or lines[0].split() != ["fusejit-trace", "1"]:
        raise TraceError(f"{where}:1: expected the header 'fusejit-trace 1'")
    nodes, label_to_id, outputs = [], {}, None

    def ref(token, lineno):
        token = token.strip()
        if not token.startswith("%") or token[1:] not in label_to_id:
            raise TraceError(f"{where}:{lineno}: '{token}' is not a defined node id")
        return label_to_id[token[1:]]

    for lineno, line in enumerate(lines[1:], start=2):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if outputs is not None:
            raise TraceError(f"{where}:{lineno}: nothing may follow the output line")
        if line.startswith("output "):
            outputs = [ref(t, lineno) for t in line[len("output "):].split(",")]
            continue
        m = NODE.match(line)
        if not m:
            raise TraceError(f"{where}:{lineno}: cannot read '{line}'")
        label, dtype, dims, op, rest = m.groups()
        if dtype not in TORCH_DTYPE:
            raise TraceError(f"{where}:{lineno}: unknown dtype '{dtype}'")
        if op not in ARITY:
            raise TraceError(f"{where}:{lineno}: unknown op '{op}'")
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        node = Node(op, dtype, shape, [])
        rest = rest.strip()
        if op == "const":
            node.value = float(rest)
            rest = ""
        am = re.search(r"(?:^|\s)axes=\[([-0-9,]*)\]", rest)
        if am:
            node.axes = [int(a) for a in am.group(1).split(",")] if am.group(1) else []
            rest = rest[:am.start()] + rest[am.end():]
        rm = re.search(r"(?:^|\s)seed=(\d+) offset=(\d+)$", rest)  # the key's older spelling
        if rm:
            rest = rest[:rm.start()]
        if rm and op not in RANDOM:
            raise TraceError(f"{where}:{lineno}: seed=N offset=N go with rand and randn only")
        for key in ("axis", "start", "step"):
            im = re.search(rf"(?:^|\s){key}=(-?[0-9]+)", rest)
            if im:
                node.ints[key] = int(im.group(1))
                rest = rest[:im.start()] + rest[im.end():]
        if re.search(r"(?:^|\s)keepdim$", rest):
            node.keepdim = True
            rest = rest[:rest.rindex("keepdim")]
        operands = [t for t in rest.split(",") if t.strip()]
        node.inputs = [ref(t, lineno) for t in operands]
        arity = ARITY[op] - (1 if rm else 0)  # the older spelling has no key operand
        if len(node.inputs) != arity and not (arity == VARIADIC and node.inputs):
            raise TraceError(f"{where}:{lineno}: '{op}' takes {arity} operand(s), got "
                             f"{len(node.inputs)}")
        if (op in REDUCE or op in ("permute", "gather")) and node.axes is None:
            raise TraceError(f"{where}:{lineno}: '{op}' needs axes=[...]")
        if label in label_to_id:
            raise TraceError(f"{where}:{lineno}: %{label} is defined twice")
        label_to_id[label] = len(nodes)
        nodes.append(node)
    if outputs is None:
        raise TraceError(f"{where}: no output line")
    return nodes, outputs


def promote(a, b):
    """The IR's promotion (ir/dtype.h): bool < integers < floats; wider wins; f16+bf16 is f32."""
    order = ["bool", "i32", "i64"]
    if a == b:
        return a
    if a in FLOATS and b in FLOATS:
        return "f32" if "f32" in (a, b) or {a, b} == {"f16", "bf16"} else a
    if a in FLOATS or b in FLOATS:
        return a if a in FLOATS else b
    return max(a, b, key=order.index)


def torch_program(nodes, outputs):
    """Python source of `make_trace_fn(DEVICE)`, which returns a function taking the trace's
    inputs in order and returning its outputs as a tuple.

    Each operand whose dtype is not the one the IR computes the node in is cast first; torch
    would otherwise apply its own rules (a 0-dim f32 times a bf16 tensor stays bf16 in torch, but
    is f32 in the IR). Constants become 0-dim device tensors made once, outside the timed
    function, in each dtype they are used in.
    """
    consts, body, params = {}, [], []

    def arg(i, want=None):
        want = want or nodes[i].dtype
        if nodes[i].op == "const":
            name = f"c{i}_{want}"
            consts[name] = (nodes[i].value, want)
            return name
        v = f"v{i}"
        return v if nodes[i].dtype == want else f"{v}.to(torch.{TORCH_DTYPE[want]})"

    for i, n in enumerate(nodes):
        ins = n.inputs
        if n.op == "input":
            params.append(f"v{i}")
            continue
        if n.op == "const":
            continue  # made once, by arg()
        if n.op in UNARY:
            want = n.dtype if n.op in FLOAT_RESULT_UNARY else nodes[ins[0]].dtype
            expr = UNARY[n.op].format(arg(ins[0], want))
        elif n.op in BINARY:
            expr = BINARY[n.op].format(arg(ins[0], n.dtype), arg(ins[1], n.dtype))
        elif n.op in COMPARE:
            want = promote(nodes[ins[0]].dtype, nodes[ins[1]].dtype)
            expr = f"{COMPARE[n.op]}({arg(ins[0], want)}, {arg(ins[1], want)})"
        elif n.op == "where":
            expr = f"torch.where({arg(ins[0])}, {arg(ins[1], n.dtype)}, {arg(ins[2], n.dtype)})"
        elif n.op == "cast":
            expr = arg(ins[0], n.dtype)
            if nodes[ins[0]].dtype == n.dtype:
                expr = f"{expr}.clone()"  # a no-op cast is still a node of its own
        elif n.op in REDUCE:
            x = arg(ins[0], n.dtype if n.op == "sum" else None)  # integer sums: i64
            expr = f"{REDUCE[n.op]}({x}, dim={tuple(n.axes)}, keepdim={n.keepdim})"
        elif n.op == "reshape":
            expr = f"{arg(ins[0])}.reshape({n.shape})"
        elif n.op == "permute":
            expr = f"{arg(ins[0])}.permute({tuple(n.axes)})"
        elif n.op == "expand":
            expr = f"{arg(ins[0])}.expand({n.shape})"
        elif n.op == "slice":
            a, start, step = n.ints["axis"] % len(n.shape), n.ints["start"], n.ints["step"]
            stop = start + step * (n.shape[a] - 1) + 1
            expr = f"{arg(ins[0])}[{':, ' * a}{start}:{stop}:{step}]"
        elif n.op == "concat":
            parts = ", ".join(arg(i, n.dtype) for i in ins)
            expr = f"torch.cat([{parts}], dim={n.ints['axis']})"
        elif n.op == "arange":
            expr = f"torch.arange({n.shape[0]}, device=DEVICE, dtype=torch.{TORCH_DTYPE[n.dtype]})"
        elif n.op == "matmul":
            expr = f"torch.matmul({arg(ins[0])}, {arg(ins[1])})"
        elif n.op == "gather":
            axis, extent = n.axes[0], nodes[ins[0]].shape[n.axes[0]]
            idx = f"{arg(ins[1], 'i64')}"
            idx = f"torch.where({idx} < 0, {idx} + {extent}, {idx}).clamp(0, {extent - 1})"
            expr = f"torch.gather({arg(ins[0])}, {axis}, {idx})"
        elif n.op in RANDOM:
            expr = (f"{RANDOM[n.op]}({n.shape}, dtype=torch.{TORCH_DTYPE[n.dtype]}, "
                    f"device=DEVICE)")
        else:
            raise TraceError(f"no torch spelling for '{n.op}'")
        body.append(f"        v{i} = {expr}")
    # fusejit writes each output contiguous: so must torch (eager and Inductor would otherwise
    # keep a permuted input's strides and skip the transpose); an input returned as is is copied.
    results = "".join(f"{arg(o)}.{'clone' if nodes[o].op == 'input' else 'contiguous'}(), "
                      for o in outputs)
    made = [f"    {name} = torch.tensor(float('{value!r}'), dtype=torch.{TORCH_DTYPE[dt]}, "
            f"device=DEVICE)"
            for name, (value, dt) in consts.items()]
    return "\n".join(["def make_trace_fn(DEVICE):", *made,
                      f"    def trace_fn({', '.join(params)}):", *body,
                      f"        return ({results.rstrip()})", "    return trace_fn", ""])


def load_trace(path):
    with open(path, encoding="utf-8") as f:
        nodes, outputs = parse_trace(f.read(), path)
    return nodes, outputs, torch_program(nodes, outputs)


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def parse_only(paths):
    status = 0
    for path in paths:
        try:
            nodes, outputs, source = load_trace(path)
            compile(source, path, "exec")  # the generated program is valid Python
        except (TraceError, OSError, SyntaxError) as e:
            print(f"torch_bench: {e}", file=sys.stderr)
            status = 1
            continue
        print(f"# {stem(path)}: {len(nodes)} nodes, outputs {outputs}")
        print(source)
    return status


# ---- timing ----------------------------------------------------------------------------------

def seed_workloads():
    import torch
    import torch.nn.functional as F

    def ew_chain(x, w, b):
        return torch.relu(x * w + b)

    def long_chain(x, w, b):
        return torch.tanh(torch.sigmoid(x * w + b) * x) * 0.5 + torch.sqrt(torch.abs(w - b))

    def bias_gelu(x, b, w):
        return F.gelu(x + b) * w

    def sumsq(x):
        return (x * x).sum(-1)

    def naive_softmax(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def softmax(x):
        return torch.softmax(x, -1)

    def layernorm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)

    def add_layernorm(x, y, w, b):
        s = x + y
        return s, F.layer_norm(s, (s.shape[-1],), w, b)

    def gemm_bias_relu(x, w, b):
        return torch.relu(x @ w + b)

    def gemm_bias_gelu(x, w, b):
        return F.gelu(x @ w + b, approximate="tanh")

    def two_gemm_mul(x, w1, w2):
        return (x @ w1) * (x @ w2)

    def gemm_layernorm(x, w, b):
        y = x @ w + b
        return F.layer_norm(y, (y.shape[-1],))

    def mlp(x, w1, b1, w2, b2):
        return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    n, g = 16384, 8192
    mat3 = [(n, n)] * 3
    mat_vec2 = [(n, n), (n,), (n,)]
    gemm_bias = [(g, g), (g, g), (g,)]
    memory = [
        ("ew_chain", ew_chain, mat3), ("long_chain", long_chain, mat3),
        ("bias_gelu", bias_gelu, mat_vec2), ("sumsq", sumsq, [(n, n)]),
        ("naive_softmax", naive_softmax, [(n, n)]), ("softmax", softmax, [(n, n)]),
        ("layernorm", layernorm, mat_vec2), ("rmsnorm", rmsnorm, [(n, n), (n,)]),
        ("add_layernorm", add_layernorm, [(n, n), (n, n), (n,), (n,)]),
    ]
    gemm = [
        ("gemm_bias_relu", gemm_bias_relu, gemm_bias), ("gemm_bias_gelu", gemm_bias_gelu, gemm_bias),
        ("two_gemm_mul", two_gemm_mul, [(g, g)] * 3), ("gemm_layernorm", gemm_layernorm, gemm_bias),
        ("mlp", mlp, [(g, g), (g, g), (g,), (g, g), (g,)]),
    ]
    for name, fn, shapes in memory:
        for dtype in (torch.float32, torch.bfloat16):
            yield f"{name}_{'f32' if dtype == torch.float32 else 'bf16'}", fn, shapes, dtype
    for name, fn, shapes in gemm:
        yield f"{name}_bf16", fn, shapes, torch.bfloat16


def median_ms(fn, sets, iters, warmup):
    """The median of `iters` timed calls after `warmup`, the calls taking their arguments from
    `sets` in turn (bench/rotation.py)."""
    import torch
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    for i in range(iters):
        args = sets[(warmup + i) % len(sets)]
        start[i].record()
        fn(*args)
        stop[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, stop))
    return times[len(times) // 2]


class TimeLimit(Exception):
    pass


def _on_alarm(signum, frame):
    raise TimeLimit()


def time_both(name, fn, make_inputs, args):
    """Prints `name eager_ms compile_ms`; gives up on the workload after args.limit seconds."""
    import torch
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(max(1, int(args.limit)))
    inputs = None
    try:
        inputs = input_sets(torch, make_inputs(), runs=args.iters + args.warmup)
        with torch.no_grad():
            eager = median_ms(fn, inputs, args.iters, args.warmup)
            compiled = median_ms(torch.compile(fn), inputs, args.iters, args.warmup)
        print(f"{name} {eager:.4f} {compiled:.4f}", flush=True)
    except TimeLimit:
        print(f"torch_bench: {name}: over the {args.limit:.0f} s limit, skipped", file=sys.stderr)
    except Exception as e:  # one workload failing must not lose the others' results
        print(f"torch_bench: {name}: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        signal.alarm(0)
        del inputs
        torch._dynamo.reset()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def random_input(node):
    import torch
    dt = getattr(torch, TORCH_DTYPE[node.dtype])
    if node.dtype in FLOATS:
        return torch.randn(node.shape, device="cuda", dtype=dt)
    if node.dtype == "bool":
        return torch.rand(node.shape, device="cuda") < 0.5
    return torch.randint(-8, 9, node.shape, device="cuda", dtype=dt)


def out_of_budget(deadline, args, names):
    """True, saying what is left out, when the time budget is spent."""
    if time.monotonic() <= deadline:
        return False
    print(f"torch_bench: time budget of {args.budget:.0f} s spent; not timed: {' '.join(names)}",
          file=sys.stderr)
    return True


def bench_traces(paths, args):
    import torch
    import torch.nn.functional as F
    deadline = time.monotonic() + args.budget
    for k, path in enumerate(paths):
        if out_of_budget(deadline, args, [stem(p) for p in paths[k:]]):
            break
        try:
            nodes, _, source = load_trace(path)
        except (TraceError, OSError) as e:
            print(f"torch_bench: {e}", file=sys.stderr)
            continue
        scope = {"torch": torch, "F": F}
        exec(compile(source, path, "exec"), scope)
        input_nodes = [n for n in nodes if n.op == "input"]
        time_both(stem(path), scope["make_trace_fn"](torch.device("cuda")),
                  lambda: [random_input(n) for n in input_nodes], args)


def bench_seed(only, args):
    import torch
    deadline = time.monotonic() + args.budget
    chosen = [w for w in seed_workloads() if not only or w[0] in only]
    for k, (name, fn, shapes, dtype) in enumerate(chosen):
        if out_of_budget(deadline, args, [w[0] for w in chosen[k:]]):
            break
        time_both(name, fn,
                  lambda: [torch.randn(s, device="cuda", dtype=dtype) for s in shapes], args)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", help="trace files; none: the seed workloads")
    parser.add_argument("--only", default="", help="seed workloads to time, comma-separated")
    parser.add_argument("--parse-only", action="store_true",
                        help="parse the traces and print their torch programs (no torch needed)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--limit", type=float, default=120,
                        help="seconds per workload (compile included) before it is skipped")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds in all; workloads not started by then are skipped")
    args = parser.parse_args()
    if args.parse_only:
        return parse_only(args.traces)
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.traces:
        bench_traces(args.traces, args)
    else:
        bench_seed(set(filter(None, args.only.split(","))), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
