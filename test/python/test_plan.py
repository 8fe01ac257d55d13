"""plan() and explain(): the text `fusejit plan` prints; dumps through the FUSEJIT_* variables."""
import subprocess

import numpy as np
import pytest

import fusejit as fj


def softmax_trace(ctx):
    x = fj.tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32), context=ctx)
    w = fj.tensor(np.ones((256, 128), np.float32), context=ctx)
    return fj.relu(fj.softmax(x * 2) @ w + 1)


def test_plan_is_what_the_cli_prints_for_the_trace(ctx, cli, tmp_path):
    y = softmax_trace(ctx)
    trace = tmp_path / "y.trace"
    trace.write_text(ctx.trace_text([y]))
    want = subprocess.run([cli, "plan", str(trace)], check=True, capture_output=True, text=True).stdout
    assert fj.plan(y) == want
    assert y.plan() == want


def test_explain_summarizes_the_plan(ctx):
    y = softmax_trace(ctx)
    e = fj.explain(y)
    assert str(e) == fj.plan(y)
    assert e.kernels >= 1 and e.library_calls == 1
    assert any(r.startswith("gemm: cublasLt") for r in e.regions)
    assert "decisions:" in str(e) and "library calls:" in str(e)
    y.eval()  # planning left it pending; it computes as usual
    with pytest.raises(fj.UsageError, match="already computed"):
        fj.plan(y)


def test_disabling_fusion_shows_the_unfused_plan(ctx):
    unfused = fj.Context(options={"DISABLE": "fusion"})
    x = fj.tensor(np.ones((8, 8), np.float32), context=unfused)
    assert fj.explain(fj.exp(x) * 2 + 1).kernels == 3
    y = fj.tensor(np.ones((8, 8), np.float32), context=ctx)
    assert fj.explain(fj.exp(y) * 2 + 1).kernels == 1


def test_dumps_follow_the_environment(monkeypatch, tmp_path):
    dump = tmp_path / "dumps"
    monkeypatch.setenv("FUSEJIT_DUMP", "ir,plan,decisions")
    monkeypatch.setenv("FUSEJIT_DUMP_DIR", str(dump))
    ctx = fj.Context()
    x = fj.tensor(np.ones((4, 4), np.float32), context=ctx)
    (fj.exp(x) + 1).to_numpy()
    names = sorted(p.name for p in dump.rglob("*") if p.is_file())
    assert any(n.endswith(".plan") or "plan" in n for n in names), names
    assert any("decisions" in n for n in names), names
