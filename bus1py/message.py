"""Messages as a receiver sees them.

Invariant: a Message is immutable and self-contained (its payload is a copy), so it stays
valid after the bus is closed -- except a zero-copy one (`recv(copy=False)`,
receive.SliceMessage), whose payload is a view into the pool until it is released.
"""
from __future__ import annotations

import enum
from typing import Any, NamedTuple

from . import objects
from ._lib import lib

HANDLE_INVALID: int = lib.B1_HANDLE_INVALID
"""Stands in `Message.handles` for a handle whose node was destroyed before the message."""


class MessageType(enum.IntEnum):
    """What a message is: DATA (a send), NODE_DESTROY (a node this peer owns or holds a
    handle to was destroyed: `destination` is this peer's handle to it), NODE_RELEASE (the
    last handle of another peer to a node this peer owns was released)."""

    DATA = lib.B1_MSG_DATA
    NODE_DESTROY = lib.B1_MSG_NODE_DESTROY
    NODE_RELEASE = lib.B1_MSG_NODE_RELEASE


class Message(NamedTuple):
    """A received message (`Peer.recv`), immutable and valid after the bus is closed.

    >>> import bus1py
    >>> with bus1py.Bus.create() as bus:
    ...     a, b = bus.peer(), bus.peer()
    ...     h = b.transfer(b.create_node(), a)
    ...     stamp = a.send_obj([h], {"n": 1})
    ...     msg = b.recv(0)
    ...     print(msg.type.name, msg.obj(), msg.stamp == stamp)
    DATA {'n': 1} True
    """

    type: MessageType
    """DATA, NODE_DESTROY or NODE_RELEASE."""
    destination: int
    """The receiver's own handle id for the node the message was addressed to."""
    payload: bytes
    """The bytes sent (empty for NODE_DESTROY and NODE_RELEASE)."""
    handles: tuple[int, ...]
    """Receiver-local handle ids carried by the message (HANDLE_INVALID for dead ones)."""
    stamp: tuple[int, int, int]
    """(timestamp, sender peer id, transaction sequence): diagnostic, for traces."""
    fds: tuple[int, ...] = ()
    """File descriptors the message carried, new in this process: the receiver's to close."""

    def release(self) -> None:
        """Nothing to give back: the payload is a copy (see receive.SliceMessage)."""

    def obj(self) -> Any:
        """The Python object `Peer.send_obj` sent.  Of a zero-copy message, its arrays and
        buffers are read-only views of the pool, and `release()` raises BufferError while
        one is alive (objects.py)."""
        return objects.loads(self)


MESSAGE_TYPES = tuple(MessageType)  # indexed by the C type code, cheaper than MessageType(x)
