"""Messages as a receiver sees them.

Invariants:
  - A Message is immutable and self-contained (its payload is a copy), so it stays valid
    after the bus is closed -- except a zero-copy one (`recv(copy=False)`,
    receive.SliceMessage), whose payload is a view into the pool until it is released.
  - A request (sent by `Peer.call`) arrives as a Request (or a SliceMessage) whose `_reply`
    is (receiving peer, handle to the caller's reply node, tag); its reply capability is
    not among `handles`.  `reply` uses it once: `_reply` is None afterwards.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from . import objects
from ._lib import lib

HANDLE_INVALID: int = lib.B1_HANDLE_INVALID
"""Stands in `Message.handles` for a handle whose node was destroyed before the message."""


class MessageType(enum.IntEnum):
    DATA = lib.B1_MSG_DATA
    NODE_DESTROY = lib.B1_MSG_NODE_DESTROY
    NODE_RELEASE = lib.B1_MSG_NODE_RELEASE


class Message(NamedTuple):
    type: MessageType
    destination: int
    """The receiver's own handle id for the node the message was addressed to."""
    payload: bytes
    handles: tuple
    """Receiver-local handle ids carried by the message (HANDLE_INVALID for dead ones)."""
    stamp: tuple
    """(timestamp, sender peer id, transaction sequence): diagnostic, for traces."""
    fds: tuple = ()
    """File descriptors the message carried, new in this process: the receiver's to close."""

    def release(self) -> None:
        """Nothing to give back: the payload is a copy (see receive.SliceMessage)."""

    def reply(self, payload, *, handles=(), fds=()) -> None:
        """Answer this request (a message sent with `Peer.call`): `payload`, `handles` and
        `fds` go to the caller as its call's return value, and the reply capability is
        released.  ValueError for a message that is not a request or was answered already.
        A caller that gave up or is gone is no error: the reply is dropped."""
        r = getattr(self, "_reply", False)  # a plain Message has no attributes of its own
        if not r:
            what = "is not a request" if r is False else "was answered already"
            raise ValueError(f"this message {what}: only a message sent with call() takes one reply")
        peer, handle, tag = r
        peer._send_reply(handle, tag, payload, handles, fds)
        self._reply = None

    def obj(self):
        """The Python object `Peer.send_obj` sent.  Of a zero-copy message, its arrays and
        buffers are read-only views of the pool, and `release()` raises BufferError while
        one is alive (objects.py)."""
        return objects.loads(self)


class Request(Message):
    """A request: a Message sent with `Peer.call`, answered with `reply`."""


MESSAGE_TYPES = tuple(MessageType)  # indexed by the C type code, cheaper than MessageType(x)
