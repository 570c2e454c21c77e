"""Partial multicast, bus1's SEND_FLAG_CONTINUE: `Peer.send_partial`.

Invariants:
  - One transaction: every destination that takes the message gets it with one stamp,
    ordered with every other message exactly as a `send` to those destinations would be.
  - A destination that cannot take it (EDQUOT: over its quota or this sender's share of
    it; EBADMSG: its queue broken) is left out before anything is stamped and named in the
    errors with its errno; the others are not held back by it.  A destroyed one is dropped
    silently, as `send` drops it.
  - What fails for the send as a whole (no handle for a destination, a payload too large,
    the pool full, the sender gone) raises `send`'s error with nothing sent.
"""
from __future__ import annotations

from . import _messages, args, fds as _fds
from ._lib import ffi, lib

_messages.setup_partial(int(ffi.cast("uintptr_t", ffi.addressof(lib, "b1_frame_send_partial"))))


def send_partial(peer, destinations, payload, handles=(), fds=()) -> tuple:
    """(stamp, errors): see `Peer.send_partial`."""
    if fds or type(fds) is not tuple:
        with _fds.named(fds):
            return send_partial(peer, destinations, payload, handles)
    frame = peer._frame()  # raises: closed
    payload = args.as_bytes(payload)
    try:
        dest, n = args.destinations(destinations, frame.dests, peer._bus.limits.max_dests)
        if n == 0:
            frame.dests[0], n = dest, 1
        nh = args.fill(frame.handles, handles, peer._bus.limits.max_msg_handles, "handles") if handles else 0
    except (TypeError, OverflowError):
        raise args.bad_ids(destinations, handles) from None
    r = run(peer, frame, n, payload, nh, destinations)
    stamp = (r & ~1, peer._id, frame.seq[0]) if r > 1 else None
    return stamp, failures(frame, n) if r & 1 else {}


def run(peer, frame, n, payload: bytes, nh, destinations, flags=0) -> int:
    """The partial send of `payload` to frame.dests[:n] carrying frame.handles[:nh]: its
    timestamp (0 when no destination took it), plus 1 when some could not (their errors
    left in frame.errors[:n]); send's error raised for a failure of the whole
    (BlockingIOError with B1_SEND_SENDER_IDLE in `flags` while the peer's own queue has a
    message)."""
    r = lib.b1_frame_send_partial(frame.c, peer._slot, peer._id, n, payload, len(payload), nh, flags,
                                  frame.errors)
    if r < 0:
        raise args.send_error(peer, r, destinations, len(payload), n, nh)
    return r


def failures(frame, n) -> dict:
    """{destination: errno} of the last `run` on this frame."""
    errors = frame.errors
    return {frame.dests[i]: -errors[i] for i in range(n) if errors[i]}
