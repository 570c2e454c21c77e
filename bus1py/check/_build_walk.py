"""cffi build script: compiles csrc/check/walk.c, stream.c (rounds.c, claim.c) and
chains.c into bus1py.check._walk, the checker's exact kernels (a module of its own, so the checker does not depend on the bus's C code).
The cdef is the part of csrc/check/walk.h between its cdef markers."""
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "csrc" / "check"



def builder(root=Path(".")):
    """The FFI builder, with paths relative to `root` (setup.py runs from the checkout)."""
    ffi = FFI()
    ffi.cdef((SRC / "walk.h").read_text().split("/* cdef-begin */", 1)[1]
             .split("/* cdef-end */", 1)[0])
    src = root / SRC.relative_to(ROOT)
    ffi.set_source("bus1py.check._walk", '#include "walk.h"\n',
                   sources=[str(src / n) for n in ("walk.c", "stream.c", "rounds.c",
                                                   "claim.c", "chains.c")],
                   include_dirs=[str(src)],
                   extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"])
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    # in place, for a checkout installed in editable mode (bus1py/_inplace.py)
    import runpy
    runpy.run_path(str(ROOT / "bus1py" / "_inplace.py"))["cffi_in_place"](
        builder(ROOT), ROOT / "bus1py" / "check" / "_walk.abi3.so")
