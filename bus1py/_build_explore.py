"""Build of bus1py._b1x: the C helper with its bus core instrumented for crash exploration
(tests/explore.py), built on demand and never installed.

The core (csrc/bus/*.c) is compiled with gcc's -fsanitize-coverage=trace-pc, so every basic
block it enters calls __sanitizer_cov_trace_pc (csrc/explore/explore.c, compiled without
it); the cffi glue is the normal build's (bus1py/_build.py) plus csrc/explore/explore.h's
cdef.  Invariants:
  - bus1py._b1 is untouched: this builds a separate module into a cache directory.
  - The cached module is named by a hash of every input (sources, headers, both build
    scripts, the interpreter's ABI), so a changed source is never run stale, and it is put
    in place by a rename, so a concurrent build never loads a half-written file.
  - `python -m bus1py._build_explore` prints the module's path (building it if needed).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc" / "bus"
EXPLORE = ROOT / "csrc" / "explore"
CFLAGS = ["-O2", "-g", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
INSTRUMENT = ["-fsanitize-coverage=trace-pc"]


def _inputs() -> list:
    return sorted([*CSRC.glob("*.c"), *CSRC.glob("*.h"), *EXPLORE.glob("*.[ch]"),
                   ROOT / "bus1py" / "_build.py", Path(__file__).resolve()])


def key() -> str:
    h = hashlib.sha256(f"{sys.version}|{sysconfig.get_config_var('SOABI')}".encode())
    for p in _inputs():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    return Path(os.environ.get("BUS1PY_EXPLORE_CACHE", ROOT / "build" / "explore"))


def _cdef(path: Path) -> str:
    text = path.read_text()
    return text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0]


def build() -> Path:
    """The path of the instrumented module for the current sources, built if missing."""
    from cffi import FFI

    from bus1py import _build  # the glue is the normal build's: same cdef, same guard

    dest = cache_dir() / f"_b1x-{key()}.abi3.so"
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        objects = []
        for src in sorted(CSRC.glob("*.c")):
            obj = Path(tmp) / (src.stem + ".o")
            subprocess.run(["gcc", *CFLAGS, *INSTRUMENT, f"-I{CSRC}", "-c", str(src), "-o", str(obj)],
                           check=True)
            objects.append(str(obj))
        ffi = FFI()
        ffi.cdef(_build._cdef() + _cdef(EXPLORE / "explore.h"))
        ffi.set_source("bus1py._b1x", _build._prelude() + '#include "explore.h"\n',
                       sources=[str(EXPLORE / "explore.c")], extra_objects=objects,
                       include_dirs=[str(CSRC), str(EXPLORE)], extra_compile_args=CFLAGS,
                       libraries=["pthread", "dl"])
        built = ffi.compile(tmpdir=tmp)
        os.replace(built, dest)
    return dest


if __name__ == "__main__":
    print(build())
