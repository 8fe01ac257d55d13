"""Fixtures of the Python suite (docs/python.md, docs/ci.md): it runs against the fusejit package
installed in the environment that runs pytest (scripts/test builds it into its venv).

Each test gets a Context of its own, with FUSEJIT_LOG=error so that the CPU-path warning does
not fill the output, and a kernel cache and dump directory under pytest's tmp_path.

The torch.compile tests (test_dynamo*.py) share DEVICE (`from conftest import DEVICE`) and the
fixtures fresh_dynamo and fresh_dynamo_no_grad; torch is imported only when they use them."""
import functools
import os

import numpy as np
import pytest

import fusejit as fj


@pytest.fixture(autouse=True)
def scratch_environment(tmp_path, monkeypatch):
    """Whatever fusejit writes (the kernel cache, dumps) lands under this test's tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSEJIT_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.setenv("FUSEJIT_LOG", "error")
    yield


@pytest.fixture
def ctx():
    return fj.Context()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def cli():
    """The `fusejit` command-line tool of the C++ build, when scripts/test names it."""
    path = os.environ.get("FUSEJIT_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("FUSEJIT_CLI does not name the fusejit tool (scripts/test sets it)")
    return path


@functools.cache
def _torch_device():
    import torch

    return "cuda" if torch.cuda.is_available() and fj.Context.gpu_available()[0] else "cpu"


def __getattr__(name):
    """DEVICE, where the torch.compile tests make their tensors: "cuda" where torch and fusejit
    both have a GPU, else "cpu". Worked out when a test module first imports it, so that the
    tests without torch neither need nor import it."""
    if name == "DEVICE":
        return _torch_device()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@pytest.fixture
def fresh_dynamo():
    """A clean Dynamo, seeded, and every tensor a test makes on DEVICE."""
    import torch

    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch.device(_torch_device()):
        yield
    torch._dynamo.reset()


@pytest.fixture
def fresh_dynamo_no_grad(fresh_dynamo):
    """fresh_dynamo, with autograd off for the whole test."""
    import torch

    with torch.no_grad():
        yield
