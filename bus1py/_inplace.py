"""Installing a freshly built C module into a checkout that is installed in editable mode.

Loaded by path (runpy) from the build scripts' `__main__`, never imported as bus1py._inplace:
importing the package would load the very modules being rebuilt.

Invariants:
  - A module is replaced by renaming a new file over it, so a running process keeps the
    file it mapped and never sees a half-written one.
  - cffi modules are compiled in a scratch directory (setuptools there must not read our
    pyproject) and installed under the name setuptools gives them (`.abi3.so`: cffi builds
    for the limited API), so a later install replaces the file instead of being shadowed.
"""
import os
import shutil
import tempfile


def replace(built, dest) -> None:
    shutil.copy(built, str(dest) + ".new")
    os.replace(str(dest) + ".new", dest)


def cffi_in_place(ffi, dest) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        replace(ffi.compile(tmpdir=tmp), dest)
