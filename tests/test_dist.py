"""The package as an index gets it (`make dist`, tools/dist.py): an sdist carrying every
source the build needs, the docs and full metadata, and a manylinux wheel, built from that
sdist alone, that installs with only the core dependencies into a fresh venv where no
compiler exists, runs the README's first example from outside the checkout, gives the
command line, and carries its types (py.typed and the C modules' stubs) to a user's mypy.

The wheel is built once for the module (compiling the C parts is most of its 20 to 60 s,
so those tests are slow); the sdist is checked on its own, in two seconds.  Both are built
from tools/dist.py's snapshot of the tracked files, so other tests writing into the checkout
meanwhile cannot change them."""
import email
import importlib.metadata
import os
import pathlib
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = runpy.run_path(os.path.join(ROOT, "tools", "dist.py"))  # its functions; `make dist` runs it
DEPS = ("cffi", "posix_ipc", "psutil")  # the core's dependencies (pyproject's [project])


def sh(*cmd, **kw):
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert cp.returncode == 0, (cmd, cp.stdout[-2000:], cp.stderr[-3000:])
    return cp


@pytest.mark.timeout(120)
def test_sdist_carries_docs_and_metadata(tmp_path):
    sdist = pathlib.Path(DIST["sdist"](str(tmp_path)))
    with tarfile.open(sdist) as t:
        names = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile()}
        meta = email.message_from_bytes(t.extractfile(f"{sdist.name[:-7]}/PKG-INFO").read())
    for linked in ("docs/SPEC.md", "docs/DESIGN.md", "docs/RELIABILITY.md", "docs/CHECKER.md",
                   "docs/PROTOCOLS.md", "docs/conf.py", "docs/unicast.png", "LICENSE", "CHANGELOG.md",
                   "csrc/bus/bus1.h", "csrc/check/walk.h", "csrc/sim/engine.h", "csrc/py/slice.h",
                   "bus1py/py.typed", "bus1py/_messages.pyi"):
        assert linked in names, linked
    # the snapshot: nothing but tracked files and what the build writes, whatever lies in the checkout
    tracked = set(sh("git", "-C", ROOT, "ls-files").stdout.split())
    made = {n for n in names if n in ("PKG-INFO", "setup.cfg") or n.startswith("bus1py.egg-info/")}
    assert names - made <= tracked, sorted(names - made - tracked)
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Documentation", "Source"}
    classifiers = meta.get_all("Classifier")
    assert "Operating System :: POSIX :: Linux" in classifiers and "Typing :: Typed" in classifiers
    assert meta["License-Expression"] == "MIT" and meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# bus1py")  # the README, as the long description


def _install_deps(site: str) -> None:
    """Copy the installed core dependencies into `site`, file by file as their records list
    them: the fresh venv gets them without a network or a compiler."""
    for name in DEPS:
        dist = importlib.metadata.distribution(name)
        for f in dist.files or ():
            src = str(dist.locate_file(f))
            if os.path.isfile(src) and ".." not in f.parts:
                os.makedirs(os.path.join(site, os.path.dirname(str(f))), exist_ok=True)
                shutil.copy2(src, os.path.join(site, str(f)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    _, whl = DIST["build"](str(out))
    return whl


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_is_manylinux(wheel):
    name = os.path.basename(wheel)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert f"-{tag}-{tag}-manylinux_" in name, name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    so = sorted(n for n in names if n.endswith(".so"))
    assert {"bus1py/py.typed", "bus1py/_messages.pyi", "bus1py/_b1.pyi"} <= set(names)  # the types
    assert [os.path.basename(n) for n in so] == [
        "_b1.abi3.so", "_messages" + sysconfig.get_config_var("EXT_SUFFIX"), "_walk.abi3.so", "_fast.abi3.so"]
    show = sh(sys.executable, "-m", "auditwheel", "show", wheel).stdout
    assert "is consistent with" in show and "manylinux_" in show, show


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_runs_readme_example_without_compiler(wheel, tmp_path):
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", str(venv))
    py = str(venv / "bin" / "python")
    sh(sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel)
    site = sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    _install_deps(site)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(venv) for f in fs
               if not os.path.islink(os.path.join(d, f))) / 2**20
    assert size < 60, f"the core install takes {size:.0f} MiB"
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "CC": "/nonexistent/cc"}
    probe = "import shutil, bus1py, bus1py._messages as m; print(shutil.which('gcc'), shutil.which('cc'), m.__file__)"
    gcc, cc, ext = sh(py, "-c", probe, env=env, cwd=tmp_path).stdout.split()
    assert (gcc, cc) == ("None", "None") and ext.startswith(site), (gcc, cc, ext)
    out = sh(py, os.path.join(ROOT, "tools", "readme_example.py"), env=env, cwd=tmp_path).stdout
    assert out.strip(), out  # it ran (exit 0) and printed what it receives
    cli = str(venv / "bin" / "bus1py")
    assert sh(cli, "--version", env=env, cwd=tmp_path).stdout.startswith("bus1py ")
    cp = subprocess.run([cli, "stress", "--no-trace"], capture_output=True, text=True, env=env,
                        cwd=tmp_path, timeout=60)
    assert cp.returncode == 2 and "pip install 'bus1py[cli]'" in cp.stderr, cp.stderr  # the extra it lacks
    # the installed types (py.typed, the C modules' stubs) are what a user's mypy reads
    user = tmp_path / "user.py"
    user.write_text("import bus1py\nwith bus1py.Bus.create() as bus:\n    p = bus.peer()\n"
                    "    p.send([p.create_node()], 'text')\n")
    cp = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                         py, str(user)], capture_output=True, text=True, cwd=tmp_path, timeout=280)
    assert cp.returncode == 1 and 'incompatible type "str"; expected "Buffer"' in cp.stdout, cp.stdout + cp.stderr
