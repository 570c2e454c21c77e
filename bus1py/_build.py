"""cffi build script: compiles csrc/ into the extension module bus1py._b1.

The cdef is the part of csrc/bus/bus1.h between its cdef markers, so the C header is the one
place the interface is written down.  Every int-returning function of it is called
through B1_GUARD (csrc/bus/guard.h): a call that met an out-of-range index in the segment
returns -EBADMSG.
"""
import re
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc" / "bus"


def _cdef() -> str:
    text = (CSRC / "bus1.h").read_text()
    return text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0]


def guarded() -> list:
    """The cdef's functions that return an int (the errno convention of bus1.h)."""
    return re.findall(r"^(?:int|int64_t)\s+(b1_\w+)\(", _cdef(), re.M)


def _prelude() -> str:
    # a function-like macro is not expanded inside its own expansion, so the inner call
    # is the real function
    wraps = "".join(f"#define {name}(...) B1_GUARD({name}(__VA_ARGS__))\n" for name in guarded())
    return '#include "bus1.h"\n#include "guard.h"\n' + wraps


def builder(root=Path(".")):
    """The FFI builder, with paths relative to `root` (setup.py runs from the checkout)."""
    ffi = FFI()
    ffi.cdef(_cdef())
    ffi.set_source(
        "bus1py._b1",
        _prelude(),
        sources=[str(root / p.relative_to(ROOT)) for p in sorted(CSRC.glob("*.c"))],
        include_dirs=[str(root / CSRC.relative_to(ROOT))],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        libraries=["pthread"],
    )
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    # in place, for a checkout installed in editable mode (bus1py/_inplace.py)
    import runpy
    runpy.run_path(str(ROOT / "bus1py" / "_inplace.py"))["cffi_in_place"](
        builder(ROOT), ROOT / "bus1py" / "_b1.abi3.so")
