"""A peer: one endpoint of a bus, usable from any process that holds it.

Invariants:
  - A Peer object is only a name for (bus, slot, id); all its state lives in the segment,
    so pickling it (to a child started with fork or spawn) yields the same peer.
  - `send` and `recv` are one C call each; the Python side only converts arguments, using
    per-thread scratch buffers of the bus, so concurrent threads never share one.
  - The readiness pipe of `fileno()` belongs to the process that asked for it: it is
    readable while a committed message is at the front of the queue, kept so by a watcher
    thread that sleeps on the queue's futex between changes.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from dataclasses import dataclass

from ._b1 import ffi, lib
from .bus import Bus
from .errors import bus_error
from .message import MESSAGE_TYPES, Message

_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN


@dataclass(frozen=True)
class PeerInfo:
    """What `Peer.query()` reports: clock, queue depth, and quota use against limits."""

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


class Peer:
    __slots__ = ("_bus", "_slot", "_id", "_ready", "__weakref__")

    def __init__(self, bus: Bus, slot: int, peer_id: int):
        self._bus = bus
        self._slot = slot
        self._id = peer_id
        self._ready = None

    @property
    def id(self) -> int:
        return self._id

    @property
    def bus(self) -> Bus:
        return self._bus

    def __reduce__(self):
        return (_restore, (self._bus.name, self._slot, self._id))

    def __eq__(self, other):
        return isinstance(other, Peer) and (self._bus.name, self._id) == (other._bus.name, other._id)

    def __hash__(self):
        return hash((self._bus.name, self._id))

    def __repr__(self):
        return f"<bus1py.Peer {self._id} on {self._bus.name!r}>"

    # ---- nodes and handles ----

    def create_node(self) -> int:
        """A new node owned by this peer; returns the owner's handle id."""
        out = ffi.new("uint64_t *")
        r = lib.b1_node_create(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"creating a node on peer {self._id}")
        return out[0]

    def transfer(self, handle: int, other: "Peer") -> int:
        """Give `other` a handle to the node behind `handle`; returns other's handle id.

        A peer holds at most one handle per node: transferring again returns the same id
        and counts one more reference.
        """
        if not isinstance(other, Peer) or other._bus.name != self._bus.name:
            raise ValueError(f"transfer target must be a Peer of bus {self._bus.name!r}, not {other!r}")
        _check_handle(handle, "handle")
        out = ffi.new("uint64_t *")
        r = lib.b1_handle_transfer(self._bus.base(), self._slot, self._id, handle,
                                   other._slot, other._id, out)
        if r:
            raise bus_error(r, f"transferring handle {handle} of peer {self._id} to peer {other._id}")
        return out[0]

    # ---- messages ----

    def send(self, destinations, payload, handles=()) -> tuple:
        """Send `payload` to every node in `destinations` (handle ids) in one transaction.

        Returns the message's stamp (timestamp, sender id, sequence).  Never blocks; raises
        with nothing sent when a handle is unknown (ENXIO), the payload too large
        (EMSGSIZE) or the pool full (EXFULL).
        """
        bus = self._bus
        base = bus._base
        if base is None:
            bus.base()  # raises: closed
        if handles:
            raise bus_error(errno.EOPNOTSUPP, "carrying handles in messages is not supported yet")
        dests, stamp, _, _ = bus.scratch()
        if type(destinations) is int:
            dests[0] = destinations
            n = 1
        else:
            n = len(destinations)
            if n > bus.limits.max_dests:
                raise bus_error(errno.EINVAL, f"{n} destinations, more than max_dests={bus.limits.max_dests}")
            try:
                dests[0:n] = destinations
            except (TypeError, OverflowError):
                raise TypeError(f"destinations must be handle ids (ints >= 0), not {destinations!r}") from None
        if type(payload) is not bytes:
            payload = _as_bytes(payload)
        r = lib.b1_send(base, self._slot, self._id, dests, n, payload, len(payload), stamp)
        if r:
            raise self._send_error(r, destinations, len(payload), n)
        return (stamp[0], stamp[1], stamp[2])

    def recv(self, timeout: float | None = None) -> Message:
        """The next message: waits for one (None), fails at once (0, BlockingIOError), or
        waits at most `timeout` seconds (TimeoutError)."""
        bus = self._bus
        base = bus._base
        if base is None:
            bus.base()
        _, _, info, buf = bus.scratch()
        if timeout is None:
            ns, deadline = -1, None
        else:
            if timeout < 0:
                raise ValueError(f"timeout must be None or >= 0, not {timeout!r}")
            ns = int(timeout * 1e9)
            deadline = time.monotonic() + timeout
        buflen = bus.limits.max_payload
        while True:
            r = lib.b1_recv_wait(base, self._slot, self._id, info, buf, buflen, ns)
            if r == 0:
                break
            if r != _EINTR:
                raise self._recv_error(r, timeout)
            # a signal arrived: its Python handler runs now; then wait out the rest
            if deadline is not None:
                ns = max(0, int((deadline - time.monotonic()) * 1e9))
        return Message(MESSAGE_TYPES[info.type], info.destination, ffi.unpack(buf, info.len),
                       (), (info.ts, info.sender, info.seq))

    def query(self) -> PeerInfo:
        out = ffi.new("struct b1_peer_info *")
        r = lib.b1_peer_query(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"peer {self._id}")
        return PeerInfo(id=out.id, clock=out.clock, queued_entries=out.n_entries,
                        queued_messages=out.n_messages, queued_bytes=out.n_bytes,
                        held_handles=out.n_handles, quota_messages=out.quota_messages,
                        quota_bytes=out.quota_bytes, quota_handles=out.quota_handles,
                        front_ts=out.front_ts, sent=out.sent, received=out.received,
                        lock_recoveries=out.lock_recoveries)

    def disconnect(self) -> None:
        """Disconnect the peer for every process: its queue is flushed and later calls
        raise ESHUTDOWN (BrokenPipeError)."""
        r = lib.b1_peer_disconnect(self._bus.base(), self._slot, self._id)
        if r:
            raise bus_error(r, f"peer {self._id}")

    def fileno(self) -> int:
        """A file descriptor readable while a committed message is at the front of the
        queue (for select, poll, selectors and asyncio's add_reader)."""
        ready = self._ready
        if ready is None or ready.pid != os.getpid():
            ready = self._ready = _ReadyPipe(self)
        return ready.read_fd

    # ---- errors ----

    def _send_error(self, r, destinations, length, n):
        code = -r
        if code == errno.ENXIO:
            return bus_error(r, f"peer {self._id} holds no handle {destinations!r}")
        if code == errno.EMSGSIZE:
            return bus_error(r, f"payload of {length} bytes exceeds max_payload={self._bus.limits.max_payload}")
        if code == errno.EXFULL:
            return bus_error(r, f"no room for {n} cop{'y' if n == 1 else 'ies'} of {length} bytes "
                                f"(pool_size={self._bus.limits.pool_size}, max_entries={self._bus.limits.max_entries})")
        if code == errno.EINVAL and n == 0:
            return bus_error(r, "no destinations")
        return bus_error(r, f"peer {self._id} sending to {destinations!r}")

    def _recv_error(self, r, timeout):
        if r == _EAGAIN:
            return bus_error(r, f"peer {self._id} has no committed message at its front")
        if r == -errno.ETIMEDOUT:
            return bus_error(r, f"no message for peer {self._id} within {timeout} s")
        return bus_error(r, f"peer {self._id}")


def send(peer: Peer, destinations, payload, handles=()) -> tuple:
    """`peer.send(destinations, payload, handles)` as a function."""
    return peer.send(destinations, payload, handles)


def _restore(bus_name: str, slot: int, peer_id: int) -> Peer:
    return Peer(Bus.attach(bus_name), slot, peer_id)


def _check_handle(handle, what):
    if type(handle) is not int or handle < 0:
        raise TypeError(f"{what} must be a handle id (int >= 0), not {handle!r}")


def _as_bytes(payload) -> bytes:
    if isinstance(payload, str):
        raise TypeError("payload must be bytes-like, not str (encode it first)")
    try:
        return bytes(memoryview(payload).cast("B"))
    except TypeError:
        raise TypeError(f"payload must be bytes-like, not {type(payload).__name__}") from None


class _ReadyPipe:
    """A pipe kept readable exactly while the peer's front entry is committed."""

    def __init__(self, peer: Peer):
        self.pid = os.getpid()
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._peer = peer
        threading.Thread(target=self._watch, name=f"bus1py-ready-{peer.id}", daemon=True).start()

    def _watch(self):
        peer, full = self._peer, False
        bus, slot, pid = peer._bus, peer._slot, peer._id
        # our own export of the mapping: while it exists Bus.close() cannot unmap it
        try:
            base = ffi.from_buffer(bus._mmap)
        except ValueError:
            return
        try:
            self._loop(bus, base, slot, pid)
        finally:
            ffi.release(base)

    def _loop(self, bus, base, slot, pid):
        full = False
        while bus._base is not None:
            seen = lib.b1_peer_wake_seq(base, slot)
            ready = lib.b1_peer_ready(base, slot, pid)
            if ready < 0:  # disconnected: stay readable so the reader's recv reports it
                if not full:
                    os.write(self._write_fd, b"!")
                return
            if ready and not full:
                os.write(self._write_fd, b"!")
                full = True
            elif not ready and full:
                try:
                    os.read(self.read_fd, 1)
                except BlockingIOError:
                    pass
                full = False
            lib.b1_peer_wait_change(base, slot, seen, 500_000_000)
