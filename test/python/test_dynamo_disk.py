"""The backend's translations on disk (fusejit/_translation_cache.py): a new process that gets a
graph a process before translated builds its piece from the file, without AOTAutograd, and
computes what eager computes; a file that is damaged or names what fusejit does not know is
ignored and written again; graphs whose translation depends on more than the key are never kept."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from conftest import DEVICE  # noqa: E402
from fusejit import dynamo  # noqa: E402

# conftest.py: a clean Dynamo, seeded, every tensor on DEVICE, and no autograd.
pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")


def disk_dir():
    """Where the backend's Context keeps translations (its cache directory, + /dynamo)."""
    return os.path.join(dynamo._context(torch.device(DEVICE))[0].cache_dir, "dynamo")


def entries():
    d = disk_dir()
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def delta(before):
    after = dynamo.stats()
    return {k: after[k] - before[k] for k in after}


# A small model with what GPT-2's graph holds: linears, layer norm, GELU, softmax, a reshape and
# `x[:, [-1]]` (whose index AOTAutograd makes a constant tensor).
MODEL = """
import json, sys, torch
import torch.nn.functional as F
import fusejit.dynamo as dynamo
torch.manual_seed(0)
device = sys.argv[1]
ln, lin1, lin2 = (torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 32))
for m in (ln, lin1, lin2):
    m.to(device)
def f(x):
    h = lin2(F.gelu(lin1(ln(x))))
    return torch.softmax(h.reshape(4, 6, 32) * 0.5, dim=-1)[:, [-1]]
x = torch.randn(24, 32, device=device)
with torch.no_grad():
    got, want = torch.compile(f, backend="fusejit")(x), f(x)
err = (got - want).abs().max().item()
print(json.dumps({"stats": dynamo.stats(), "err": err, "shape": list(got.shape)}))
"""


def run_model(tmp_path, **env):
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent(MODEL))
    done = subprocess.run([sys.executable, str(script), DEVICE], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_process_builds_the_piece_from_the_disk(tmp_path):
    cache = tmp_path / "kernels"
    first = run_model(tmp_path, FUSEJIT_CACHE_DIR=str(cache))
    assert first["stats"]["translations"] == 1 and first["stats"]["translations_loaded"] == 0
    kept = os.listdir(cache / "dynamo")
    assert len(kept) == 1 and kept[0].endswith(".json")
    second = run_model(tmp_path, FUSEJIT_CACHE_DIR=str(cache))
    # No translation: AOTAutograd never ran (it is what calls the translator).
    assert second["stats"]["translations"] == 0 and second["stats"]["translations_loaded"] == 1
    assert second["stats"]["calls"] == 1 and second["shape"] == [4, 1, 32]
    assert first["err"] < 1e-5 and second["err"] < 1e-5
    assert os.listdir(cache / "dynamo") == kept


def test_no_disk_cache_keeps_nothing(tmp_path):
    cache = tmp_path / "kernels"
    out = run_model(tmp_path, FUSEJIT_CACHE_DIR=str(cache), FUSEJIT_CACHE="memory")
    assert out["stats"]["translations"] == 1 and out["err"] < 1e-5
    assert not (cache / "dynamo").exists()


def mlp(scale):
    """A graph of its own per scale (the scale is in Dynamo's code, hence in the key)."""
    lin1, lin2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 24)

    def f(x):
        return torch.softmax(lin2(F.gelu(lin1(x))), dim=-1) * scale

    return f


def compile_and_check(f, *args):
    got = torch.compile(f, backend="fusejit")(*args)
    torch.testing.assert_close(got, f(*args), atol=1e-5, rtol=1e-5)


DAMAGE = {
    "truncated": lambda text: text[: len(text) // 2],
    "not JSON": lambda text: "\x00\xff garbage",
    "empty": lambda text: "",
    "another format": lambda text: json.dumps(dict(json.loads(text), format=999)),
    "another key": lambda text: json.dumps(dict(json.loads(text), key="0" * 40)),
    "an unknown op": lambda text: text.replace("aten.gelu.default", "aten.no_such_op.default"),
    "an unknown dtype": lambda text: json.dumps(dict(json.loads(text), constants=[
        {"dtype": "os.system", "shape": [1], "device": "cpu", "values": [0]}])),
    "a missing input": lambda text: json.dumps(dict(json.loads(text), program=dict(
        json.loads(text)["program"], inputs=json.loads(text)["program"]["inputs"][1:]))),
    "a value of no known tag": lambda text: text.replace('{"ref": ', '{"eval": ', 1),
    "nested too deep": lambda text: "[" * 100000 + "]" * 100000,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_ignored_and_written_again(damage):
    f, x = mlp(2.0 + list(DAMAGE).index(damage)), torch.randn(6, 24)
    before = entries()
    compile_and_check(f, x)
    (name,) = entries() - before
    path = os.path.join(disk_dir(), name)
    good = open(path).read()
    with open(path, "w") as out:
        out.write(DAMAGE[damage](good))
    torch._dynamo.reset()
    dynamo._translations.clear()  # as a new process: nothing read or written yet
    start = dynamo.stats()
    compile_and_check(f, x)
    d = delta(start)
    assert d["translations_loaded"] == 0 and d["translations"] == 1, d  # through AOTAutograd
    assert json.loads(open(path).read()) == json.loads(good)


def test_a_symlink_at_the_entry_is_not_followed(tmp_path):
    f, x = mlp(-1.0), torch.randn(6, 24)
    before = entries()
    compile_and_check(f, x)
    (name,) = entries() - before
    path = os.path.join(disk_dir(), name)
    target = tmp_path / "elsewhere.json"
    os.replace(path, target)  # a valid entry, reached only through the link
    os.symlink(target, path)
    torch._dynamo.reset()
    dynamo._translations.clear()
    start = dynamo.stats()
    compile_and_check(f, x)
    d = delta(start)
    assert d["translations_loaded"] == 0 and d["translations"] == 1, d
    assert not os.path.islink(path)  # the write replaced the link itself
    assert json.loads(target.read_text()) == json.loads(open(path).read())


def test_a_kept_entry_is_read_once_per_process():
    f, x = mlp(0.5), torch.randn(6, 24)
    compile_and_check(f, x)
    torch._dynamo.reset()
    dynamo._translations.clear()
    start = dynamo.stats()
    compile_and_check(f, x)
    torch._dynamo.reset()
    compile_and_check(f, x)
    d = delta(start)
    assert d["translations"] == 0 and d["translations_loaded"] == 1, d
    assert d["translation_cache_hits"] == 1, d


def returns_a_view_of_its_input(x):
    return x.view(-1), torch.exp(x)


def splits(x):
    return torch.cumsum(torch.exp(x), dim=0) * 2


@pytest.mark.parametrize("fn", [returns_a_view_of_its_input, splits])
def test_graphs_the_disk_does_not_keep(fn):
    x = torch.randn(5, 7)
    before = entries()
    got = torch.compile(fn, backend="fusejit")(x.clone())
    want = fn(x.clone())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert entries() == before


def test_dynamic_sizes_are_not_kept():
    lin = torch.nn.Linear(24, 24)

    def f(x):  # not test_dynamo's function: its translation would be this process's already
        return torch.softmax(F.gelu(lin(x)) * 5, dim=-1)

    compiled = torch.compile(f, backend="fusejit", dynamic=True)
    before = entries()
    for batch in (3, 5):
        x = torch.randn(batch, 24)
        torch.testing.assert_close(compiled(x), f(x), atol=1e-5, rtol=1e-5)
    assert entries() == before


def test_graphs_needing_gradients_are_not_kept():
    lin = torch.nn.Linear(8, 8)  # its parameters require grad: AOTAutograd's training path
    before = entries()
    with torch.enable_grad():
        x = torch.randn(4, 8, requires_grad=True)
        got = torch.compile(lambda t: torch.tanh(lin(t)) * 7, backend="fusejit")(x)
        torch.testing.assert_close(got, torch.tanh(lin(x)) * 7)
    assert entries() == before


def test_autocast_around_the_call_is_in_the_key():
    # Autocast entered outside the compiled function is not in Dynamo's code, but AOTAutograd
    # traces under it (casting the matmul's operands): the entry written without it must not
    # serve the call under it.
    w = torch.randn(16, 24)

    def f(x):
        return torch.relu(x @ w) * 11

    x = torch.randn(6, 16)
    compile_and_check(f, x)
    torch._dynamo.reset()
    dynamo._translations.clear()
    start = dynamo.stats()
    device_type = "cuda" if DEVICE == "cuda" else "cpu"
    with torch.autocast(device_type, dtype=torch.bfloat16):
        got = torch.compile(f, backend="fusejit")(x)
        want = f(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    d = delta(start)
    assert d["translations_loaded"] == 0 and d["translations"] == 1, d


def test_an_input_mutated_in_place_is_written_by_the_loaded_piece_too():
    # A KV-cache write: AOTAutograd returns the cache's new value first and copies it into the
    # input after the call; a piece built from the disk must do the same.
    def f(cache, pos, k):
        cache.index_put_((pos,), k)
        return torch.softmax(cache * 2, dim=-1)

    pos = torch.tensor([1, 3])
    k = torch.randn(2, 8)

    def run(compiled_fn):
        cache = torch.zeros(5, 8)
        out = compiled_fn(cache, pos, k)
        return out, cache

    want_out, want_cache = run(f)
    before = entries()
    got_out, got_cache = run(torch.compile(f, backend="fusejit"))
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_cache, want_cache)
    assert len(entries() - before) == 1  # kept, with the mutated input named
    torch._dynamo.reset()
    dynamo._translations.clear()
    start = dynamo.stats()
    got_out, got_cache = run(torch.compile(f, backend="fusejit"))
    d = delta(start)
    assert d["translations_loaded"] == 1 and d["translations"] == 0, d
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_cache, want_cache)
