#!/usr/bin/env python3
"""Issue 35's model table: models nobody here wrote, run by PyTorch eager, Inductor
(`torch.compile` default) and fusejit (`torch.compile(backend="fusejit")`), side by side in one
process. Their code is imported from checkouts given on the command line, never copied here:

  --nanogpt PATH   karpathy/nanoGPT's `GPT`: GPT-2 124M (`gpt2`) and 774M (`gpt2-large`), the
                   eval forward at batch 8, seq 1024 (with targets=None it returns the last
                   position's logits)
  --gptfast PATH   pytorch-labs/gpt-fast's `Transformer`: Llama-3.1-8B shapes (`llama-prefill`),
                   prefill of 512 tokens at batch 1 (KV caches of 512 written in place)

Random bf16 weights (each module's own initializer), inputs drawn with a fixed seed, no grad.
Per model and backend, in the table it prints (markdown, for bench/RESULTS.md):
  ms          median forward time of --iters after --warmup (CUDA events; perf_counter on the CPU)
  kernels     CUDA kernels per forward (torch.profiler, one forward; memcpy/memset left out)
  cold s      the first call (compile and run) in a process of its own with empty caches (a new
              cache dir), so that neither backend inherits what an earlier row of the table
              loaded or warmed in this process (Dynamo's first use, libraries); eager's, and
              every row's with --cold-in-process, is the first call in this process
  warm s      the same in a new process over --cache-dir, which this process's calls filled
              (fusejit's kernel cache, FUSEJIT_CACHE_DIR, and Inductor's,
              TORCHINDUCTOR_CACHE_DIR, are both under it)
  graphs      Dynamo graphs; graph breaks = graphs - 1 (torch._dynamo.explain for Inductor)
  splits      fusejit: ops left to torch between its pieces (each named below the table, from
              fusejit.dynamo's reports); Inductor: none by construction
  under the table, per fusejit row: its calls (first, timed, checked, profiled), how many ran
              as a Replay, and how many of those were one CUDA graph launch
  max rel err max |out - eager| / max |eager|, against eager in the same process, of the first
              call and of one after the timed ones (the larger); "ok" when at
              most --tol (bf16 rounds at 2^-8 = 0.0039 per op, and these are 12 to 36 layers)
--tiny --device cpu: small configs of the same classes (fusejit runs its CPU reference: slow,
so only tiny shapes), the smoke test.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gptfast_decode import TINY, gptfast_model, random_model  # noqa: E402

BACKENDS = ("eager", "inductor", "fusejit")
MODELS = ("gpt2", "gpt2-large", "llama-prefill")


def nanogpt_module(path):
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "model.py")):
        raise SystemExit(f"{path} has no model.py: --nanogpt names a checkout of karpathy/nanoGPT")
    # nanoGPT's module is named `model`, as gpt-fast's: load it under a name of its own.
    import importlib.util
    spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(path, "model.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_model"] = module
    spec.loader.exec_module(module)
    return module


def nanogpt_case(args, name):
    """(model, inputs) for a GPT-2 config of nanoGPT's GPT."""
    import torch
    ng = nanogpt_module(args.nanogpt)
    shapes = {"gpt2": dict(n_layer=12, n_head=12, n_embd=768),
              "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280)}[name]
    if args.tiny:
        shapes = dict(n_layer=2 if name == "gpt2" else 3, n_head=4, n_embd=64)
    batch, seq, vocab = (2, 32, 256) if args.tiny else (8, 1024, 50257)
    config = ng.GPTConfig(block_size=seq, vocab_size=vocab, dropout=0.0, bias=True, **shapes)
    model = random_model(ng.GPT, config, args.device, args.seed)
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    idx = torch.randint(0, vocab, (batch, seq), device=args.device, generator=g)
    return model, (idx,)


def llama_case(args):
    """(model, inputs) for gpt-fast's Transformer at Llama-3.1-8B shapes, prefill of 512."""
    import torch
    gm = gptfast_model(args.gptfast)
    config = gm.ModelArgs(**TINY) if args.tiny else gm.ModelArgs.from_name("llama-3.1-8b")
    seq = 16 if args.tiny else 512
    model = random_model(gm.Transformer, config, args.device, args.seed)
    with torch.device(args.device):
        model.setup_caches(max_batch_size=1, max_seq_length=seq)
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    idx = torch.randint(0, config.vocab_size, (1, seq), device=args.device, generator=g)
    return model, (idx, torch.arange(seq, device=args.device))


def build_case(args, name):
    if name == "llama-prefill":
        return llama_case(args)
    return nanogpt_case(args, name)


def wanted_models(args):
    out = []
    for name in args.models:
        if name == "llama-prefill" and not args.gptfast:
            continue
        if name != "llama-prefill" and not args.nanogpt:
            continue
        out.append(name)
    return out


def sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def compiled(model, backend):
    import torch
    if backend == "eager":
        return model
    return torch.compile(model, backend="fusejit") if backend == "fusejit" else torch.compile(model)


def first_call_s(fn, inputs, device):
    sync(device)
    start = time.perf_counter()
    out = fn(*inputs)
    sync(device)
    return time.perf_counter() - start, out


def median_ms(fn, inputs, device, warmup, iters):
    import torch
    for _ in range(warmup):
        fn(*inputs)
    times = []
    for _ in range(iters):
        if device.startswith("cuda"):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*inputs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            start = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def kernel_count(fn, inputs, device):
    """CUDA kernels one forward launches (torch.profiler), or None on the CPU."""
    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        sync(device)
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return sum(1 for n in names if not n.lower().startswith(("memcpy", "memset")))


def relative_error(out, ref):
    """Over the first output (nanoGPT's GPT returns (logits, loss))."""
    if isinstance(out, (tuple, list)):
        out, ref = out[0], ref[0]
    o, r = out.float(), ref.float()
    return ((o - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()


def fusejit_reports_since(start):
    """What the fusejit backend made of the graphs it compiled since report number `start`."""
    from fusejit import dynamo
    return dynamo.Explanation(dynamo._reports[start:])


def fusejit_calls():
    """The backend's counters of calls and Replays, with the CUDA graph launches of its
    Contexts' Replays (fusejit.dynamo's Contexts: one per device)."""
    import fusejit.dynamo
    stats = fusejit.dynamo.stats()
    launches = sum(c.stats()["replay_graph_launches"] for c in fusejit.dynamo._contexts.values())
    return {"calls": stats["calls"], "replayed": stats["replayed_calls"],
            "built": stats["replays_built"], "graph launches": launches}


def graph_count(model, inputs):
    """Dynamo's graphs for the model (graph breaks + 1), whatever the backend."""
    import torch._dynamo
    torch._dynamo.reset()
    e = torch._dynamo.explain(model)(*inputs)
    torch._dynamo.reset()
    return e.graph_count


def measure(args, name, backend, model, inputs, ref):
    """One row of the table (a dict)."""
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    row = dict(model=name, backend=backend)
    start, calls = 0, None
    if backend == "fusejit":
        import fusejit.dynamo
        start = len(fusejit.dynamo._reports)
        calls = fusejit_calls()
    fn = compiled(model, backend)
    with torch.no_grad():
        row["first_s"], out = first_call_s(fn, inputs, args.device)
        row["cold_s"] = row["first_s"]
        row["err"] = relative_error(out, ref) if ref is not None else 0.0
        row["ms"] = median_ms(fn, inputs, args.device, args.warmup, args.iters)
        if ref is not None:  # a later call too: fusejit replays from the second call on
            row["err"] = max(row["err"], relative_error(fn(*inputs), ref))
        row["kernels"] = kernel_count(fn, inputs, args.device)
    if backend == "fusejit":
        e = fusejit_reports_since(start)
        row["graphs"], row["splits"], row["split_names"] = e.graphs, len(e.splits), e.splits
        row["pieces"] = len(e.pieces)
        now = fusejit_calls()
        row["replays"] = {k: now[k] - calls[k] for k in now}
    elif backend == "inductor":
        row["splits"] = 0
    torch._dynamo.reset()
    return row, out


def compile_s_in_new_process(args, name, backend, cache_dir):
    """The first call's time in a new process whose caches are under `cache_dir`."""
    cmd = [sys.executable, os.path.abspath(__file__), "--compile-only", name, backend,
           "--device", args.device, "--cache-dir", cache_dir, "--seed", str(args.seed)]
    for flag in ("nanogpt", "gptfast"):
        if getattr(args, flag):
            cmd += [f"--{flag}", getattr(args, flag)]
    if args.tiny:
        cmd.append("--tiny")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=min(max(args.budget, 60), 3600))
    for line in done.stdout.splitlines():
        if line.startswith("COMPILE "):
            return float(line.split()[3])
    sys.stderr.write(f"compile of {name}/{backend} in a new process failed:\n"
                     f"{done.stdout[-2000:]}{done.stderr[-2000:]}\n")
    return None


def compile_only(args):
    import torch
    name, backend = args.compile_only
    model, inputs = build_case(args, name)
    with torch.no_grad():
        seconds, _ = first_call_s(compiled(model, backend), inputs, args.device)
    print(f"COMPILE {name} {backend} {seconds:.3f}", flush=True)
    return 0


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def print_table(rows, args):
    print("\n| model | backend | ms | kernels | cold s | warm s | graphs | splits (pieces) | max rel err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['model']} | {r['backend']} | {r['skipped']} | | | | | | |")
            continue
        err = "-" if r["backend"] == "eager" else \
            f"{r['err']:.2e} {'ok' if r['err'] <= args.tol else 'OVER'}"
        print(f"| {r['model']} | {r['backend']} | {r['ms']:.3f} | {cell(r.get('kernels'), '{}')} | "
              f"{cell(r.get('cold_s'), '{:.2f}')} | {cell(r.get('warm_s'), '{:.2f}')} | {cell(r.get('graphs'), '{}')} | "
              f"{cell(r.get('splits'), '{}')}{cell(r.get('pieces'), ' ({})').replace('-', '')} | {err} |")
    for r in rows:
        if r.get("replays"):
            c = r["replays"]
            print(f"- {r['model']}, fusejit calls: {c['calls']}, replayed {c['replayed']} "
                  f"({c['built']} Replays built), {c['graph launches']} of them one CUDA graph launch")
    for r in rows:
        names = r.get("split_names", [])
        if names:
            counted = ", ".join(f"{n} x{names.count(n)}" for n in dict.fromkeys(names))
            print(f"- {r['model']}, ops fusejit left to torch: {counted}")


def run_table(args):
    import torch
    rows, began = [], time.perf_counter()
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else "")
          + f", cache dir {args.cache_dir}", flush=True)
    for name in wanted_models(args):
        model, inputs = build_case(args, name)
        with torch.no_grad():
            ref = model(*inputs)
        graphs = graph_count(model, inputs)
        for backend in args.backends:
            if time.perf_counter() - began > args.budget:
                rows.append(dict(model=name, backend=backend, skipped="skipped (--budget)"))
                continue
            row, _ = measure(args, name, backend, model, inputs, ref if backend != "eager" else None)
            row.setdefault("graphs", None if backend == "eager" else graphs)
            if backend != "eager" and time.perf_counter() - began < args.budget:
                if not args.cold_in_process:
                    with tempfile.TemporaryDirectory(prefix="torch_models-cold-") as empty:
                        row["cold_s"] = compile_s_in_new_process(args, name, backend, empty)
                row["warm_s"] = compile_s_in_new_process(args, name, backend, args.cache_dir)
            rows.append(row)
            fields = {k: v for k, v in row.items() if k not in ("split_names", "replays")}
            for k, v in row.get("replays", {}).items():
                fields[k.replace(" ", "_")] = v
            print("ROW " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)
        del model, inputs, ref
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print_table(rows, args)
    bad = [r for r in rows if "err" in r and r["backend"] != "eager" and r["err"] > args.tol]
    return 1 if bad else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", help="a checkout of karpathy/nanoGPT")
    p.add_argument("--gptfast", help="a checkout of pytorch-labs/gpt-fast")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--tiny", action="store_true", help="small configs (the CPU smoke test)")
    p.add_argument("--device", default=None, help="cuda when available, else cpu")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tol", type=float, default=0.05, help="largest max rel err counted ok")
    p.add_argument("--cache-dir", help="fusejit's and Inductor's caches (default: a new empty dir)")
    p.add_argument("--budget", type=float, default=1e9, help="seconds: rows past it are skipped")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile-only", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    p.add_argument("--cold-in-process", action="store_true",
                   help="cold s: the first call in this process (after the rows before it), "
                        "instead of a new process with empty caches")
    a = p.parse_args(argv)
    if not (a.nanogpt or a.gptfast):
        p.error("give --nanogpt PATH and/or --gptfast PATH")
    return a


def main(argv=None):
    args = parse_args(argv)
    args.cache_dir = os.path.abspath(args.cache_dir or tempfile.mkdtemp(prefix="torch_models-"))
    # Before torch and fusejit read them: both caches under the one dir, shared with the
    # second process that times the warm compile.
    os.environ["FUSEJIT_CACHE_DIR"] = os.path.join(args.cache_dir, "fusejit")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(args.cache_dir, "inductor")
    import torch
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.compile_only:
        return compile_only(args)
    return run_table(args)


if __name__ == "__main__":
    sys.exit(main())
