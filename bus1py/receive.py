"""Receiving in batches, and zero-copy slices of the pool (bus1's slices).

Invariants:
  - A batch is one C call and one hold of the queue's lock: the messages it returns are
    consecutive in the queue's order, exactly as the same number of `recv` calls would have
    returned them, and a message is in at most one batch.
  - A `SliceMessage`'s payload is a read-only memoryview into the bus's pool.  Its record,
    and the receiver's quota for it, stay charged until `release()` (or the message's
    garbage collection), which first releases the view: the view then raises ValueError on
    any use, and only afterwards does the record go back to the pool.
  - While anything still reads the payload's bytes -- a buffer exported from it, an array
    numpy made of it (numpy.frombuffer, numpy.asarray), a slice of it (`payload[a:b]`) --
    `release()` raises BufferError and changes nothing: the payload has a buffer of its
    own (csrc/py/slice.c), on which every one of them is counted, so no reader outlives
    the record's return to the pool.  Every view keeps the mapping alive, so none can
    fault, even after the bus is closed.
  - Only the receiving process gives a slice back: a forked child inheriting a message
    only drops its view.  The segment lists the slices each peer holds, so the ones a
    crashed process never gave back go when the peer is disconnected (or reaped).
"""
from __future__ import annotations

import errno

from . import _messages, args
from ._lib import ffi, lib
from .message import MESSAGE_TYPES, Message, Request

_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN
_recv_many = _messages.recv_many
_NOCOPY = lib.B1_RECV_NOCOPY


class SliceMessage(Message):
    """A message received with copy=False: `payload` is a read-only memoryview into the
    pool, valid until `release()` or until the message is garbage collected.  Its hold on
    the pool record is `_slice`, a bus1py._messages.Slice, which gives the record back when
    released or collected (the invariants above)."""

    def release(self) -> None:
        """Give the payload's pool record and quota back (idempotent).  Raises BufferError,
        changing nothing, while a buffer obtained from the payload is still alive."""
        self._slice.release()


def _address(name) -> int:
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


# the Messages of the hot calls are built in C (csrc/py/messages.c), as these classes
_messages.setup(Message, SliceMessage, MESSAGE_TYPES, _address("b1_frame_recv_many"),
                _address("b1_frame_recv"), _address("b1_frame_send"), _address("b1_slice_release"),
                _address("b1_frame_send_iov"))
_messages.setup_calls(Request, _address("b1_frame_recv_node"), _address("b1_handle_release"))


def recv_many(peer, max_messages, timeout_ns, copy, timeout) -> list:
    """Peer.recv_many once its arguments are checked (timeout_ns: the C helper's)."""
    bus = peer._bus
    frame = peer._frame()  # raises: closed
    n = max_messages
    if n > frame.infos_cap:
        n = min(n, bus.limits.max_entries)  # no more infos than entries could ever be taken
        if n > frame.infos_cap:
            frame.grow_infos(n)
    if copy:
        flags, held = 0, None
    else:
        flags, held = _NOCOPY, frame.held or _hold(frame, bus)
    out = _recv_many(frame.address, peer._slot, peer._id, n, timeout_ns, flags, held, peer)
    if type(out) is int:
        out = retry(peer, out, frame, n, timeout_ns, flags, held, timeout)
    if peer._ready is not None:
        peer._ready.sync()
    return out


def recv_slice(peer, timeout_ns, timeout):
    """Peer.recv(copy=False) once its timeout is checked: recv_many's call for one message,
    without recv_many's general cases (its first call sets up what this needs)."""
    try:
        frame = peer._bus._tls.frame
        held = frame.held
    except AttributeError:
        held = None
    if held is None:
        return recv_many(peer, 1, timeout_ns, False, timeout)[0]
    if not peer._attached:
        peer._attach()
    out = _recv_many(frame.address, peer._slot, peer._id, 1, timeout_ns, _NOCOPY, held, peer)
    if type(out) is int:
        out = retry(peer, out, frame, 1, timeout_ns, _NOCOPY, held, timeout)
    if peer._ready is not None:
        peer._ready.sync()
    return out[0]


def _hold(frame, bus) -> tuple:
    """What a zero-copy payload keeps alive, kept on this thread's frame: the bus's
    read-only view of its whole mapping, which the payload slices, and the bus."""
    view = bus._pool_view
    if view is None:
        bus.base()  # raises: closed
        view = bus._pool_view = memoryview(bus._mmap).toreadonly()
    frame.held = (view, bus)
    return frame.held


def retry(peer, out, frame, n, timeout_ns, flags, held, timeout) -> list:
    """After a receive failed with -errno `out`: EINTR (the signal's Python handler has run)
    waits out the time the helper left; anything else is raised."""
    while type(out) is int:
        if out != _EINTR:
            raise args.recv_error(peer, out, timeout)
        ns = -1 if timeout_ns < 0 else frame.infos[0].left_ns
        out = _recv_many(frame.address, peer._slot, peer._id, n, ns, flags, held, peer)
        if out == _EAGAIN and ns == 0:
            out = -errno.ETIMEDOUT
    return out
