"""The installed package: where it is, what it carries, what it links."""
import pathlib
import subprocess
import sys

import fusejit as fj

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_installed_package_not_the_source_tree():
    here = pathlib.Path(fj.__file__).resolve().parent
    assert "site-packages" in here.parts, here
    assert pathlib.Path(sys.prefix) in here.parents
    assert fj.__version__ == (ROOT / "VERSION").read_text().split()[0]


def test_extension_finds_its_library_and_needs_no_driver():
    here = pathlib.Path(fj.__file__).resolve().parent
    ext = next(here.glob("_fusejit*.so"))
    assert any(here.glob("libfusejit.so*")), sorted(p.name for p in here.iterdir())
    deps = subprocess.run(["ldd", str(ext)], check=True, capture_output=True, text=True).stdout
    assert "libfusejit.so" in deps and str(here) in deps  # found next to it ($ORIGIN)
    assert "not found" not in deps, deps
    assert "libcuda.so" not in deps, deps  # the driver is loaded at run time, never linked


def test_torch_backend_entry_point():
    from importlib.metadata import entry_points

    eps = entry_points(group="torch_dynamo_backends")
    assert [e.value for e in eps if e.name == "fusejit"] == ["fusejit.dynamo:backend"]
