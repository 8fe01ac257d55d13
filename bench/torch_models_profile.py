#!/usr/bin/env python3
"""GPU time of one forward of bench/torch_models.py's models, by kernel name (torch.profiler):
where a backend's forward goes, next to its wall time in the table.

  bench/torch_models_profile.py gpt2 llama-prefill --backend fusejit \\
      --nanogpt .models/nanoGPT --gptfast .models/gpt-fast

Each model is built as torch_models.py builds it (random bf16 weights, the same inputs),
compiled with the backend, called 4 times (fusejit replays from the second call), then profiled
over one more call. Prints the GPU time of all kernels together and the 25 largest by name."""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+", choices=torch_models.MODELS)
    p.add_argument("--backend", default="fusejit", choices=torch_models.BACKENDS)
    p.add_argument("--nanogpt", default=None)
    p.add_argument("--gptfast", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    args = argparse.Namespace(tiny=False, device="cuda", seed=a.seed, nanogpt=a.nanogpt,
                              gptfast=a.gptfast)
    for name in a.models:
        model, inputs = torch_models.build_case(args, name)
        fn = torch_models.compiled(model, a.backend)
        with torch.no_grad():
            for _ in range(4):
                fn(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(*inputs)
                torch.cuda.synchronize()
        total, count = collections.Counter(), collections.Counter()
        for e in prof.events():
            if e.device_type.name == "CUDA":
                total[e.name[:90]] += e.device_time_total
                count[e.name[:90]] += 1
        print(f"== {name} {a.backend}: {sum(count.values())} GPU ops, "
              f"{sum(total.values()) / 1e3:.3f} ms of GPU time")
        for k, v in total.most_common(a.top):
            print(f"{v / 1e3:9.3f} ms {count[k]:4d}x  {k}")
        del model, fn
        torch._dynamo.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
