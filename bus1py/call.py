"""Calls: a request that carries a reply capability, its reply, and the wait for it.

Wire form: a request is a data message sent with B1_SEND_REQUEST whose last carried handle
is a handle to one of the caller's reply nodes, and whose tag (struct b1_frame.tag) numbers
the call; the reply is a data message to that node with the same tag.  The receiver sees a
Request whose `reply` sends it and releases the capability (message.py).

Invariants:
  - A reply node is quiet (B1_NODE_QUIET): nobody is sent a notice of it -- no NODE_RELEASE
    to the caller when a service lets its handle go, no NODE_DESTROY to a service that
    still holds one when the caller's peer goes -- so a call leaves nothing in either
    queue.  The nodes are reused, each by one call at a time: a process keeps a free list
    per peer (its own: a fork child makes its own), and a call takes one from it and puts
    it back however it ends.  They go with the peer (disconnect, reset).
  - A reply is taken only by the call whose tag it carries: a late reply to a call that
    timed out or was interrupted reaches the node's next call with another tag and is
    dropped there (csrc/py/messages.c recv_node), its descriptors closed.
  - The wait takes only entries for the reply node (b1_frame_recv_node): everything else
    stays queued, in its order, for `recv`.  A NODE_DESTROY of the called handle found
    before the reply, or the handle already known dead, ends the call with
    ConnectionResetError and stays queued too.
  - The request is sent with B1_SEND_UNREACHABLE_ERROR: a service already known destroyed
    fails the call at once.
"""
from __future__ import annotations

import asyncio
import errno
import itertools
import os
import time

from . import _messages, args, fds as _fds
from ._lib import ffi, lib
from .errors import bus_error

_EINTR = -errno.EINTR
_ECONNRESET = -errno.ECONNRESET
_EHOSTUNREACH = -errno.EHOSTUNREACH
_ANY_TAG = (1 << 64) - 1
_REQUEST = lib.B1_SEND_REQUEST | lib.B1_SEND_UNREACHABLE_ERROR
_recv_node = _messages.recv_node
_tagged_send = _messages.tagged_send
_tags = itertools.count(1)
_free: dict = {}  # (bus name, peer id) -> this process's idle reply nodes of the peer
os.register_at_fork(after_in_child=_free.clear)  # a child makes its own


def _take_node(peer) -> int:
    """A reply node of `peer` no call of this process uses now (made when none is idle)."""
    key = (peer._bus.name, peer._id)
    idle = _free.get(key)
    if idle:
        try:
            return idle.pop()
        except IndexError:  # another thread took the last one
            pass
    out = ffi.new("uint64_t *")
    r = lib.b1_node_create_flags(peer._bus.base(), peer._slot, peer._id, lib.B1_NODE_QUIET, out)
    if r:
        raise bus_error(r, f"making a reply node on peer {peer._id}")
    return out[0]


def _give_back(peer, node: int) -> None:
    _free.setdefault((peer._bus.name, peer._id), []).append(node)


def forget(peer) -> None:
    """The peer's reply nodes went with it (disconnect, reset): none is handed out again."""
    _free.pop((peer._bus.name, peer._id), None)


def _next_tag() -> int:
    return next(_tags) & 0xFFFFFFFF or 1


def _send_request(peer, handle, payload, handles, node, tag) -> None:
    frame = peer._frame()  # raises: closed
    if type(payload) is not bytes:
        payload = args.as_bytes(payload)
    if handles:
        try:
            nh = args.fill(frame.handles, tuple(handles) + (node,), peer._bus.limits.max_msg_handles, "handles")
        except (TypeError, OverflowError):
            raise args.bad_ids(handle, handles) from None
    else:
        frame.handles[0], nh = node, 1
    ts = _tagged_send(frame.address, peer._slot, peer._id, handle, payload, nh, _REQUEST, tag, 0)
    if ts < 0:
        if ts == _EHOSTUNREACH:
            raise bus_error(_ECONNRESET, f"the service behind handle {handle} is destroyed")
        raise args.send_error(peer, ts, handle, len(payload), 1, nh)


def reply(peer, handle, tag, payload, handles, fds, retry) -> None:
    """Message.reply: the reply, carrying the request's tag, to the caller's reply node,
    then the capability released (in one call into C).  A caller that is gone is no error
    (its node is destroyed: the reply is dropped by the bus).  `retry` is sending.py's
    reap-and-retry of a send refused with EDQUOT."""
    if fds or type(fds) is not tuple:
        with _fds.named(fds):
            return reply(peer, handle, tag, payload, handles, (), retry)
    frame = peer._frame()  # raises: closed
    if type(payload) is not bytes:
        payload = args.as_bytes(payload)
    try:
        nh = args.fill(frame.handles, handles, peer._bus.limits.max_msg_handles, "handles") if handles else 0
    except (TypeError, OverflowError):
        raise args.bad_ids(handle, handles) from None
    call = (frame.address, peer._slot, peer._id, handle, payload, nh, 0, tag, 1)
    ts = _tagged_send(*call)
    if ts < 0:
        ts = retry(peer._bus, ts, _tagged_send, *call)
        if ts < 0:
            raise args.send_error(peer, ts, handle, len(payload), 1, nh)


def wait(peer, node: int, watch: int, tag: int, timeout):
    """The message for `node` carrying `tag` (any with _ANY_TAG), waiting as `recv` does;
    ConnectionResetError when `watch` (0: none) is destroyed first."""
    frame = peer._frame()  # raises: closed
    ns = args.timeout_ns(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        r = _recv_node(frame.address, peer._slot, peer._id, node, watch, ns, tag, peer)
        if type(r) is not int:
            if peer._ready is not None:
                peer._ready.sync()
            return r
        if r == _ECONNRESET:
            raise bus_error(r, f"the service behind handle {watch} was destroyed (or its peer died) "
                               "before it replied")
        if r != 1 and r != _EINTR:
            if r == -errno.ETIMEDOUT and tag != _ANY_TAG:
                raise bus_error(r, f"no reply from handle {watch} within {timeout} s")
            raise args.recv_error(peer, r, timeout)
        if deadline is not None:  # a stale reply dropped, or a signal handled: the time left
            ns = args.timeout_ns(max(0.0, deadline - time.monotonic()))


def check_call(handle, timeout) -> None:
    args.check_handle(handle, "handle")
    args.timeout_ns(timeout)


def call(peer, handle, payload, timeout, handles, fds):
    """Peer.call: the request, then the wait for its reply on a reply node of its own."""
    check_call(handle, timeout)
    if fds or type(fds) is not tuple:
        with _fds.named(fds):
            return call(peer, handle, payload, timeout, handles, ())
    if not peer._attached:
        peer._attach()
    node = _take_node(peer)
    try:
        tag = _next_tag()
        _send_request(peer, handle, payload, handles, node, tag)
        return wait(peer, node, handle, tag, timeout)
    finally:
        _give_back(peer, node)


async def acall(peer, handle, payload, timeout, handles, fds):
    """Peer.acall: the request is sent at once; the wait runs in the loop's default executor
    (a reply node's wait is not a readiness the loop's reader can see), in slices so that a
    cancelled call gives its node back within one of them."""
    check_call(handle, timeout)
    if not peer._attached:
        peer._attach()
    loop = asyncio.get_running_loop()
    node = _take_node(peer)
    try:
        tag = _next_tag()
        if fds or type(fds) is not tuple:
            with _fds.named(fds):
                _send_request(peer, handle, payload, handles, node, tag)
        else:
            _send_request(peer, handle, payload, handles, node, tag)
    except BaseException:
        _give_back(peer, node)
        raise
    deadline = None if timeout is None else loop.time() + timeout
    try:
        r = wait(peer, node, handle, tag, 0)  # a reply already there: no thread hop
        _give_back(peer, node)
        return r
    except BlockingIOError:
        pass
    except BaseException:
        _give_back(peer, node)
        raise
    while True:
        left = None if deadline is None else max(0.0, deadline - loop.time())
        piece = _SLICE if left is None else min(_SLICE, left)
        fut = loop.run_in_executor(None, _wait_slice, peer, node, handle, tag, piece)
        try:
            r = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # the executor's wait goes on for at most a slice: the node is free after it
            fut.add_done_callback(lambda _: _give_back(peer, node))
            raise
        except BaseException:
            _give_back(peer, node)
            raise
        if r is not None:
            _give_back(peer, node)
            return r
        if left is not None and left <= piece:
            _give_back(peer, node)
            raise bus_error(-errno.ETIMEDOUT, f"no reply from handle {handle} within {timeout} s")


_SLICE = 0.5  # seconds an executor thread waits before the loop looks at the call again


def _wait_slice(peer, node, watch, tag, seconds):
    """wait() for at most `seconds`: the reply, or None when none came (the call goes on)."""
    try:
        return wait(peer, node, watch, tag, seconds)
    except TimeoutError:
        return None
