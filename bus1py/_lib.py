"""The C helper every module of the package calls: `from ._lib import ffi, lib`.

It is bus1py._b1, unless the environment variable BUS1PY_LIB names the path of another
build of the same interface -- the crash explorer's instrumented bus1py._b1x
(bus1py/_build_explore.py, tests/explore.py).  Read once, at the package's first import,
so one process never mixes two builds.
"""
import os
from typing import Any

_mod: Any
_path = os.environ.get("BUS1PY_LIB")
if _path:
    import importlib.util
    import sys

    _spec = importlib.util.spec_from_file_location("bus1py._b1x", _path)
    if _spec is None or _spec.loader is None:
        raise ImportError(f"BUS1PY_LIB={_path!r} is not a loadable module")
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["bus1py._b1x"] = _mod
    _spec.loader.exec_module(_mod)
else:
    from . import _b1 as _mod
ffi, lib = _mod.ffi, _mod.lib

__all__ = ["ffi", "lib"]
