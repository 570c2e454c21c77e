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

from . import args, fds as _fds
from ._lib import ffi, lib


def send_partial(peer, destinations, payload, handles=(), fds=()) -> tuple:
    """(stamp, errors): see `Peer.send_partial`."""
    if fds or type(fds) is not tuple:
        with _fds.named(fds):
            return send_partial(peer, destinations, payload, handles)
    bus = peer._bus
    frame = peer._frame()  # raises: closed
    payload = args.as_bytes(payload)
    try:
        dest, n = args.destinations(destinations, frame.dests, bus.limits.max_dests)
        if n == 0:
            frame.dests[0], n = dest, 1
        nh = args.fill(frame.handles, handles, bus.limits.max_msg_handles, "handles") if handles else 0
    except (TypeError, OverflowError):
        raise args.bad_ids(destinations, handles) from None
    errors = ffi.new("int32_t[]", n)
    ts = lib.b1_frame_send_partial(frame.c, peer._slot, peer._id, n, payload, len(payload), nh, errors)
    if ts < 0:
        raise args.send_error(peer, ts, destinations, len(payload), n, nh)
    failed = {frame.dests[i]: -errors[i] for i in range(n) if errors[i]}
    return ((ts, peer._id, frame.seq[0]) if ts else None), failed
