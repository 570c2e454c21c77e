"""The package as a user gets it: an sdist that carries every source the build needs, a
wheel built from that sdist alone, installed with only the core dependencies in a fresh
venv, running an example from outside the checkout, typed (py.typed) for mypy."""
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXAMPLE = """
import bus1py

with bus1py.Bus.create() as bus:
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    handle = b.transfer(node, a)
    a.send([handle], b"hello")
    m: bus1py.Message = b.recv(timeout=5)
    print(m.payload.decode(), bus1py.__file__)
"""


def sh(*cmd, **kw):
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert cp.returncode == 0, (cmd, cp.stdout[-2000:], cp.stderr[-3000:])
    return cp


def du_mib(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if not os.path.islink(os.path.join(d, f))) / 2**20


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sdist_to_wheel_to_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    sh(sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), ROOT)
    (sdist,) = dist.glob("bus1py-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    for must in ("csrc/bus/bus1.h", "csrc/check/walk.h", "csrc/sim/engine.h", "csrc/py/slice.h",
                 "LICENSE", "CHANGELOG.md", "bus1py/py.typed"):
        assert any(n.endswith("/" + must) for n in names), must
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(sdist))
    (wheel,) = dist.glob("bus1py-*.whl")
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", str(venv))
    py = str(venv / "bin" / "python")
    sh(py, "-m", "pip", "install", "-q", str(wheel))
    assert du_mib(venv) < 60, f"the core install takes {du_mib(venv):.0f} MiB"
    (tmp_path / "example.py").write_text(EXAMPLE)
    out = sh(py, "example.py", cwd=tmp_path).stdout.split()
    assert out[0] == "hello" and out[1].startswith(str(venv)), out   # not the checkout's
    cli = str(venv / "bin" / "bus1py")
    assert sh(cli, "--version", cwd=tmp_path).stdout.startswith("bus1py ")
    cp = subprocess.run([cli, "stress", "--no-trace"], capture_output=True, text=True,
                        cwd=tmp_path, timeout=60)
    assert cp.returncode == 2 and cp.stderr.strip().splitlines() == [
        "bus1py stress: needs the [cli] extra: pip install 'bus1py[cli]' (no module 'rich')"]
    # py.typed: mypy reads the installed package's own annotations
    cp = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                         "--python-executable", py, "example.py"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
