"""Build script of bus1py._messages (csrc/py/messages.c): a CPython extension, not a cffi
module, because it returns Python objects (its opening comment says why that pays).

`EXTENSION` is what setup.py builds; running this file builds it in place, for a checkout
already installed in editable mode.  The extension is built for this interpreter (the full
C API, not the limited one: PyTuple_SET_ITEM and friends are what make it fast).
"""
from pathlib import Path

from setuptools import Extension

ROOT = Path(__file__).resolve().parent.parent


def extension(root=Path(".")) -> Extension:
    """The extension, with paths relative to `root` (setup.py runs from the checkout)."""
    py = root / "csrc" / "py"
    return Extension("bus1py._messages", sources=[str(py / f) for f in ("messages.c", "slice.c", "peer.c", "topic.c")],
                     include_dirs=[str(root / "csrc" / "bus"), str(py)],
                     extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"])


EXTENSION = extension()

if __name__ == "__main__":
    # in a scratch directory: setuptools there must not read our pyproject
    import os
    import runpy
    import tempfile

    from setuptools import Distribution
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            cmd = Distribution({"ext_modules": [extension(ROOT)]}).get_command_obj("build_ext")
            cmd.build_lib = cmd.build_temp = tmp
            cmd.ensure_finalized()
            cmd.run()
            built = cmd.get_outputs()[0]
        finally:
            os.chdir(cwd)
        dest = ROOT / "bus1py" / os.path.basename(built)
        runpy.run_path(str(ROOT / "bus1py" / "_inplace.py"))["replace"](built, dest)
        print(dest)
