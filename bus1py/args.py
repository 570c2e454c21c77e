"""Arguments from Python to the C helper, and its errors back in the caller's words.

Invariant: every check here runs before the C call it guards, so a bad argument raises a
clear TypeError or ValueError (or the bus's OSError for a limit) and changes nothing.
"""
from __future__ import annotations

import errno

from .errors import bus_error

_EAGAIN = -errno.EAGAIN


def api_name(qualname: str):
    """Name a method's code as the API call it serves (`Peer.send` for the Python path of
    the C method send), so that Python's own argument errors name the call the user made
    and no private name."""
    def name(fn):
        fn.__code__ = fn.__code__.replace(co_name=qualname.rpartition(".")[2], co_qualname=qualname)
        fn.__qualname__ = qualname
        return fn
    return name


def timeout_ns(timeout) -> int:
    """A receive's timeout, checked, as the C helper's nanoseconds: None waits forever (-1),
    0 is non-blocking, any positive time waits at least 1 ns, and a time past int64
    nanoseconds (292 years, inf) waits forever (-1).  Every receive, call and wait checks its
    timeout here (csrc/py/peer.c's fast form takes only what this accepts): anything but None
    or an int or float >= 0 is a ValueError (NaN, negative) or TypeError naming it."""
    if type(timeout) is float or type(timeout) is int:
        if timeout >= 0:  # NaN is not
            return 0 if timeout == 0 else -1 if timeout >= 9.2e9 else max(1, int(timeout * 1e9))
        raise ValueError(f"timeout must be None or >= 0, not {timeout!r}")
    if timeout is None:
        return -1
    raise TypeError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")


def check_handle(handle, what):
    if type(handle) is not int or handle < 0 or handle >= 1 << 64:
        raise TypeError(f"{what} must be a handle id (an int >= 0), not {handle!r}")


def destinations(values, array, limit) -> tuple:
    """(dest, n) for the frame's send calls: n == 0 when the one destination is `dest`,
    else the n handle ids are copied into `array`.  TypeError or OverflowError for anything
    but handle ids (worded by `bad_ids`), EINVAL for none at all."""
    if type(values) is list and len(values) == 1:
        values = values[0]
    if type(values) is int:
        if not 0 <= values < 1 << 64:
            raise OverflowError(values)
        return values, 0
    n = fill(array, values, limit, "destinations")
    if n == 0:
        raise bus_error(-errno.EINVAL, "no destinations")
    return 0, n


def bad_ids(destinations, handles) -> TypeError:
    return TypeError(f"destinations and handles must be handle ids (ints >= 0) or "
                     f"sequences of them, not {destinations!r} and {handles!r}")


def fill(array, values, limit, what) -> int:
    """Copy handle ids into a scratch array.  Anything but ints from 0 to 2**64-1 makes
    cffi raise TypeError or OverflowError, which the caller words for the user."""
    if type(values) is not list and type(values) is not tuple:
        values = tuple(values)  # sets, generators, ...; TypeError for non-iterables
    n = len(values)
    if any(type(v) is bool for v in values):
        raise TypeError(f"{what} must be handle ids, not booleans: {values!r}")
    if n > limit:
        raise bus_error(errno.EINVAL if what == "destinations" else errno.EMSGSIZE,
                        f"{n} {what}, more than the bus allows "
                        f"({'max_dests' if what == 'destinations' else 'max_msg_handles'}={limit})")
    if n == 1:
        array[0] = values[0]
    else:
        array[0:n] = values
    return n


def as_bytes(payload) -> bytes:
    if isinstance(payload, str):
        raise TypeError("payload must be bytes-like, not str (encode it first)")
    try:
        return memoryview(payload).tobytes()  # any buffer, strided ones too
    except TypeError:
        raise TypeError(f"payload must be bytes-like, not {type(payload).__name__}") from None


def send_error(peer, r, destinations, length, n, nh):
    code = -r
    limits = peer._bus.limits
    if code == errno.ENXIO:
        return bus_error(r, f"peer {peer._id} holds no handle among destinations {destinations!r}"
                            f"{' or carried handles' if nh else ''}")
    if code == errno.EMSGSIZE:
        if nh > limits.max_msg_handles:
            return bus_error(r, f"{nh} handles exceed max_msg_handles={limits.max_msg_handles}")
        return bus_error(r, f"payload of {length} bytes exceeds max_payload={limits.max_payload}")
    if code == errno.EXFULL:
        return bus_error(r, f"no room for {n} cop{'y' if n == 1 else 'ies'} of {length} bytes "
                            f"(pool_size={limits.pool_size}, max_entries={limits.max_entries})")
    if code == errno.EDQUOT:
        return bus_error(r, f"a receiver among {destinations!r} is at its quota, or this sender at its "
                            f"share of it, of queued messages, bytes, handles or descriptors "
                            f"(quota_fds={limits.quota_fds})")
    if code == errno.EHOSTUNREACH:
        return bus_error(r, f"every destination in {destinations!r} is destroyed")
    if code == errno.ENOLINK:
        return bus_error(r, f"a receiver among {destinations!r} has no descriptor store (none of its "
                            "holders could set one up: it is retried at their next call); nothing sent")
    if code == errno.EINVAL and n == 0:
        return bus_error(r, "no destinations")
    return bus_error(r, f"peer {peer._id} sending to {destinations!r}")

def recv_error(peer, r, timeout):
    if r == _EAGAIN:
        return bus_error(r, f"peer {peer._id} has no committed message at its front")
    if r == -errno.ETIMEDOUT:
        return bus_error(r, f"no message for peer {peer._id} within {timeout} s")
    if r == -errno.ENOLINK:
        return bus_error(r, f"a message to peer {peer._id} lost its descriptors (its store was closed by "
                            "its last holder before this receive) and was dropped; receive again for the next")
    if r == -errno.EMFILE:
        return OSError(errno.EMFILE, f"peer {peer._id} is out of file descriptors: close some and receive "
                                     "again; the message stays queued")
    return bus_error(r, f"peer {peer._id}")
