"""The API reference (`make docs`): every public name has a docstring, the examples in
docstrings run as doctests, `help(bus1py.Peer)` reads as the reference, and the Sphinx
build of docs/ passes with warnings as errors."""
import doctest
import inspect
import os
import subprocess
import sys

import pytest

import bus1py
from bus1py import causal, message, reserve, transaction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what the reference documents beside bus1py.__all__: the types its calls return
RETURNED = (reserve.Reservation, bus1py.receive.SliceMessage)


def _public_members(cls):
    for name, member in vars(cls).items():
        if name.startswith("_") or name in getattr(cls, "_fields", ()):
            continue
        yield name, member
    for base in cls.__mro__[1:]:  # the C methods (PeerCore.send, recv) are Peer's too
        if base.__module__.startswith("bus1py"):
            yield from ((n, m) for n, m in vars(base).items() if not n.startswith("_"))


def test_every_public_name_has_a_docstring():
    missing = []
    for name in bus1py.__all__:
        obj = getattr(bus1py, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip() or obj.__doc__ == type(obj).__doc__:
                missing.append(name)
    for cls in [getattr(bus1py, n) for n in bus1py.__all__ if inspect.isclass(getattr(bus1py, n))] + list(RETURNED):
        if issubclass(cls, (int, dict)) or inspect.isabstract(cls):
            continue
        for name, member in _public_members(cls):
            fn = member.fget if isinstance(member, property) else member
            if callable(fn) and not (getattr(fn, "__doc__", None) or "").strip():
                missing.append(f"{cls.__name__}.{name}")
    assert not missing, f"no docstring: {missing}"


def test_help_of_peer_reads_as_the_reference():
    text = inspect.getdoc(bus1py.Peer)
    assert "create_node" in text and "ENXIO" in text and ">>>" in text
    for method, words in (("send", "EMSGSIZE"), ("recv", "TimeoutError"), ("transfer", "handle"),
                          ("reserve", "commit"), ("destroy", "NODE_DESTROY")):
        assert words in inspect.getdoc(getattr(bus1py.Peer, method)), method
    assert inspect.signature(bus1py.Peer.send).parameters["fds"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.timeout(60)
@pytest.mark.parametrize("module", [bus1py, bus1py.bus, bus1py.peer, message, transaction, reserve, causal],
                         ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module) if t.examples]
    for t in tests:
        runner.run(t)
    assert runner.failures == 0, f"{runner.failures} doctest failure(s) in {module.__name__} (see above)"
    if module in (bus1py, bus1py.peer, message, transaction, reserve):
        assert tests, f"{module.__name__} has no example"


@pytest.mark.timeout(240)
def test_sphinx_builds_without_warnings(tmp_path):
    cp = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                         "-d", str(tmp_path / "doctrees"), os.path.join(ROOT, "docs"), str(tmp_path / "html")],
                        capture_output=True, text=True, timeout=230)
    assert cp.returncode == 0, cp.stderr[-4000:]
    api = (tmp_path / "html" / "api.html").read_text()
    for name in bus1py.__all__:
        assert any(f'id="bus1py.{where}{name}"' in api for where in ("", "limits.", "message.")), \
            f"{name} is not in the API reference"
    for member in ("Peer.send", "Peer.recv", "Message.obj", "Transaction.stage"):
        assert f'id="bus1py.{member}"' in api, f"{member} is not in the API reference"
    index = (tmp_path / "html" / "index.html").read_text()
    assert 'href="SPEC.html"' in index  # the README's links lead to the pages beside it
