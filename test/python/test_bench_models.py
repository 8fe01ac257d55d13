"""The model benchmarks of bench/ (issues 34 and 35) run end to end on the CPU at tiny sizes, on
models nobody here wrote: gpt-fast and nanoGPT from checkouts outside the repository. Each test
skips when its checkout is absent (CI has none): $FUSEJIT_GPTFAST / $FUSEJIT_NANOGPT, else
.models/gpt-fast and .models/nanoGPT at the top of the work tree (git-ignored)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fusejit as fj

ROOT = Path(__file__).resolve().parents[2]


def checkout(env, name, marker):
    path = Path(os.environ.get(env) or ROOT / ".models" / name)
    if not (path / marker).is_file():
        pytest.skip(f"no {name} checkout at {path} (set {env})")
    return path


def run(args, timeout=600):
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def record(stdout, tag):
    """The key=value fields of the one line starting with `tag`."""
    lines = [line for line in stdout.splitlines() if line.startswith(tag + " ")]
    assert len(lines) == 1, stdout
    return dict(f.split("=", 1) for f in lines[0].split()[1:])


def test_gptfast_decode_tiny_on_cpu():
    gptfast = checkout("FUSEJIT_GPTFAST", "gpt-fast", "generate.py")
    out = run([ROOT / "bench/gptfast_decode.py", "--gptfast", gptfast, "--tiny", "--device", "cpu",
               "--compile", "none", "--batch", "2", "--prompt", "12", "--new-tokens", "5",
               "--samples", "1"])
    r = record(out, "RESULT")
    assert (r["engine"], r["batch"], r["new_tokens"]) == ("gpt-fast", "2", "5")
    for key in ("tokens_per_s", "decode_tokens_per_s", "ttft_ms", "peak_mem_gb", "compile_s",
                "copy_gbps", "weight_gb", "pct_roofline"):
        assert float(r[key]) > 0, key
    # 2 layers of hidden 256 (q, k, v, o, w1, w2, w3, two norms), the final norm and the output
    # projection, in bf16; the embedding table is not read by a decode step.
    per_layer = 256 * (256 + 2 * 128 + 256) + 3 * 256 * 512 + 2 * 256
    assert float(r["weight_gb"]) == pytest.approx((2 * per_layer + 256 + 1000 * 256) * 2 / 1e9,
                                                  rel=1e-3)


def test_gptfast_compiled_prefill_tiny_on_cpu():
    """--compile-prefill: gpt-fast's prefill under torch.compile (dynamic shapes), timed for the
    prefill target; the decode step stays eager (--compile none), so only prefill compiles.
    Several lengths run in one process, shortest first, one RESULT line each."""
    gptfast = checkout("FUSEJIT_GPTFAST", "gpt-fast", "generate.py")
    out = run([ROOT / "bench/gptfast_decode.py", "--gptfast", gptfast, "--tiny", "--device", "cpu",
               "--compile", "none", "--compile-prefill", "--prompt", "24", "8", "--new-tokens", "2",
               "--samples", "2"])
    results = [dict(f.split("=", 1) for f in line.split()[1:])
               for line in out.splitlines() if line.startswith("RESULT ")]
    assert [r["prompt"] for r in results] == ["8", "24"], out
    for r in results:
        assert (r["compile"], r["compile_prefill"]) == ("none", "1")
        assert float(r["ttft_median_ms"]) > 0 and float(r["ttft_ms"]) > 0
        assert float(r["compile_s"]) > 0
    assert [line.split()[2] for line in out.splitlines() if line.startswith("SAMPLE ")] == [
        "prompt=8", "prompt=8", "prompt=24", "prompt=24"]


def test_gptfast_decode_refuses_a_bad_prompt():
    gptfast = checkout("FUSEJIT_GPTFAST", "gpt-fast", "generate.py")
    done = subprocess.run([sys.executable, ROOT / "bench/gptfast_decode.py", "--gptfast", gptfast,
                           "--tiny", "--device", "cpu", "--prompt", "8", "0"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2 and "--prompt takes lengths of at least 1 token, not 0" in done.stderr


def test_torch_models_tiny_on_cpu(tmp_path):
    """The model table at tiny sizes: eager and fusejit (its CPU reference) on nanoGPT's GPT and
    gpt-fast's Transformer; fusejit's outputs within the table's tolerance of eager's, its cold
    compile timed in a process of its own with empty caches and its warm one in another over
    the table's cache dir (on the CPU path there are no kernels to cache: the new processes
    only show that the run works). Where fusejit has a
    GPU, the backend leaves CPU tensors to torch (docs/python.md): no pieces run in fusejit."""
    nanogpt = checkout("FUSEJIT_NANOGPT", "nanoGPT", "model.py")
    gptfast = checkout("FUSEJIT_GPTFAST", "gpt-fast", "generate.py")
    gpu = fj.Context.gpu_available()[0]
    out = run([ROOT / "bench/torch_models.py", "--nanogpt", nanogpt, "--gptfast", gptfast,
               "--tiny", "--device", "cpu", "--backends", "eager", "fusejit", "--iters", "2",
               "--warmup", "1", "--cache-dir", tmp_path / "caches"])
    rows = [dict(f.split("=", 1) for f in line.split()[1:])
            for line in out.splitlines() if line.startswith("ROW ")]
    assert [(r["model"], r["backend"]) for r in rows] == [
        (m, b) for m in ("gpt2", "gpt2-large", "llama-prefill") for b in ("eager", "fusejit")]
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["cold_s"]) > 0
        if r["backend"] == "fusejit":
            assert int(r["graphs"]) >= 1
            assert int(r["pieces"]) == 0 if gpu else int(r["pieces"]) >= 1
            assert float(r["err"]) <= 0.05 and float(r["warm_s"]) > 0
            assert float(r["first_s"]) > 0  # the first call in the table's own process
    assert "| llama-prefill | fusejit |" in out
