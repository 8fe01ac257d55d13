#!/usr/bin/env python3
"""gpt-fast's decoder, timed the way issue 34 compares it with examples/generate: gpt-fast's own
`model.py` (`Transformer`, `ModelArgs`) and its decode loop (`generate.py`: `generate`,
`prefill`, `decode_one_token`), imported from a checkout given on the command line
(`--gptfast PATH`; nothing of gpt-fast lives in this repository), with random bf16 weights.

  gptfast_decode.py --gptfast .models/gpt-fast                 llama-3.1-8b, batch 1, prompt 128,
                                                               256 new tokens, top-k 200, T 0.8
  gptfast_decode.py --gptfast PATH --batch 8 --config llama-3-8b
  gptfast_decode.py --gptfast PATH --tiny --device cpu --compile none   (the CPU smoke test)
  gptfast_decode.py --gptfast PATH --prompt 512 4096 --new-tokens 2 --compile none --compile-prefill
                                                               time to first token of a compiled
                                                               prefill at each length (issue 34's
                                                               prefill target)

As gpt-fast's `main` does with `--compile`, `decode_one_token` runs under
`torch.compile(mode="reduce-overhead", fullgraph=True)` (`--compile default`: Inductor without
CUDA graphs; `--compile none`: eager) and prefill stays eager unless `--compile-prefill` compiles
it as gpt-fast's `--compile_prefill` does (`torch.compile(prefill, fullgraph=True,
dynamic=True)`). The first `generate` call is the warm-up that compiles (its wall time is
`compile_s`); the `--samples` calls after it are timed.
Several prompt lengths (`--prompt 512 4096`) run in one process, shortest first, each with its own
warm-up call (its `compile_s`: whatever that length still compiles), samples and `RESULT` line.
One process spares the later lengths a fresh Dynamo and Inductor start: on an H100 the compiled
prefill's warm-up took 189 s in one process, and 67 s in a second process over the caches the
first had left on disk. gpt-fast's `generate` only grows the KV caches, to the prompt plus the new
tokens, so each length's samples attend over a cache sized for it and no longer.
Within a timed call, prefill ends with gpt-fast's own `device_sync` (wrapped around its
`prefill`), which splits the call into the time to first token and the decode steps.

Printed, one `SAMPLE` line per timed call and then one `RESULT` line (the median sample by
decode rate), all `key=value`:
  tokens_per_s         batch * new tokens over the whole `generate` call (gpt-fast's own figure,
                       prefill included)
  decode_tokens_per_s  batch * (new tokens - 1) over the decode steps alone (what
                       examples/generate's "decode: ... tokens/s" measures)
  ttft_ms              prefill of the prompt and the first sampled token
  ttft_median_ms       the median of ttft_ms over the samples (ttft_ms is the median sample's)
  peak_mem_gb          torch's peak reserved device memory so far in the process (its peak RSS
                       on the CPU)
  compile_s            the warm-up call: Dynamo, Inductor and CUDA graph capture
  copy_gbps            device-to-device copy bandwidth measured here (bytes read + written)
  weight_gb            bytes of the weights one decode step reads (all parameters but the
                       embedding table, which a step only gathers rows from)
  pct_roofline         decode steps per second over copy_gbps / weight_gb: the weights are read
                       once per step for the whole batch
"""
import argparse
import os
import resource
import statistics
import sys
import time
import types

# Llama-shaped and small enough for the CPU path in a test: 2 layers, hidden 256 (as
# examples/generate's `tiny`).
TINY = dict(block_size=512, n_layer=2, n_head=4, n_local_heads=2, dim=256, intermediate_size=512,
            vocab_size=1000, rope_base=10000)


def gptfast_model(path):
    """gpt-fast's `model` module (Transformer, ModelArgs, transformer_configs) from the checkout
    at `path`, alone: importing its generate.py also changes Inductor's settings."""
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "generate.py")):
        raise SystemExit(f"{path} has no generate.py: --gptfast names a checkout of "
                         "pytorch-labs/gpt-fast")
    if path not in sys.path:
        sys.path.insert(0, path)
    import model as gmodel
    return gmodel


def import_gptfast(path):
    """gpt-fast's `model` and `generate` modules from the checkout at `path`. Its tokenizer (which
    needs sentencepiece and tiktoken) is not used with random weights: a placeholder stands in
    when those packages are missing."""
    gmodel = gptfast_model(path)
    try:
        import tokenizer  # noqa: F401
    except ImportError as e:
        stub = types.ModuleType("tokenizer")

        def get_tokenizer(*_args, reason=str(e)):
            raise RuntimeError(f"gpt-fast's tokenizer is unavailable here ({reason})")
        stub.get_tokenizer = get_tokenizer
        sys.modules["tokenizer"] = stub
    import torch
    if not hasattr(torch.backends.cuda, "sdp_kernel"):
        # gpt-fast's decode loop enters this context manager; newer torch has only
        # torch.nn.attention.sdpa_kernel. The math backend is what it asks for.
        from torch.nn.attention import SDPBackend, sdpa_kernel
        torch.backends.cuda.sdp_kernel = lambda **_kw: sdpa_kernel([SDPBackend.MATH])
    import generate as gen
    return gmodel, gen


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gptfast", required=True, help="a checkout of pytorch-labs/gpt-fast")
    p.add_argument("--config", default="llama-3.1-8b", help="a name in gpt-fast's transformer_configs")
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 256 (CPU smoke test)")
    p.add_argument("--device", default=None, help="cuda when available, else cpu")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, nargs="+", default=None,
                   help="prompt tokens (128; tiny: 16); several lengths run one after another, "
                        "shortest first")
    p.add_argument("--new-tokens", type=int, default=None, help="generated tokens (256; tiny: 8)")
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--compile", choices=["reduce-overhead", "default", "none"], default=None,
                   help="how decode_one_token runs (reduce-overhead on CUDA, none on the CPU)")
    p.add_argument("--compile-prefill", action="store_true",
                   help="compile prefill too, as gpt-fast's --compile_prefill does")
    p.add_argument("--samples", type=int, default=3, help="timed generate calls after the warm-up")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    import torch
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    a.prompts = sorted(set(a.prompt or [16 if a.tiny else 128]))
    a.new_tokens = a.new_tokens or (8 if a.tiny else 256)
    a.compile = a.compile or ("reduce-overhead" if a.device.startswith("cuda") else "none")
    if a.prompts[0] < 1:
        p.error(f"--prompt takes lengths of at least 1 token, not {a.prompts[0]}")
    if a.samples < 1:
        p.error("--samples must be at least 1")
    if a.new_tokens < 2:
        p.error("--new-tokens must be at least 2 (one from prefill, the rest decoded)")
    return a


def sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def copy_bandwidth(device, iters=20):
    """Device-to-device copy bandwidth in GB/s, counting bytes read and written (as
    scripts/gpu-check and examples/generate count it): 1 GiB on a GPU, 64 MiB on the CPU."""
    import torch
    n = (1 << 30) if device.startswith("cuda") else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    sync(device)
    seconds = time.perf_counter() - start
    del src, dst
    return 2.0 * n * iters / seconds / 1e9


def random_model(cls, config, device, seed, dtype=None):
    """`cls(config)` with random weights in `dtype` (bf16 by default): the modules' own
    initializers, run in that dtype on the device; in eval mode."""
    import torch
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.bfloat16)
    try:
        with torch.device(device):
            model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def build_model(gmodel, args):
    """gpt-fast's Transformer with random bf16 weights, its KV caches sized for the shortest
    prompt + new tokens (gpt-fast's generate grows them for a longer one)."""
    import torch
    config = gmodel.ModelArgs(**TINY) if args.tiny else gmodel.ModelArgs.from_name(args.config)
    model = random_model(gmodel.Transformer, config, args.device, args.seed)
    with torch.device(args.device):
        model.setup_caches(max_batch_size=args.batch,
                           max_seq_length=min(args.prompts[0] + args.new_tokens, config.block_size))
    return model, config


def weight_bytes(model):
    """Bytes one decode step reads: every parameter except the embedding table."""
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters()
               if not name.startswith("tok_embeddings."))


def install_compile(gen, mode, compile_prefill):
    """What gpt-fast's main does under --compile: its module-level decode_one_token replaced by a
    compiled one, which its decode loop then calls; and under --compile_prefill, prefill."""
    import torch
    if compile_prefill:
        gen.prefill = torch.compile(gen.prefill, fullgraph=True, dynamic=True)
    if mode == "none":
        return
    kwargs = dict(fullgraph=True)
    if mode == "reduce-overhead":
        kwargs["mode"] = "reduce-overhead"
    gen.decode_one_token = torch.compile(gen.decode_one_token, **kwargs)


class PrefillClock:
    """Wraps gpt-fast's prefill: its result is synchronized and the time it ended is kept."""

    def __init__(self, gen, device):
        self.inner, self.device, self.ended = gen.prefill, device, None
        gen.prefill = self

    def __call__(self, *a, **kw):
        out = self.inner(*a, **kw)
        sync(self.device)
        self.ended = time.perf_counter()
        return out


def one_call(gen, model, prompt, args, clock):
    """One gpt-fast `generate` call; returns (total_s, ttft_s, decode_s, tokens)."""
    sync(args.device)
    start = time.perf_counter()
    seq, _ = gen.generate(model, prompt, args.new_tokens, batch_size=args.batch, interactive=False,
                          draft_model=None, temperature=args.temperature, top_k=args.top_k)
    sync(args.device)
    end = time.perf_counter()
    return end - start, clock.ended - start, end - clock.ended, seq


def peak_memory_gb(device):
    import torch
    if device.startswith("cuda"):
        return torch.cuda.max_memory_reserved(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: KiB


def fields(d):
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())


def time_prompt(gen, model, config, n, wbytes, copy_gbps, common, args, clock):
    """The warm-up call and the timed samples at prompt length n; prints and returns its RESULT."""
    import torch
    prompt = torch.randint(0, min(1024, config.vocab_size), (n,), device=args.device,
                           dtype=torch.int64)
    compile_s, _, _, _ = one_call(gen, model, prompt, args, clock)
    samples = []
    for i in range(args.samples):
        total_s, ttft_s, decode_s, seq = one_call(gen, model, prompt, args, clock)
        steps = args.new_tokens - 1
        s = dict(tokens_per_s=args.batch * args.new_tokens / total_s,
                 decode_tokens_per_s=args.batch * steps / decode_s,
                 ttft_ms=ttft_s * 1e3,
                 pct_roofline=100.0 * (steps / decode_s) * (wbytes / 1e9) / copy_gbps)
        samples.append(s)
        print(f"SAMPLE {i} prompt={n} " + fields(s), flush=True)
    assert tuple(seq.shape) == (args.batch, n + args.new_tokens), seq.shape
    median = sorted(samples, key=lambda s: s["decode_tokens_per_s"])[(len(samples) - 1) // 2]
    result = dict(common, prompt=n, **median,
                  per_seq_tokens_per_s=median["decode_tokens_per_s"] / args.batch,
                  peak_mem_gb=peak_memory_gb(args.device), compile_s=compile_s,
                  copy_gbps=copy_gbps, weight_gb=wbytes / 1e9,
                  ttft_median_ms=statistics.median(s["ttft_ms"] for s in samples),
                  spread_pct=100.0 * statistics.pstdev(s["decode_tokens_per_s"] for s in samples)
                  / median["decode_tokens_per_s"])
    print("RESULT " + fields(result), flush=True)
    return result


def main(argv=None):
    args = parse_args(argv)
    gmodel, gen = import_gptfast(args.gptfast)
    import torch
    copy_gbps = copy_bandwidth(args.device)
    model, config = build_model(gmodel, args)
    wbytes = weight_bytes(model)
    install_compile(gen, args.compile, args.compile_prefill)
    clock = PrefillClock(gen, args.device)
    name = "tiny" if args.tiny else args.config
    common = dict(engine="gpt-fast", config=name, device=args.device, compile=args.compile,
                  compile_prefill=int(args.compile_prefill), batch=args.batch,
                  new_tokens=args.new_tokens, top_k=args.top_k, temperature=args.temperature)
    print(f"gpt-fast {name}: {config.n_layer} layers, dim {config.dim}, {config.n_head} heads "
          f"({config.n_local_heads} KV), ffn {config.intermediate_size}, vocab "
          f"{config.vocab_size}; torch {torch.__version__}, {args.device}", flush=True)
    for n in args.prompts:
        time_prompt(gen, model, config, n, wbytes, copy_gbps, common, args, clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
