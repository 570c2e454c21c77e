"""Topics: publish and subscribe with bus1's one order (`Peer.topic`, `Peer.subscribe`).

A topic is a peer of its own (the topic peer, made by `peer.topic(name)` in the publishing
process) owning one node published under `name`.  A subscription is a node of the
subscriber's peer: subscribing sends a handle to it to the topic's node; closing it (or the
subscriber's death) destroys it, and the topic peer's NODE_DESTROY drops it.  A topic's
message is one partial multicast (`send_partial`) from the topic peer to every
subscription it has taken in.

Invariants:
  - One order: every message of every topic is a bus1 multicast, so any two subscribers see
    the messages they both receive, of any topics and publishers, in one order.
  - The topic peer's queue holds only the topic's own traffic (subscriptions, their nodes'
    destructions, the release of its node): nothing the publishing program receives, and
    it is taken in whenever `subscribers` is read or a message is sent.
  - The topic peer sends nothing but the topic's messages, so their sequence numbers
    (msg.stamp[2]) are consecutive: a subscription counts what it missed (over its quota,
    partial multicast's EDQUOT) from the gaps, with no header in the payload.
  - A subscription gone (closed, or its process dead and reaped) is dropped at the next
    take-in.  The topic peer holds the only other handle to a subscription's node, so the
    node's NODE_RELEASE tells the subscriber the topic let it go -- its peer gone (closed,
    or its process dead), or the subscription refused past the bus's max_dests (a topic's
    message is one transaction) -- and ends its wait with ConnectionResetError.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import functools
import os

from . import _messages, args, call as _call, partial
from ._lib import lib
from .errors import bus_error
from .message import Message, MessageType

SUBSCRIBE = b"bus1py-subscribe"
_SENDER_IDLE = lib.B1_SEND_SENDER_IDLE
_ANY_TAG = _call._ANY_TAG
_partial_send = _messages.partial_send
_EAGAIN = -errno.EAGAIN


class Topic:
    """A topic published under a bus name (see the module docstring)."""

    def __init__(self, peer, name: str):
        self.name = name
        self._peer = peer
        self._tp = peer._bus.peer()
        try:
            self._node = self._tp.create_node()
            self._tp.publish(name, self._node)
        except BaseException:
            self._tp.disconnect()
            raise
        self._subs: dict = {}  # the topic peer's handle -> references it holds
        self._dests: list = []  # its keys, as a send's destinations (changed in place: the sender's)
        # send's common form as one C call (csrc/py/topic.c); the method below serves the rest
        self.send = _messages.PartialSender(  # type: ignore[method-assign]  # the instance's C form
            self._tp, self._dests, _SENDER_IDLE, functools.partial(Topic.send, self))

    @property
    def id(self) -> int:
        """The topic peer's id: the sender (msg.stamp[1]) of the topic's messages."""
        return self._tp.id

    @property
    def subscribers(self) -> int:
        """How many subscriptions the topic has, once those that arrived are taken in."""
        self._take_in()
        return len(self._subs)

    def _take_in(self) -> None:
        """Subscriptions and departures queued at the topic peer, applied."""
        tp = self._tp
        if lib.b1_peer_ready(tp._frame().c.base, tp._slot, tp._id) == 0:  # lock-free: nothing queued
            return
        while True:
            try:
                got = self._tp.recv_many(64, timeout=0)
            except BlockingIOError:
                return
            for m in got:
                self._apply(m)

    def _apply(self, m) -> None:
        tp = self._tp
        if m.type == MessageType.DATA:
            live = [h for h in m.handles if h != lib.B1_HANDLE_INVALID]
            room = len(self._subs) < tp._bus.limits.max_dests or (live and live[0] in self._subs)
            if m.destination == self._node and bytes(m.payload) == SUBSCRIBE and len(live) == 1 and room:
                self._subs[live[0]] = self._subs.get(live[0], 0) + 1
                self._dests[:] = self._subs
            else:  # not a subscription: what it carried goes back
                for h in live:
                    tp.release(h)
            for fd in m.fds:
                os.close(fd)
        elif m.type == MessageType.NODE_DESTROY and m.destination in self._subs:
            for _ in range(self._subs.pop(m.destination)):
                tp.release(m.destination)
            self._dests[:] = self._subs

    def send(self, payload, *, handles=(), fds=()) -> int:
        """Multicast `payload` (with `handles`, the publishing peer's, and `fds`) to every
        subscription in one transaction; returns how many took it.  A subscription over
        its quota misses it (counted at the subscriber: `Subscription.missed`)."""
        if handles or fds or type(fds) is not tuple:
            return self._send_carrying(payload, handles, fds)
        if type(payload) is not bytes:
            payload = args.as_bytes(payload)
        tp, dests = self._tp, self._dests
        try:  # tp._frame() inlined: this thread's frame, the topic peer attached
            frame = tp._bus._tls.frame
        except AttributeError:
            frame = tp._frame()  # raises: closed
        if not tp._attached:
            tp._attach()
        while True:
            n = len(dests)
            if not n:  # none known: the ones that arrived taken in
                self._take_in()
                dests = self._dests
                if not dests:
                    return 0
                continue
            # one C call (refused, nothing done, while the topic peer has something queued)
            r = _partial_send(frame.address, tp._slot, tp._id, dests, payload, _SENDER_IDLE,
                              frame.errors_address, frame.max_dests)
            if r < 0:
                if r != _EAGAIN:
                    raise args.send_error(tp, r, dests, len(payload), n, 0)
                self._take_in()
                dests = self._dests
                continue
            if r & 1:
                return n - len(partial.failures(frame, n)) if r > 1 else 0
            return n

    def _send_carrying(self, payload, handles, fds) -> int:
        """send with handles (the publishing peer's, lent to the topic peer for the send)
        or descriptors."""
        self._take_in()
        if not self._subs:
            return 0
        carried = [self._peer.transfer(h, self._tp) for h in handles]
        try:
            stamp, errors = self._tp.send_partial(self._dests, payload, handles=carried, fds=fds)
        finally:
            for h in carried:
                self._tp.release(h)
        return 0 if stamp is None else len(self._subs) - len(errors)

    def close(self) -> None:
        """Unpublish: the topic peer leaves, every subscription's wait ends
        (ConnectionResetError), its name is free again."""
        self._tp.disconnect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _let_go(name):
    return bus_error(-errno.ECONNRESET, f"topic {name!r} let this subscription go (the topic is gone, "
                                        f"or has the bus's max_dests subscribers)")


class Subscription:
    """A subscription to the topic published as `name` (see the module docstring)."""

    def __init__(self, peer, name: str):
        self.name = name
        self._peer = peer
        self._topic = peer.lookup(name)
        try:
            self.handle = peer.create_node()
        except BaseException:
            peer.release(self._topic)
            raise
        try:
            peer.send(self._topic, SUBSCRIBE, handles=(self.handle,))
        except BaseException:
            peer.destroy(self.handle, release=True)
            peer.release(self._topic)
            raise
        self.missed = 0    # messages of the topic sent while subscribed and not received
        self._kept: collections.deque[Message] = collections.deque()  # taken by a cancelled arecv's thread, not yet returned
        self._closed = False
        self._gone = False  # the topic's NODE_RELEASE was read: every later wait ends at once
        # recv's common form as one C call (csrc/py/topic.c), keeping the sequence number
        # of the last message received (.last; -2: none yet): the instance's `recv` while
        # the subscription is open, not gone and keeps nothing (_slow drops it)
        self._reader = _messages.NodeReader(peer, self.handle, self._seen,
                                            functools.partial(Subscription.recv, self))
        self.recv = self._reader  # type: ignore[method-assign]  # the instance's C form

    def _slow(self):
        """From now on every receive takes the method below, which looks at the state."""
        self.__dict__.pop("recv", None)

    def _seen(self, m):
        """m, a message of the subscription: data counted (gaps are misses), a notice of
        the topic's end raised."""
        if m.type == MessageType.DATA:
            seq, last = m.stamp[2], self._reader.last
            if last >= 0 and seq > last + 1:
                self.missed += seq - last - 1
            self._reader.last = seq
            return m
        self._gone = True
        self._slow()
        raise _let_go(self.name)

    def recv(self, timeout: float | None = None):
        """The next message of the topic (a DATA Message, msg.destination == self.handle),
        waiting at most `timeout` seconds (None: for ever); messages for the peer's other
        nodes stay queued.  ConnectionResetError once the topic is gone."""
        if self._closed or self._gone or self._kept:
            args.timeout_ns(timeout)  # checked whether it would wait or not
            self._check_open()
            return self._seen(self._kept.popleft())
        return self._reader(timeout)

    def _take(self, timeout):
        """One receive for `arecv`, run in an executor thread: what it takes is kept here
        first, so a wait cancelled meanwhile loses nothing (the next receive returns it)."""
        m = _call.wait(self._peer, self.handle, 0, _ANY_TAG, timeout)
        self._slow()  # before it is kept: no receive passes it by through the C form
        self._kept.append(m)

    async def arecv(self, timeout: float | None = None):
        """`recv` for asyncio: the wait runs in the loop's default executor in slices of
        0.1 s (a node's wait is no readiness the loop's reader can see)."""
        args.timeout_ns(timeout)  # checked before anything waits
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._kept:
            left = None if deadline is None else deadline - loop.time()
            try:
                if left is not None and left <= 0:
                    self._take(0)
                else:
                    await loop.run_in_executor(None, functools.partial(
                        self._take, 0.1 if left is None else min(0.1, left)))
            except (BlockingIOError, TimeoutError):
                if deadline is not None and loop.time() >= deadline:
                    raise bus_error(-errno.ETIMEDOUT, f"no message of topic {self.name!r} within {timeout} s")
        return self._seen(self._kept.popleft())

    def _check_open(self):
        if self._closed:
            raise bus_error(-errno.EBADF, f"subscription to {self.name!r} is closed")
        if self._gone and not self._kept:
            raise _let_go(self.name)

    def __iter__(self):
        """The topic's messages, until the topic is gone."""
        try:
            while True:
                yield self.recv()
        except ConnectionResetError:
            return

    def close(self) -> None:
        """Unsubscribe: the subscription's node is destroyed (the topic drops it) and what
        was queued for it, its notices included, is taken out of the peer's queue."""
        if self._closed:
            return
        self._closed = True
        self._slow()
        self._kept.clear()
        try:
            self._peer.destroy(self.handle, release=True)
        finally:
            self._peer.release(self._topic)
        for node in (self.handle, self._topic):
            try:
                while True:
                    self._peer.recv(timeout=0, node=node)
            except (BlockingIOError, OSError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
