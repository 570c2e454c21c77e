"""cffi build script: compiles csrc/ into the extension module bus1py._b1.

The cdef is the part of csrc/bus1.h between its cdef markers, so the C header is the one
place the interface is written down.
"""
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"


def _cdef() -> str:
    text = (CSRC / "bus1.h").read_text()
    return text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0]


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "bus1py._b1",
    '#include "bus1.h"',
    sources=[str(p.relative_to(ROOT)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC.relative_to(ROOT))],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    libraries=["pthread"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
