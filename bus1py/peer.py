"""A peer: one endpoint of a bus, usable from any process that holds it.

Invariants:
  - A Peer object is only a name for (bus, slot, id); all its state lives in the segment,
    so pickling it (to a child started with fork or spawn) yields the same peer.
  - The processes that hold a peer are recorded in the segment: the one that created it,
    every one that unpickled it, and a forked child once it uses it (peerbase.py).  When
    the last of them exits (or dies, noticed by `Bus.gc`), the peer is disconnected, like
    a file descriptor closed by its last holder.
  - `send` and `recv` are methods in C of the base class PeerCore (csrc/py/peer.c), on
    the bus's frame of this thread (frame.py), so concurrent threads never share buffers;
    the forms and failures they leave to Python are sending.py's and receiving.py's.
  - Peer is the API and one class: its calls are gathered from one module per concept
    (nodes.py: nodes, handles, names; sending.py; receiving.py), each a PeerBase that
    adds no slot; this module keeps the peer's lifetime (close, disconnect, reset) and
    names the rest (calls, topics, partial multicast, zero-copy, objects, asyncio).
  - The readiness pipe of `fileno()` belongs to the process that asked for it (ready.py).
  - This module needs no Bus class (bus.py imports this one): a peer is made by
    `Bus.peer`, and unpickled by the function its bus names (Bus._restore_peer).
"""
from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from . import call as _call, fds as _fds, holders, objects, partial, topic as _topic
from ._lib import ffi, lib
from .errors import bus_error
from .message import Message
from .nodes import NodeOps
from .peerinfo import PeerInfo
from .ready import ReadyPipe
from .receiving import RecvOps
from .reserve import Reservation
from .sending import SendOps

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Peer", "PeerInfo", "send"]


class Peer(NodeOps, SendOps, RecvOps):
    """One endpoint of a bus: it owns nodes, holds handles to nodes, sends to handles and
    receives from its own queue.  Made by `Bus.peer()`; picklable, so a child process
    started with fork or spawn uses the same peer.

    Handles are this peer's own ids (ints) for nodes: `create_node` makes one it owns,
    `transfer` gives another peer a handle, `lookup` finds a published one.  Every error is
    an OSError with the kernel's errno (module bus1py.errors): ENXIO an unknown handle,
    ESHUTDOWN (BrokenPipeError) a disconnected peer, EDQUOT a receiver over its quota,
    EMSGSIZE a payload over max_payload; a call that fails changes nothing.  ValueError
    once the bus is closed in this process.

    >>> import bus1py
    >>> with bus1py.Bus.create() as bus:
    ...     server, client = bus.peer(), bus.peer()
    ...     node = server.create_node()
    ...     handle = server.transfer(node, client)
    ...     stamp = client.send([handle], b"ping")
    ...     msg = server.recv(timeout=5)
    ...     print(msg.type.name, msg.payload, msg.destination == node)
    DATA b'ping' True
    """

    # _bus, _slot, _id, _ready and _attached are PeerCore's
    __slots__ = ("__weakref__",)

    def __init__(self, bus: Any, slot: int, peer_id: int) -> None:
        super().__init__(bus, slot, peer_id)  # _bus, _slot, _id; not _attached, no _ready
        holders.peers.add(self)

    def __reduce__(self) -> tuple[Any, ...]:
        bus = self._bus
        return (bus._restore_peer, (bus.name, self._slot, self._id, bus._open_args))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Peer) and (self._bus.name, self._id) == (other._bus.name, other._id)

    def __hash__(self) -> int:
        return hash((self._bus.name, self._id))

    def __repr__(self) -> str:
        return f"<bus1py.Peer {self._id} on {self._bus.name!r}>"

    def call(self, handle: int, payload, *, timeout: float | None = None, handles=(), fds=()) -> Message:
        """Send `payload` (with `handles` and `fds`) as a request to the node behind
        `handle` and return the reply Message (`msg.reply(...)` at the service).  Waits at
        most `timeout` seconds (None: for ever; TimeoutError); ConnectionResetError as soon
        as the node is destroyed or its owner's processes are all dead before replying.
        Messages for other nodes that arrive meanwhile stay queued for `recv`.  Each thread
        (and each `acall`) waits for its own reply (call.py)."""
        return _call.call(self, handle, payload, timeout, handles, fds)

    async def acall(self, handle: int, payload, *, timeout: float | None = None, handles=(), fds=()) -> Message:
        """`call` for asyncio: the request is sent at once, the reply awaited without
        blocking the event loop."""
        return await _call.acall(self, handle, payload, timeout, handles, fds)

    def reserve(self, destinations: int | Iterable[int], length: int, handles: Iterable[int] = (), *,
                fds: Iterable[int] = (), unreachable_error: bool = False) -> Reservation:
        """Zero-copy send: a message of `length` bytes to write in place in the pool before
        it is sent.  `r.payload` is a writable memoryview of it; `r.commit()` sends it as
        `send(destinations, <those bytes>, handles, fds=fds)` would at that moment and returns the
        stamp, `r.abort()` gives it back; as a context manager it commits unless the block
        raises.  Raises send's errors when the record cannot be taken (reserve.py)."""
        return Reservation(self, destinations, length, handles, fds=fds, unreachable_error=unreachable_error)

    def send_partial(self, destinations, payload, handles=(), *, fds=()) -> tuple:
        """bus1's SEND_FLAG_CONTINUE: `(stamp, errors)`, one transaction (one stamp)
        delivered to every destination that can take it; `errors` maps each destination
        that could not to its errno (EDQUOT: over its quota or this sender's share of it).
        `stamp` is None when none took it.  A destroyed destination is dropped as `send`
        drops it; what fails for the whole send raises `send`'s error, nothing sent.
        `send` stays all-or-nothing (partial.py)."""
        return partial.send_partial(self, destinations, payload, handles, fds)

    def topic(self, name: str) -> "_topic.Topic":
        """Publish a topic under the bus name `name`: `t.send(payload, *, handles=(),
        fds=())` multicasts to every subscriber in one transaction and returns how many
        took it; `t.subscribers` counts them; `t.close()` ends it (topic.py)."""
        return _topic.Topic(self, name)

    def subscribe(self, name: str) -> "_topic.Subscription":
        """Subscribe to the topic published as `name`: its messages arrive as DATA with
        `msg.destination == sub.handle`, read with `sub.recv(timeout)`, by iteration,
        `await sub.arecv()`, or this peer's plain `recv`; `sub.missed` counts those missed
        over this peer's quota; `sub.close()` unsubscribes (topic.py)."""
        return _topic.Subscription(self, name)

    def send_obj(self, destinations: int | Iterable[int], obj: object, handles: Iterable[int] = (), *,
                 unreachable_error: bool = False) -> tuple[int, int, int]:
        """Send a Python object, pickled with protocol 5, its out-of-band buffers (numpy
        arrays, bytearrays) written straight into the pool record; as `send` otherwise
        (stamp, errors).  An object that cannot be pickled raises TypeError, nothing sent.
        The receiver rebuilds it with `msg.obj()` (objects.py)."""
        return objects.send_obj(self, destinations, obj, handles, unreachable_error)

    async def arecv(self, timeout: float | None = None, copy: bool = True) -> Message:
        """`recv` for asyncio: waits on the running loop's reader for `fileno()`, never in
        the C helper.  Cancelling it leaves the queue as it was: a message is taken only by
        the non-blocking receive that returns it."""
        from . import aio
        return await aio.arecv(self, timeout, copy)

    def messages(self, copy: bool = True) -> AsyncIterator[Message]:
        """`async for msg in peer.messages()`: every message as it arrives (`arecv`), until
        the peer is disconnected."""
        from . import aio
        return aio.messages(self, copy)

    def query(self) -> PeerInfo:
        """The peer's clock, queue depth and quota use (PeerInfo); ESHUTDOWN once
        disconnected."""
        self._check_open()
        out = ffi.new("struct b1_peer_info *")
        r = lib.b1_peer_query(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"peer {self._id}")
        return PeerInfo.from_c(out)

    def disconnect(self) -> None:
        """Disconnect the peer for every process: its nodes are destroyed in one
        transaction, its handles released, its queue flushed; later calls raise ESHUTDOWN
        (BrokenPipeError).  Messages it already sent stay valid."""
        self._check_open()
        r = lib.b1_peer_disconnect(self._bus.base(), self._slot, self._id)
        _call.forget(self)
        holders.held.pop((self._bus.name, self._slot, self._id), None)
        _fds.forget(self)  # the descriptors of messages it never received close with it
        if r:
            raise bus_error(r, f"peer {self._id}")

    def reset(self) -> None:
        """bus1's PEER_RESET: destroy every node of this peer in one transaction (their
        holders get NODE_DESTROY; this peer gets none), drop every committed message in its
        queue, and release every handle reference it holds (their owners get NODE_RELEASE
        as usual).  The peer stays connected, with its id, quotas and clock; messages
        still in flight to it arrive after the reset (those to its destroyed nodes are
        dropped).  Zero-copy messages already received stay valid until released.
        EBUSY while another live process resets it; a reset cut short by the death of
        its process is finished by gc (csrc/bus/reset.c)."""
        if not self._attached:
            self._attach()
        r = lib.b1_peer_reset(self._bus.base(), self._slot, self._id)
        if r:
            raise bus_error(r, f"resetting peer {self._id}")
        _call.forget(self)
        _fds.sweep(self)  # the descriptors of the messages it dropped
        if self._ready is not None:
            self._ready.sync()

    def close(self) -> None:
        """Leave the peer in this process, as closing a file descriptor does: the last
        process that holds it disconnects it (`disconnect` ends it for every process at
        once).  Every later call on this Peer object raises ValueError; closing again
        does nothing.  `with bus.peer() as p:` closes it at the end of the block."""
        if self._attached is None:
            return
        base = self._bus._base
        if base is not None:
            holders.held.pop((self._bus.name, self._slot, self._id), None)
            if lib.b1_peer_detach(base, self._slot, self._id, os.getpid()) == 0:
                lib.b1_peer_disconnect(base, self._slot, self._id)
                _fds.forget(self)
            _call.forget(self)
        if self._ready is not None:
            self._ready.close()
            self._ready = None
        self._attached = None

    def __enter__(self) -> "Peer":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fileno(self) -> int:
        """A file descriptor readable while a committed message is at the front of the
        queue (for select, poll, selectors and asyncio's add_reader)."""
        if not self._attached:
            self._attach()
        self._bus.base()  # raises: closed
        ready = self._ready
        if ready is None or ready.pid != os.getpid():
            ready = self._ready = ReadyPipe(self)
        return ready.read_fd


def send(peer: Peer, destinations: int | Iterable[int], payload: Buffer, handles: Iterable[int] = (),
         **flags: Any) -> tuple[int, int, int]:
    """`peer.send(destinations, payload, handles)` as a function."""
    return peer.send(destinations, payload, handles, **flags)
