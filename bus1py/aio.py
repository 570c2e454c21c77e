"""Receiving under asyncio: `Peer.arecv` and `Peer.messages`.

Invariants:
  - Nothing here blocks the event loop: a message is taken only by a non-blocking receive
    (recv with timeout 0), and waiting is the loop's reader on `peer.fileno()`.
  - That receive and the return of its message have no await between them, so cancelling
    a waiting `arecv` (or a timeout) never takes a message out of the queue: it is still
    there for the next receive.
  - One reader per (loop, fd): every `arecv` waiting on the same peer in one loop shares it,
    and it is removed as soon as no one waits.
"""
from __future__ import annotations

import asyncio
import errno

from . import args
from .errors import bus_error

_waiting: dict = {}  # (loop, fd) -> the futures waiting for it to be readable


def _wake(key):
    loop, fd = key
    loop.remove_reader(fd)
    for fut in _waiting.pop(key, ()):
        if not fut.done():
            fut.set_result(None)


def _readable(loop, fd) -> asyncio.Future:
    """A future done when fd is readable (shares the loop's one reader for fd)."""
    key = (loop, fd)
    fut = loop.create_future()
    waiters = _waiting.get(key)
    if waiters is None:
        waiters = _waiting[key] = set()
        loop.add_reader(fd, _wake, key)
    waiters.add(fut)

    def forget(f):
        w = _waiting.get(key)
        if w is not None:
            w.discard(f)
            if not w:
                del _waiting[key]
                loop.remove_reader(fd)
    fut.add_done_callback(forget)
    return fut


async def arecv(peer, timeout=None, copy=True):
    args.timeout_ns(timeout)  # checked before anything waits
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        try:
            return peer.recv(0, copy=copy)
        except BlockingIOError:
            if timeout == 0:
                raise
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            raise bus_error(-errno.ETIMEDOUT, f"no message for peer {peer.id} within {timeout} s")
        fut = _readable(loop, peer.fileno())
        try:
            await asyncio.wait_for(fut, left)
        except asyncio.TimeoutError:
            pass  # one last look at the queue, then the deadline check above


async def messages(peer, copy=True):
    try:
        while True:
            yield await arecv(peer, None, copy)
    except BrokenPipeError:  # the peer was disconnected
        return
