# The cffi module of csrc/bus (bus1py/_build.py): its `ffi` and `lib` are built from the cdef
# of csrc/bus/bus1.h at run time, so their members have no static types.
from typing import Any

ffi: Any
lib: Any
