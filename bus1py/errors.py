"""Errors: plain OSError with the errno the bus1 kernel would return.

Invariant: a call that raises changed nothing on the bus.  OSError(errno, text) becomes the
builtin subclass for that errno where one exists (EAGAIN -> BlockingIOError, ESHUTDOWN ->
BrokenPipeError, ETIMEDOUT -> TimeoutError, ENOENT -> FileNotFoundError), so callers can
catch either the subclass or OSError and test e.errno.
"""
from __future__ import annotations

import errno
import os

# What each errno means on this bus, in the words of SPEC section 5.
_MEANING = {
    errno.ENXIO: "unknown handle",
    errno.ESHUTDOWN: "peer disconnected",
    errno.EAGAIN: "nothing ready to receive",
    errno.EMSGSIZE: "payload or handle count too large",
    errno.EDQUOT: "receiver quota exceeded",
    errno.EXFULL: "receive pool full",
    errno.EBUSY: "last reference of the owner to a live node",
    errno.EREMOTE: "not a node you own",
    errno.ESTALE: "node already destroyed",
    errno.ENOTUNIQ: "duplicate id",
    errno.EINVAL: "invalid argument",
    errno.ETIMEDOUT: "timed out",
    errno.ENOSPC: "bus table full",
    errno.EBADMSG: "not a bus1py segment",
    errno.EPROTO: "bus1py segment of another layout version",
    errno.EUCLEAN: "queue structure corrupted",
    errno.EHOSTUNREACH: "destination destroyed",
    errno.ENOLINK: "descriptor store missing",
}


def bus_error(code: int, detail: str = "") -> OSError:
    """The exception for a negative or positive errno from the C helper."""
    code = abs(code)
    if code >= 1 << 16:  # no errno: a result the C helper should never give
        return OSError(errno.EIO, f"unexpected result {code} from the bus: {detail}")
    text = _MEANING.get(code) or os.strerror(code)
    return OSError(code, f"{text}: {detail}" if detail else text)
