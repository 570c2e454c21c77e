"""Freed memory handed back to the system between the phases of a large check.

Invariant: only pages no live array uses are returned (malloc_trim, and Arrow's pool's
release_unused), so calling it never changes a result; where the C library has no malloc_trim it does nothing. glibc keeps
the pages of freed arrays below its mmap threshold (which rises to 32 MB as large arrays
are freed) in each thread's arena, so a phase's temporaries, built in worker threads,
would otherwise stay resident through the next phase.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_libc = None


def give_back():
    """Return the pages of freed heap memory, and of Arrow's pool, to the system."""
    global _libc
    import pyarrow as pa
    pa.default_memory_pool().release_unused()
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)
