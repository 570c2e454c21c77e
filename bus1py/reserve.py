"""Zero-copy send: a message written in place in the pool, then sent (`Peer.reserve`).

    with peer.reserve(destination, len(data)) as r:   # or r = peer.reserve(...); r.commit()
        r.payload[:] = data                            # or fill it in place: readinto, numpy
    r.stamp                                            # as send returns it

Invariants:
  - A Reservation is one prepared transaction of `send` whose payload record is taken in
    the pool but not yet written: nothing is queued, nobody can see it, until `commit`,
    which sends it exactly as `send(destinations, <the bytes written>, handles)` would at
    that moment (its stamp comes from the commit; its sequence number was taken by the
    reserve).  `abort` gives the record, its entries and its carried handles back.
  - `payload` is a writable memoryview of exactly `length` bytes of the record.  Bytes
    not written are unspecified (what the record held before).  The view is released
    before the commit or abort changes anything: afterwards it raises ValueError, so
    nothing can write into a record a receiver already reads.  While anything else still
    reaches its bytes -- a buffer exported from it, an array numpy made of it, a slice of
    it -- commit and abort raise BufferError and change nothing (the payload has a buffer
    of its own, on which each is counted: `_messages.exported`).
  - A reservation ends once, by commit or abort (a failing commit ends it too, with
    nothing sent); later calls raise ValueError.  One dropped or garbage collected while
    open is aborted; one whose process dies is freed by the reaper (Bus.gc), as an
    unfinished send is.
  - Descriptors (`fds`) are checked and counted at the reserve and posted at the commit,
    which names the same ones again: they must stay open until then (EBADF otherwise).
  - A reservation belongs to the process that made it: a forked child's copy can neither
    commit nor abort it (ValueError), and dropping that copy leaves it alone.
"""
from __future__ import annotations

import errno
import os
import pickle

import contextlib
from collections.abc import Iterable
from typing import Any

from . import _messages, args, fds as _fds
from ._lib import ffi, lib
from .errors import bus_error

_OPEN, _SENT, _ABORTED = "open", "committed", "aborted"
_UNREACHABLE = lib.B1_SEND_UNREACHABLE_ERROR
_pid = [os.getpid()]  # this process's, without a system call per reservation
os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))


def _whole(frame, bus) -> memoryview:
    """A writable view of the bus's mapping, which reservations' payloads are slices of,
    kept on this thread's frame."""
    bus.base()  # raises: closed
    frame.whole = memoryview(bus._mmap)
    return frame.whole


def _named(fds):
    """fds.named for a reservation's descriptors; nothing to name for none."""
    return _fds.named(fds) if fds or type(fds) is not tuple else contextlib.nullcontext(())


class Reservation:
    """A message being written in place in the pool, made by `Peer.reserve`: fill
    `payload`, then `commit()` sends it or `abort()` gives the record back.  As a context
    manager it commits when the block ends and aborts when it raises.

    >>> import bus1py
    >>> with bus1py.Bus.create() as bus:
    ...     a, b = bus.peer(), bus.peer()
    ...     h = b.transfer(b.create_node(), a)
    ...     with a.reserve([h], 5) as r:
    ...         r.payload[:] = b"hello"
    ...     print(b.recv(0).payload)
    b'hello'
    """

    __slots__ = ("_peer", "_res", "_dests", "_view", "_raw", "_state", "_pid", "_fds", "stamp", "length")

    def __init__(self, peer: Any, destinations: int | Iterable[int], length: int, handles: Iterable[int] = (), *,
                 fds: Iterable[int] = (), unreachable_error: bool = False) -> None:
        self._state = None  # not open until the record is taken (for __del__)
        if type(length) is not int or length < 0:
            raise ValueError(f"length must be an int >= 0, not {length!r}")
        bus = peer._bus
        frame = peer._frame()  # raises: closed
        dests, carried = frame.dests, frame.handles
        limits = bus.limits
        if type(destinations) is list and len(destinations) == 1 and type(destinations[0]) is int \
                and 0 <= destinations[0] < 1 << 64:
            dests[0], n = destinations[0], 1  # the common unicast, args.destinations inline
        else:
            try:
                dest, n = args.destinations(destinations, dests, limits.max_dests)
            except (TypeError, OverflowError):
                raise args.bad_ids(destinations, handles) from None
            if n == 0:
                dests[0], n = dest, 1
        try:
            nh = args.fill(carried, handles, limits.max_msg_handles, "handles") if handles else 0
        except (TypeError, OverflowError):
            raise args.bad_ids(destinations, handles) from None
        if length > limits.max_payload:
            raise args.send_error(peer, -errno.EMSGSIZE, destinations, length, n, nh)
        self._res = res = ffi.new("struct b1_reservation *")  # one destination: res.one
        if n > 1:
            res.tx.dests = self._dests = ffi.new("struct b1_dest[]", n)
        flags = _UNREACHABLE if unreachable_error else 0
        with _named(fds) as self._fds:
            off = lib.b1_send_reserve(frame.c.base, res, peer._slot, peer._id, dests, n, length, carried, nh, flags)
        if off < 0:
            raise args.send_error(peer, off, destinations, length, n, nh)
        self._peer, self.length = peer, length
        self.stamp: tuple[int, int, int] | None = None  # commit's
        # the payload exports a slice of its own, with a buffer of its own: a buffer taken
        # from it however indirectly (numpy makes a new memoryview sharing the payload's)
        # is counted there, and the end below refuses while one lives
        self._raw = (frame.whole or _whole(frame, bus))[off:off + length]
        self._view = memoryview(pickle.PickleBuffer(self._raw))
        self._pid = _pid[0]
        self._state = _OPEN

    @property
    def payload(self) -> memoryview:
        """The message's bytes in the pool, writable until commit or abort."""
        return self._view

    def _end(self, what):
        if self._state is not _OPEN:
            raise ValueError(f"cannot {what}: the reservation is already {self._state}")
        if self._pid != _pid[0]:
            raise ValueError(f"cannot {what}: the reservation belongs to process {self._pid}")
        try:
            if _messages.exported(self._view):
                raise BufferError
            self._view.release()
            self._raw.release()
        except BufferError:
            raise BufferError(f"cannot {what}: the payload is still exported (a buffer obtained "
                              "from it, such as a numpy array, is alive): drop that first") from None
        base = self._peer._bus._base
        if base is None:  # closed in this process: the reaper frees the record
            self._state = _ABORTED
            raise bus_error(errno.ESHUTDOWN, f"cannot {what}: the bus is closed in this process")
        return base

    def commit(self) -> tuple[int, int, int]:
        """Send the message; returns its stamp (timestamp, sender id, sequence) as `send`
        does, or raises send's errors with nothing sent (the reservation ends either way)."""
        base = self._end("commit")
        res = self._res
        with _named(self._fds):
            ts = lib.b1_send_commit(base, res)
        if ts < 0:
            self._state = _ABORTED
            dests = [res.one.handle] if res.tx.n == 1 else [d.handle for d in self._dests]
            raise args.send_error(self._peer, ts, dests, self.length, res.tx.n, 0)
        self._state = _SENT
        self.stamp = (ts, self._peer._id, res.tx.seq)
        return self.stamp

    def abort(self) -> None:
        """Give the record back unsent."""
        base = self._end("abort")
        lib.b1_send_abort(base, self._res)
        self._state = _ABORTED

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Commit when the block ends normally, abort when it raises."""
        if self._state is not _OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __del__(self) -> None:
        if self._state is _OPEN and self._pid == _pid[0]:
            try:
                self.abort()
            except (BufferError, OSError):
                pass  # an export outlives it, or the bus is gone: the reaper frees the record

    def __repr__(self) -> str:
        return f"<bus1py.Reservation {self.length} B from peer {getattr(self, '_peer', None) and self._peer.id}, {self._state}>"
