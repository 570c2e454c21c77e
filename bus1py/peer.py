"""A peer: one endpoint of a bus, usable from any process that holds it.

Invariants:
  - A Peer object is only a name for (bus, slot, id); all its state lives in the segment,
    so pickling it (to a child started with fork or spawn) yields the same peer.
  - The processes that hold a peer are recorded in the segment: the one that created it,
    every one that unpickled it, and a forked child once it uses it.  When the last of them
    exits (or dies, noticed by `Bus.gc`), the peer is disconnected, like a file descriptor
    closed by its last holder.
  - `send` and `recv` are methods in C of the base class PeerCore (csrc/py/peer.c), on
    the bus's frame of this thread (frame.py), so concurrent threads never share buffers;
    the forms and failures they leave to Python are `_send_general`, `_send_failed`,
    `_recv_general` and `_recv_failed` here, which raise every error the API promises.
  - A send refused with EDQUOT is tried once more after dead peers were reaped (at most
    once a second per process and bus): a receiver at its quota may be a peer whose
    processes died.
  - The readiness pipe of `fileno()` belongs to the process that asked for it (ready.py).
  - Batches and zero-copy slices are receive.py's, asyncio is aio.py's: Peer names them.
  - This module needs no Bus class (bus.py imports this one): a peer is made by
    `Bus.peer`, and unpickled by the function its bus names (Bus._restore_peer).
"""
from __future__ import annotations

import errno
import functools
import os
import time
from array import array
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _messages, args, call as _call, fds as _fds, holders, objects, partial, receive, topic as _topic, watch
from ._lib import ffi, lib
from .errors import bus_error
from .message import Message
from .ready import ReadyPipe
from .reserve import Reservation

if TYPE_CHECKING:
    from typing_extensions import Buffer

_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN
_EDQUOT = -errno.EDQUOT
_EPERM = -errno.EPERM
_UNREACHABLE = lib.B1_SEND_UNREACHABLE_ERROR
_send = lib.b1_frame_send
_crecv = _messages.recv  # its Message built in C
_csend_many = _messages.send_many
_send_many = lib.b1_frame_send_many
_lengths = functools.partial(array, "I")  # the lengths as uint32_t, handed to C without a per-item conversion
assert array("I").itemsize == ffi.sizeof("uint32_t")


@dataclass(frozen=True)
class PeerInfo:
    """What `Peer.query()` reports: the peer's Lamport clock, its queue (entries,
    committed messages and their bytes), the handles it holds, its quotas, the timestamp
    at the queue's front, messages sent and received, robust-lock recoveries, the pids of
    its holder processes and the descriptors in flight to it against `quota_fds`."""

    id: int
    clock: int
    queued_entries: int
    queued_messages: int
    queued_bytes: int
    held_handles: int
    quota_messages: int
    quota_bytes: int
    quota_handles: int
    front_ts: int
    sent: int
    received: int
    lock_recoveries: int
    pids: tuple = ()
    n_fds: int = 0       # descriptors in flight to it, not yet received
    quota_fds: int = 0
    chargers: int = 0    # shares of its quotas held by senders (fair shares, SPEC.md)
    shares: dict = field(default_factory=dict)  # share -> (messages, bytes, fds, handles), held ones

    def share_of(self, sender_id: int) -> tuple:
        """(messages, bytes, fds, handles) of this peer's quotas that the share of the
        sender with id `sender_id` holds (senders whose ids agree mod 16 hold one share)."""
        return self.shares.get(sender_id % 16, (0, 0, 0, 0))

    @classmethod
    def from_c(cls, out: Any) -> PeerInfo:
        return cls(id=out.id, clock=out.clock, queued_entries=out.n_entries,
                   queued_messages=out.n_messages, queued_bytes=out.n_bytes,
                   held_handles=out.n_handles, quota_messages=out.quota_messages,
                   quota_bytes=out.quota_bytes, quota_handles=out.quota_handles,
                   front_ts=out.front_ts, sent=out.sent, received=out.received,
                   lock_recoveries=out.lock_recoveries, pids=tuple(p for p in out.pids if p),
                   n_fds=out.n_fds, quota_fds=out.quota_fds, chargers=out.n_chargers,
                   shares={i: (out.share_messages[i], out.share_bytes[i], out.share_fds[i],
                               out.share_handles[i])
                           for i in range(16) if out.share_messages[i] or out.share_handles[i]})


class Peer(_messages.PeerCore):
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

    @property
    def id(self) -> int:
        """The peer's id on its bus (never reused while the bus exists)."""
        return self._id

    @property
    def bus(self) -> Any:
        """The Bus this peer is on."""
        return self._bus

    def __reduce__(self) -> tuple[Any, ...]:
        bus = self._bus
        return (bus._restore_peer, (bus.name, self._slot, self._id, bus._open_args))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Peer) and (self._bus.name, self._id) == (other._bus.name, other._id)

    def __hash__(self) -> int:
        return hash((self._bus.name, self._id))

    def __repr__(self) -> str:
        return f"<bus1py.Peer {self._id} on {self._bus.name!r}>"

    def _attach(self):
        """Record this process as a holder of the peer (once per process)."""
        if self._attached is None:
            raise ValueError(f"peer {self._id} is closed in this process")
        r = lib.b1_peer_attach(self._bus.base(), self._slot, self._id, os.getpid())
        self._attached = True
        watch.ensure(self._bus)  # a fork child's own watcher (watch.py)
        try:
            _fds.ensure(self)  # its descriptor store (fds.py)
        except OSError:
            # not set up (out of descriptors...): tried again at this peer's next call here
            # and by the watcher; a receive that needs it raises why (_recv_slow)
            self._attached = not _fds.missing(self)
        if r == 0:
            holders.held[(self._bus.name, self._slot, self._id)] = self
            holders.register_exit_hook()

    def _frame(self):
        """This thread's frame of the bus (Bus.scratch), this process a holder of the peer:
        what each call that passes buffers to C starts with (send and recv inline it for
        their one-message forms)."""
        try:
            frame = self._bus._tls.frame
        except AttributeError:
            frame = self._bus.scratch()  # raises: closed
        if not self._attached:
            self._attach()
        return frame

    # ---- nodes and handles ----

    def create_node(self) -> int:
        """A new node owned by this peer; returns the owner's handle id.  ENOSPC when the
        bus's node or handle table is full, EDQUOT past this peer's quota_handles,
        ESHUTDOWN (BrokenPipeError) once the peer is disconnected."""
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_node_create(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"creating a node on peer {self._id}")
        return out[0]

    def transfer(self, handle: int, other: "Peer") -> int:
        """Give `other` a handle to the node behind `handle`; returns other's handle id.

        A peer holds at most one handle per node: transferring again returns the same id
        and counts one more reference.  ENXIO when `handle` is not this peer's, ESTALE when
        its node is destroyed, EDQUOT past other's quota_handles, ENOSPC when the handle
        table is full, ESHUTDOWN when either peer is disconnected; ValueError for a peer of
        another bus, TypeError for a handle that is not an int.
        """
        if not isinstance(other, Peer) or other._bus.name != self._bus.name:
            raise ValueError(f"transfer target must be a Peer of bus {self._bus.name!r}, not {other!r}")
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_handle_transfer(self._bus.base(), self._slot, self._id, handle,
                                   other._slot, other._id, out)
        if r:
            raise bus_error(r, f"transferring handle {handle} of peer {self._id} to peer {other._id}")
        return out[0]

    def release(self, handle: int) -> None:
        """Drop one reference to `handle`.  The owner of the node gets NODE_RELEASE when
        the last reference other than its own goes; releasing the owner's last reference
        to a live node fails with EBUSY.  ENXIO when `handle` is not this peer's."""
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        r = lib.b1_handle_release(self._bus.base(), self._slot, self._id, handle)
        if r:
            raise bus_error(r, f"releasing handle {handle} of peer {self._id}")

    def destroy(self, *handles: int, release: bool = False) -> tuple[int, int, int]:
        """Destroy the nodes behind these owner handles, in one transaction with one
        destruction timestamp: the owner and every holder get NODE_DESTROY, each with its
        own handle id.  With release=True one reference of each owner handle is released
        as well (bus1's NODES_DESTROY_FLAG_RELEASE_HANDLES): an owner that holds more,
        e.g. from its handle carried back to it, releases the rest one by one.
        Returns the destruction's stamp (timestamp, owner id, sequence), like `send`."""
        if not handles:
            raise bus_error(errno.EINVAL, "destroy needs at least one handle")
        for h in handles:
            args.check_handle(h, "handle")
        if not self._attached:
            self._attach()
        arr, stamp = ffi.new("uint64_t[]", handles), ffi.new("uint64_t[2]")
        r = lib.b1_destroy(self._bus.base(), self._slot, self._id, arr, len(handles), bool(release), stamp)
        if r:
            raise bus_error(r, f"peer {self._id} destroying {handles!r}")
        return (stamp[0], self._id, stamp[1])

    # ---- well-known names ----

    def publish(self, name: str, handle: int) -> None:
        """Register the node behind `handle` (an owner handle of this peer) under `name`,
        for any process on the bus to find with `lookup`.  The name goes when it is
        unpublished, when the node is destroyed or when this peer disconnects.
        EEXIST if a live node has the name, EREMOTE if this peer does not own the node,
        ESTALE if it is destroyed, EINVAL for a bad name (empty, over 255 UTF-8 bytes, a
        NUL), ENOSPC when the bus's max_names are taken.  Names find services; they are
        no security boundary (anyone who may open the bus may use them)."""
        raw = _name_bytes(name)
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        r = lib.b1_name_publish(self._bus.base(), self._slot, self._id, handle, raw, len(raw))
        if r:
            raise bus_error(r, f"peer {self._id} publishing {name!r} for handle {handle}")

    def lookup(self, name: str) -> int:
        """This peer's own handle to the node published as `name`, one more reference
        counted as `transfer` counts (release it when done).  ENOENT (FileNotFoundError)
        when no live node has the name."""
        raw = _name_bytes(name)
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_name_lookup(self._bus.base(), self._slot, self._id, raw, len(raw), out)
        if r == -errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, f"no live node is published as {name!r} on bus {self._bus.name!r}")
        if r:
            raise bus_error(r, f"peer {self._id} looking up {name!r}")
        return out[0]

    def unpublish(self, name: str) -> None:
        """Remove `name`, which must name a node this peer owns (EREMOTE otherwise,
        ENOENT if no live node has it)."""
        raw = _name_bytes(name)
        if not self._attached:
            self._attach()
        r = lib.b1_name_unpublish(self._bus.base(), self._slot, self._id, raw, len(raw))
        if r:
            raise bus_error(r, f"peer {self._id} unpublishing {name!r}")

    # ---- messages ----

    @args.api_name("Peer.send")
    def _send_general(self, destinations, payload, handles=(), *, fds=(), unreachable_error: bool = False) -> tuple:
        """`send` in every form (its docstring is PeerCore.send's): what the C method does
        not take itself, with every check and error of the API."""
        if fds or type(fds) is not tuple:  # () is the default; anything else is checked
            with _fds.named(fds):
                return self._send_general(destinations, payload, handles, unreachable_error=unreachable_error)
        bus = self._bus
        flags = _UNREACHABLE if unreachable_error else 0
        frame = self._frame()  # raises: closed
        if type(payload) is not bytes:
            payload = args.as_bytes(payload)
        try:
            dest, n = args.destinations(destinations, frame.dests, bus.limits.max_dests)
            nh = args.fill(frame.handles, handles, bus.limits.max_msg_handles, "handles") if handles else 0
            ts = _send(frame.c, self._slot, self._id, dest, n, payload, len(payload), nh, flags)
        except (TypeError, OverflowError):  # cffi's words for a bad id: say it for the user
            raise args.bad_ids(destinations, handles) from None
        if ts < 0:
            ts = _reap_and_retry(bus, ts, _send, frame.c, self._slot, self._id, dest, n, payload,
                                 len(payload), nh, flags)
            if ts < 0:
                raise args.send_error(self, ts, destinations, len(payload), n or 1, nh)
        return (ts, self._id, frame.seq[0])

    @args.api_name("Peer.recv")
    def _recv_general(self, timeout: float | None = None, copy: bool = True, *, node=None) -> Message:
        """`recv` in every form (its docstring is PeerCore.recv's): what the C method does
        not take itself, with every check and error of the API."""
        if node is not None:
            return self._recv_node(node, timeout, copy)
        if not copy:
            if timeout is None:
                return receive.recv_slice(self, -1, None)
            if type(timeout) in (int, float) and timeout >= 0:
                return receive.recv_slice(self, args.timeout_ns(timeout), timeout)
            return self.recv_many(1, timeout, copy=False)[0]  # raises the timeout's error
        addr = self._frame().address  # raises: closed
        if timeout is None:
            m = _crecv(addr, self._slot, self._id, -1, self)
        elif type(timeout) in (int, float) and timeout >= 0:
            m = _crecv(addr, self._slot, self._id, args.timeout_ns(timeout), self)
        elif type(timeout) in (int, float) and timeout < 0:
            raise ValueError(f"timeout must be None or >= 0, not {timeout!r}")
        else:
            raise TypeError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
        if type(m) is int:
            m = self._recv_slow(m, timeout)
        if self._ready is not None:
            self._ready.sync()
        return m

    def _recv_node(self, node, timeout, copy) -> Message:
        """recv(node=h): the first message addressed to this peer's handle `h` (data or a
        notice of its node), in queue order; the messages for other nodes stay queued."""
        _call.check_call(node, timeout)
        if copy is not True:
            raise ValueError("recv(node=...) copies the payload: copy=False is not supported with node")
        return _call.wait(self, node, 0, _call._ANY_TAG, timeout)

    def _recv_node_failed(self, r, node, timeout) -> Message:
        """PeerCore.recv(node=) failed with -errno `r`: EINTR (its Python handler has run)
        waits out the time the C helper says is left; anything else is raised."""
        if r != _EINTR:
            raise args.recv_error(self, r, timeout)
        if timeout is None:
            return _call.wait(self, node, 0, _call._ANY_TAG, None)
        left = self._bus.scratch().c.info.left_ns / 1e9
        try:
            return _call.wait(self, node, 0, _call._ANY_TAG, left)
        except BlockingIOError:  # the deadline passed while the handler ran
            raise args.recv_error(self, -errno.ETIMEDOUT, timeout) from None

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

    def _send_reply(self, handle, tag, payload, handles, fds) -> None:
        """Message.reply (call.py), with a send's retry after reaping."""
        _call.reply(self, handle, tag, payload, handles, fds, _reap_and_retry)

    def send_many(self, destinations: int | Iterable[int], payloads: Iterable[Buffer],
                  handles: Iterable[int] = (), *, fds: Iterable[int] = (), unreachable_error: bool = False) -> int:
        """Send each of `payloads` to the same `destinations`, in one C call: one
        transaction per payload, each with its own stamp, exactly as a loop of
        `send(destinations, payload, handles)` in order would (`handles` are carried by
        every message).

        Stops at the first failure and returns how many were sent; when the first payload
        already fails, raises that failure (the errors of `send`) with nothing sent.  A
        caller that gets fewer than len(payloads) retries the rest, typically after the
        receiver drained its queue (EDQUOT or EXFULL would be the next error).  `fds`, like
        `handles`, are carried by every message (each its own copies).
        """
        if fds or type(fds) is not tuple:  # () is the default; anything else is checked
            with _fds.named(fds):
                return self.send_many(destinations, payloads, handles, unreachable_error=unreachable_error)
        bus = self._bus
        frame = self._frame()  # raises: closed
        if type(payloads) is not list and type(payloads) is not tuple:
            if isinstance(payloads, (bytes, bytearray, memoryview, str)):
                raise TypeError("payloads must be a sequence of bytes-like payloads, not one payload")
            payloads = list(payloads)
        if not payloads:
            return 0
        flags = _UNREACHABLE if unreachable_error else 0
        try:
            dest, n = args.destinations(destinations, frame.dests, bus.limits.max_dests)
            nh = args.fill(frame.handles, handles, bus.limits.max_msg_handles, "handles") if handles else 0
        except (TypeError, OverflowError):
            raise args.bad_ids(destinations, handles) from None
        # payloads all bytes: sent from where they are, in one call into C
        r = _csend_many(frame.address, self._slot, self._id, dest, n, payloads, nh, flags)
        if r is not None:
            if r < 0:
                r = _reap_and_retry(bus, r, _csend_many, frame.address, self._slot, self._id, dest, n,
                                    payloads, nh, flags)
            if r < 0:
                raise args.send_error(self, r, destinations, memoryview(payloads[0]).nbytes, n or 1, nh)
            return r
        try:
            data = b"".join(payloads)
            lens = _lengths(map(len, payloads))
        except TypeError:
            data = None
        if data is None or len(data) != sum(lens):  # str, non-buffers, or items of >1 byte
            copies = [args.as_bytes(p) for p in payloads]
            data, lens = b"".join(copies), _lengths(map(len, copies))
        arr = ffi.from_buffer("uint32_t[]", lens)
        r = _send_many(frame.c, self._slot, self._id, dest, n, data, arr, len(lens), nh, flags)
        if r < 0:
            r = _reap_and_retry(bus, r, _send_many, frame.c, self._slot, self._id, dest, n, data, arr,
                                len(lens), nh, flags)
        if r < 0:
            raise args.send_error(self, r, destinations, lens[0], n or 1, nh)
        return r

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

    def recv_many(self, max_messages: int, timeout: float | None = None, copy: bool = True) -> list[Message]:
        """Up to `max_messages` messages, in one C call and one hold of the queue's lock:
        the committed messages at the front of the queue, in queue order, as that many
        `recv` calls would return them.  Waits only while none is there, with `recv`'s
        timeout rules (None, 0: BlockingIOError, seconds: TimeoutError); never returns an
        empty list.  Fewer are returned when the copied payloads would overflow this
        thread's receive buffer (max_payload bytes together).  copy=False as in `recv`."""
        if type(max_messages) is not int or max_messages < 1:
            raise ValueError(f"max_messages must be an int >= 1, not {max_messages!r}")
        if timeout is None:
            ns = -1
        elif type(timeout) in (int, float) and timeout >= 0:
            ns = args.timeout_ns(timeout)
        elif type(timeout) in (int, float):
            raise ValueError(f"timeout must be None or >= 0, not {timeout!r}")
        else:
            raise TypeError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
        return receive.recv_many(self, max_messages, ns, copy, timeout)

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

    def _send_failed(self, r, destinations, payload: bytes) -> tuple:
        """PeerCore.send of `payload` (no handles, no flags) failed with -errno `r`: once
        more after reaping (EDQUOT), else its error."""
        r = _reap_and_retry(self._bus, r, self._send_general, destinations, payload)
        if type(r) is int:
            n = 1 if type(destinations) is int else len(destinations)
            raise args.send_error(self, r, destinations, len(payload), n, 0)
        return r

    def _recv_failed(self, r, timeout, copy: bool) -> Message:
        """PeerCore.recv failed with -errno `r`: EINTR waits out the time left, anything
        else is raised (as the Python forms do)."""
        if copy:
            return self._recv_slow(r, timeout)
        frame = self._bus.scratch()
        ns = -1 if timeout is None else args.timeout_ns(timeout)
        return receive.retry(self, r, frame, 1, ns, lib.B1_RECV_NOCOPY, frame.held, timeout)[0]

    def _recv_slow(self, r, timeout) -> Message:
        """A receive interrupted by a signal (EINTR: its Python handler has run by now, so
        wait out the time the C helper says is left), one that met descriptors without
        this process's store (EPERM: set up now, or its error raised), or an error to raise."""
        frame = self._bus.scratch()
        addr = frame.address
        store_tried = False
        while type(r) is int:
            if r == _EPERM and not store_tried:
                store_tried = True
                _fds.ensure(self)  # raises what keeps it from being set up
                r = _crecv(addr, self._slot, self._id, -1 if timeout is None else args.timeout_ns(timeout), self)
                continue
            if r != _EINTR:
                raise args.recv_error(self, r, timeout)
            ns = -1 if timeout is None else frame.c.info.left_ns
            if ns == 0:  # the deadline passed while the handler ran: one last look
                r = _crecv(addr, self._slot, self._id, 0, self)
                if r == _EAGAIN:
                    r = -errno.ETIMEDOUT
                continue
            r = _crecv(addr, self._slot, self._id, ns, self)
        return r

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

    def _check_open(self) -> None:
        """ValueError when this Peer object or its bus is closed in this process."""
        if self._attached is None:
            raise ValueError(f"peer {self._id} is closed in this process")
        self._bus.base()  # raises: closed

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


def _name_bytes(name) -> bytes:
    """A well-known name as the C helper takes it: 1 to 255 UTF-8 bytes, no NUL; else
    OSError EINVAL with the reason."""
    if not isinstance(name, str):
        raise bus_error(errno.EINVAL, f"a name is a str, not {type(name).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise bus_error(errno.EINVAL, f"name {name!r} is not valid UTF-8 text") from None
    if not 1 <= len(raw) <= lib.B1_NAME_MAX or b"\0" in raw:
        raise bus_error(errno.EINVAL, f"name {name!r} must be 1 to {lib.B1_NAME_MAX} UTF-8 bytes "
                                      "without NUL")
    return raw


def send(peer: Peer, destinations: int | Iterable[int], payload: Buffer, handles: Iterable[int] = (),
         **flags: Any) -> tuple[int, int, int]:
    """`peer.send(destinations, payload, handles)` as a function."""
    return peer.send(destinations, payload, handles, **flags)


_last_reap: dict[str, float] = {}  # bus name -> monotonic time of this process's last reaping


def _reap_and_retry(bus, r, send, *call):
    """`send(*call)` once more when its result `r` was EDQUOT and reaping the bus's dead
    peers freed one (at most once a second per process: it reads /proc); else `r`."""
    if r != _EDQUOT:
        return r
    now = time.monotonic()
    if now - _last_reap.get(bus.name, -1.0) < 1.0:
        return r
    _last_reap[bus.name] = now
    if bus.gc()["peers_reaped"] == 0:
        return r
    return send(*call)
