"""Sending in the forms the C fast path leaves to Python, and the retry after reaping.

Invariants:
  - `send` and `recv` themselves are PeerCore's, in C (csrc/py/peer.c): what they do not
    take (fds, handles, flags, payloads not bytes) and their failures come here, and
    raise every error the API promises, nothing sent.
  - A send refused with EDQUOT is tried once more after dead peers were reaped (at most
    once a second per process and bus): a receiver at its quota may be a peer whose
    processes died.
  - `send_many` sends each payload as one `send` would, in order, and stops at the first
    failure: a prefix of the payloads is sent, never a gap.
"""
from __future__ import annotations

import errno
import functools
import time
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _messages, args, call as _call, fds as _fds
from ._lib import ffi, lib
from .peerbase import PeerBase

if TYPE_CHECKING:
    from typing_extensions import Buffer

_EDQUOT = -errno.EDQUOT
_UNREACHABLE = lib.B1_SEND_UNREACHABLE_ERROR
_send = lib.b1_frame_send
_csend_many = _messages.send_many
_send_many = lib.b1_frame_send_many
_lengths = functools.partial(array, "I")  # the lengths as uint32_t, handed to C without a per-item conversion
assert array("I").itemsize == ffi.sizeof("uint32_t")


class SendOps(PeerBase):
    """Peer's sends beside the C one (bus1py.Peer is the API)."""

    __slots__ = ()

    @args.api_name("Peer.send")
    def _send_general(self, destinations, payload, handles=(), *, fds=(), unreachable_error: bool = False) -> tuple:
        """`send` in every form (its docstring is PeerCore.send's): what the C method does
        not take itself, with every check and error of the API."""
        if fds or type(fds) is not tuple:  # () is the default; anything else is checked
            with _fds.named(fds):
                return self._send_general(destinations, payload, handles, unreachable_error=unreachable_error)
        bus = self._bus
        flags = _UNREACHABLE if unreachable_error else 0
        frame = self._frame()  # raises: closed
        if type(payload) is not bytes:
            payload = args.as_bytes(payload)
        try:
            dest, n = args.destinations(destinations, frame.dests, bus.limits.max_dests)
            nh = args.fill(frame.handles, handles, bus.limits.max_msg_handles, "handles") if handles else 0
            ts = _send(frame.c, self._slot, self._id, dest, n, payload, len(payload), nh, flags)
        except (TypeError, OverflowError):  # cffi's words for a bad id: say it for the user
            raise args.bad_ids(destinations, handles) from None
        if ts < 0:
            ts = reap_and_retry(bus, ts, _send, frame.c, self._slot, self._id, dest, n, payload,
                                len(payload), nh, flags)
            if ts < 0:
                raise args.send_error(self, ts, destinations, len(payload), n or 1, nh)
        return (ts, self._id, frame.seq[0])

    def send_many(self, destinations: int | Iterable[int], payloads: Iterable[Buffer],
                  handles: Iterable[int] = (), *, fds: Iterable[int] = (), unreachable_error: bool = False) -> int:
        """Send each of `payloads` to the same `destinations`, in one C call: one
        transaction per payload, each with its own stamp, exactly as a loop of
        `send(destinations, payload, handles)` in order would (`handles` are carried by
        every message).

        Stops at the first failure and returns how many were sent; when the first payload
        already fails, raises that failure (the errors of `send`) with nothing sent.  A
        caller that gets fewer than len(payloads) retries the rest, typically after the
        receiver drained its queue (EDQUOT or EXFULL would be the next error).  `fds`, like
        `handles`, are carried by every message (each its own copies).
        """
        if fds or type(fds) is not tuple:  # () is the default; anything else is checked
            with _fds.named(fds):
                return self.send_many(destinations, payloads, handles, unreachable_error=unreachable_error)
        bus = self._bus
        frame = self._frame()  # raises: closed
        if type(payloads) is not list and type(payloads) is not tuple:
            if isinstance(payloads, (bytes, bytearray, memoryview, str)):
                raise TypeError("payloads must be a sequence of bytes-like payloads, not one payload")
            payloads = list(payloads)
        if not payloads:
            return 0
        flags = _UNREACHABLE if unreachable_error else 0
        try:
            dest, n = args.destinations(destinations, frame.dests, bus.limits.max_dests)
            nh = args.fill(frame.handles, handles, bus.limits.max_msg_handles, "handles") if handles else 0
        except (TypeError, OverflowError):
            raise args.bad_ids(destinations, handles) from None
        # payloads all bytes: sent from where they are, in one call into C
        r = _csend_many(frame.address, self._slot, self._id, dest, n, payloads, nh, flags)
        if r is not None:
            if r < 0:
                r = reap_and_retry(bus, r, _csend_many, frame.address, self._slot, self._id, dest, n,
                                   payloads, nh, flags)
            if r < 0:
                raise args.send_error(self, r, destinations, memoryview(payloads[0]).nbytes, n or 1, nh)
            return r
        try:
            data = b"".join(payloads)
            lens = _lengths(map(len, payloads))
        except TypeError:
            data = None
        if data is None or len(data) != sum(lens):  # str, non-buffers, or items of >1 byte
            copies = [args.as_bytes(p) for p in payloads]
            data, lens = b"".join(copies), _lengths(map(len, copies))
        arr = ffi.from_buffer("uint32_t[]", lens)
        r = _send_many(frame.c, self._slot, self._id, dest, n, data, arr, len(lens), nh, flags)
        if r < 0:
            r = reap_and_retry(bus, r, _send_many, frame.c, self._slot, self._id, dest, n, data, arr,
                               len(lens), nh, flags)
        if r < 0:
            raise args.send_error(self, r, destinations, lens[0], n or 1, nh)
        return r

    def _send_failed(self, r, destinations, payload: bytes) -> tuple:
        """PeerCore.send of `payload` (no handles, no flags) failed with -errno `r`: once
        more after reaping (EDQUOT), else its error."""
        r = reap_and_retry(self._bus, r, self._send_general, destinations, payload)
        if type(r) is int:
            n = 1 if type(destinations) is int else len(destinations)
            raise args.send_error(self, r, destinations, len(payload), n, 0)
        return r

    def _send_reply(self, handle, tag, payload, handles, fds) -> None:
        """Message.reply (call.py), with a send's retry after reaping."""
        _call.reply(self, handle, tag, payload, handles, fds, reap_and_retry)


_last_reap: dict[str, float] = {}  # bus name -> monotonic time of this process's last reaping


def reap_and_retry(bus, r, send, *call):
    """`send(*call)` once more when its result `r` was EDQUOT and reaping the bus's dead
    peers freed one (at most once a second per process: it reads /proc); else `r`."""
    if r != _EDQUOT:
        return r
    now = time.monotonic()
    if now - _last_reap.get(bus.name, -1.0) < 1.0:
        return r
    _last_reap[bus.name] = now
    if bus.gc()["peers_reaped"] == 0:
        return r
    return send(*call)
