"""Fixtures of the Python suite (docs/python.md, docs/ci.md): it runs against the fusejit package
installed in the environment that runs pytest (scripts/test builds it into its venv).

Each test gets a Context of its own, with FUSEJIT_LOG=error so that the CPU-path warning does
not fill the output, and a kernel cache and dump directory under pytest's tmp_path."""
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
