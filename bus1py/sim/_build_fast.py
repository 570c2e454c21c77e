"""cffi build script: compiles csrc/sim/ into bus1py.sim._fast, the simulator's C machines
(twins of bus1py.causal's Python machines) and its event loop. A module of its own, so the
bus and the checker do not depend on it. The cdef is the part between the cdef markers of
every header in csrc/sim/, in name order."""
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "csrc" / "sim"


def _cdef() -> str:
    parts = []
    for h in sorted(SRC.glob("*.h")):
        text = h.read_text()
        if "/* cdef-begin */" in text:
            parts.append(text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0])
    return "\n".join(parts)


def builder(root=Path(".")):
    """The FFI builder, with paths relative to `root` (setup.py runs from the checkout)."""
    ffi = FFI()
    ffi.cdef(_cdef())
    src = root / SRC.relative_to(ROOT)
    headers = "".join(f'#include "{h.name}"\n' for h in sorted(SRC.glob("*.h")))
    # -O2 without -ffast-math: the engine's floating point must round as CPython's does
    ffi.set_source("bus1py.sim._fast", headers,
                   sources=[str(src / c.name) for c in sorted(SRC.glob("*.c"))],
                   include_dirs=[str(src)], libraries=["m"],
                   extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra",
                                       "-Wno-unused-parameter"])
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    # in place, for a checkout installed in editable mode (bus1py/_inplace.py)
    import runpy
    runpy.run_path(str(ROOT / "bus1py" / "_inplace.py"))["cffi_in_place"](
        builder(ROOT), ROOT / "bus1py" / "sim" / "_fast.abi3.so")
