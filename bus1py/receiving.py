"""Receiving in the forms the C fast path leaves to Python, and its failures.

Invariants:
  - `recv` itself is PeerCore's, in C (csrc/py/peer.c), on this thread's frame: the
    forms it does not take and its failures come here; a message is taken off the queue
    only by the call that returns it.
  - A receive interrupted by a signal waits out only the time the C helper says is left;
    one that meets descriptors without this process's store sets the store up once, or
    raises why it cannot.
  - Batches and zero-copy slices are receive.py's, per-node receives call.py's.
"""
from __future__ import annotations

import errno

from . import _messages, args, call as _call, fds as _fds, receive
from ._lib import lib
from .message import Message
from .peerbase import PeerBase

_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN
_EPERM = -errno.EPERM
_crecv = _messages.recv  # its Message built in C


class RecvOps(PeerBase):
    """Peer's receives beside the C one (bus1py.Peer is the API)."""

    __slots__ = ()

    @args.api_name("Peer.recv")
    def _recv_general(self, timeout: float | None = None, copy: bool = True, *, node=None) -> Message:
        """`recv` in every form (its docstring is PeerCore.recv's): what the C method does
        not take itself, with every check and error of the API."""
        if node is not None:
            return self._recv_node(node, timeout, copy)
        ns = args.timeout_ns(timeout)
        if not copy:
            return receive.recv_slice(self, ns, timeout)
        m = _crecv(self._frame().address, self._slot, self._id, ns, self)  # _frame raises: closed
        if type(m) is int:
            m = self._recv_slow(m, timeout)
        if self._ready is not None:
            self._ready.sync()
        return m

    def _recv_node(self, node, timeout, copy) -> Message:
        """recv(node=h): the first message addressed to this peer's handle `h` (data or a
        notice of its node), in queue order; the messages for other nodes stay queued."""
        _call.check_call(node, timeout)
        if copy is not True:
            raise ValueError("recv(node=...) copies the payload: copy=False is not supported with node")
        return _call.wait(self, node, 0, _call._ANY_TAG, timeout)

    def _recv_node_failed(self, r, node, timeout) -> Message:
        """PeerCore.recv(node=) failed with -errno `r`: EINTR (its Python handler has run)
        waits out the time the C helper says is left; anything else is raised."""
        if r != _EINTR:
            raise args.recv_error(self, r, timeout)
        if timeout is None:
            return _call.wait(self, node, 0, _call._ANY_TAG, None)
        left = self._bus.scratch().c.info.left_ns / 1e9
        try:
            return _call.wait(self, node, 0, _call._ANY_TAG, left)
        except BlockingIOError:  # the deadline passed while the handler ran
            raise args.recv_error(self, -errno.ETIMEDOUT, timeout) from None

    def recv_many(self, max_messages: int, timeout: float | None = None, copy: bool = True) -> list[Message]:
        """Up to `max_messages` messages, in one C call and one hold of the queue's lock:
        the committed messages at the front of the queue, in queue order, as that many
        `recv` calls would return them.  Waits only while none is there, with `recv`'s
        timeout rules (None, 0: BlockingIOError, seconds: TimeoutError); never returns an
        empty list.  Fewer are returned when the copied payloads would overflow this
        thread's receive buffer (max_payload bytes together).  copy=False as in `recv`."""
        if type(max_messages) is not int or max_messages < 1:
            raise ValueError(f"max_messages must be an int >= 1, not {max_messages!r}")
        return receive.recv_many(self, max_messages, args.timeout_ns(timeout), copy, timeout)

    def _recv_failed(self, r, timeout, copy: bool) -> Message:
        """PeerCore.recv failed with -errno `r`: EINTR waits out the time left, anything
        else is raised (as the Python forms do)."""
        if copy:
            return self._recv_slow(r, timeout)
        frame = self._bus.scratch()
        ns = args.timeout_ns(timeout)
        return receive.retry(self, r, frame, 1, ns, lib.B1_RECV_NOCOPY, frame.held, timeout)[0]

    def _recv_slow(self, r, timeout) -> Message:
        """A receive interrupted by a signal (EINTR: its Python handler has run by now, so
        wait out the time the C helper says is left), one that met descriptors without
        this process's store (EPERM: set up now, or its error raised), or an error to raise."""
        frame = self._bus.scratch()
        addr = frame.address
        store_tried = False
        while type(r) is int:
            if r == _EPERM and not store_tried:
                store_tried = True
                _fds.ensure(self)  # raises what keeps it from being set up
                r = _crecv(addr, self._slot, self._id, args.timeout_ns(timeout), self)
                continue
            if r != _EINTR:
                raise args.recv_error(self, r, timeout)
            ns = -1 if timeout is None else frame.c.info.left_ns
            if ns == 0:  # the deadline passed while the handler ran: one last look
                r = _crecv(addr, self._slot, self._id, 0, self)
                if r == _EAGAIN:
                    r = -errno.ETIMEDOUT
                continue
            r = _crecv(addr, self._slot, self._id, ns, self)
        return r
