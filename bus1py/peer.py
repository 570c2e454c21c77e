"""A peer: one endpoint of a bus, usable from any process that holds it.

Invariants:
  - A Peer object is only a name for (bus, slot, id); all its state lives in the segment,
    so pickling it (to a child started with fork or spawn) yields the same peer.
  - The processes that hold a peer are recorded in the segment: the one that created it,
    every one that unpickled it, and a forked child once it uses it.  When the last of them
    exits (or dies, noticed by `Bus.gc`), the peer is disconnected, like a file descriptor
    closed by its last holder.
  - `send` and `recv` are one C call each; the Python side only converts arguments, using
    per-thread scratch buffers of the bus, so concurrent threads never share one.
  - The readiness pipe of `fileno()` belongs to the process that asked for it: it is
    readable while a committed message is at the front of the queue, kept so by a watcher
    thread that sleeps on the queue's futex between changes.
"""
from __future__ import annotations

import atexit
import errno
import os
import struct
import threading
import time
import weakref
from dataclasses import dataclass

from ._b1 import ffi, lib
from .bus import Bus
from .errors import bus_error
from .message import HANDLE_INVALID, MESSAGE_TYPES, Message

_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN
_new_message = tuple.__new__  # Message(...) through its generated __new__ costs 3x more
_UNREACHABLE = lib.B1_SEND_UNREACHABLE_ERROR
_send, _recv, _unpack = lib.b1_frame_send, lib.b1_frame_recv, ffi.unpack
_unpack_info = struct.Struct("=8Q").unpack_from  # struct b1_msg_info, all words at once


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
    pids: tuple = ()

    @classmethod
    def from_c(cls, out) -> "PeerInfo":
        return cls(id=out.id, clock=out.clock, queued_entries=out.n_entries,
                   queued_messages=out.n_messages, queued_bytes=out.n_bytes,
                   held_handles=out.n_handles, quota_messages=out.quota_messages,
                   quota_bytes=out.quota_bytes, quota_handles=out.quota_handles,
                   front_ts=out.front_ts, sent=out.sent, received=out.received,
                   lock_recoveries=out.lock_recoveries, pids=tuple(p for p in out.pids if p))


class Peer:
    __slots__ = ("_bus", "_slot", "_id", "_ready", "_attached", "__weakref__")

    def __init__(self, bus: Bus, slot: int, peer_id: int):
        self._bus = bus
        self._slot = slot
        self._id = peer_id
        self._ready = None
        self._attached = False
        _peers.add(self)

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

    def _attach(self):
        """Record this process as a holder of the peer (once per process)."""
        r = lib.b1_peer_attach(self._bus.base(), self._slot, self._id, os.getpid())
        self._attached = True
        if r == 0:
            _held[(self._bus.name, self._slot, self._id)] = self
            _register_exit_hook()

    # ---- nodes and handles ----

    def create_node(self) -> int:
        """A new node owned by this peer; returns the owner's handle id."""
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
        and counts one more reference.
        """
        if not isinstance(other, Peer) or other._bus.name != self._bus.name:
            raise ValueError(f"transfer target must be a Peer of bus {self._bus.name!r}, not {other!r}")
        _check_handle(handle, "handle")
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
        to a live node fails with EBUSY."""
        _check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        r = lib.b1_handle_release(self._bus.base(), self._slot, self._id, handle)
        if r:
            raise bus_error(r, f"releasing handle {handle} of peer {self._id}")

    def destroy(self, *handles: int, release: bool = False) -> tuple:
        """Destroy the nodes behind these owner handles, in one transaction with one
        destruction timestamp: the owner and every holder get NODE_DESTROY, each with its
        own handle id.  With release=True the owner's handles are released as well.
        Returns the destruction's stamp (timestamp, owner id, sequence), like `send`."""
        if not handles:
            raise bus_error(errno.EINVAL, "destroy needs at least one handle")
        for h in handles:
            _check_handle(h, "handle")
        if not self._attached:
            self._attach()
        arr, stamp = ffi.new("uint64_t[]", handles), ffi.new("uint64_t[2]")
        r = lib.b1_destroy(self._bus.base(), self._slot, self._id, arr, len(handles), bool(release), stamp)
        if r:
            raise bus_error(r, f"peer {self._id} destroying {handles!r}")
        return (stamp[0], self._id, stamp[1])

    # ---- messages ----

    def send(self, destinations, payload, handles=(), *, unreachable_error: bool = False) -> tuple:
        """Send `payload` to every node in `destinations` (handle ids) in one transaction,
        carrying `handles` (the sender's handle ids) to every receiver.

        Returns the message's stamp (timestamp, sender id, sequence).  Never blocks; raises
        with nothing sent when a handle is unknown (ENXIO), the payload too large
        (EMSGSIZE), the pool full (EXFULL) or a receiver's quota exhausted (EDQUOT).  A
        message to a destroyed node is silently dropped, as bus1 does; with
        unreachable_error=True the send fails with EHOSTUNREACH instead when the sender has
        already received NODE_DESTROY for every destination.
        """
        bus = self._bus
        try:
            frame, dests, carried, _, _, seq, _ = bus._tls.scratch
        except AttributeError:
            frame, dests, carried, _, _, seq, _ = bus.scratch()  # raises: closed
        if not self._attached:
            self._attach()
        if type(payload) is not bytes:
            payload = _as_bytes(payload)
        flags = _UNREACHABLE if unreachable_error else 0
        try:
            if type(destinations) is int:
                dest, n = destinations, 0  # n == 0: the one destination is `dest`
            elif type(destinations) is list and len(destinations) == 1 and type(destinations[0]) is int:
                dest, n = destinations[0], 0
            else:
                dest, n = 0, _fill(dests, destinations, bus.limits.max_dests, "destinations")
                if n == 0:
                    raise bus_error(-errno.EINVAL, "no destinations")
            nh = _fill(carried, handles, bus.limits.max_msg_handles, "handles") if handles else 0
            ts = _send(frame, self._slot, self._id, dest, n, payload, len(payload), nh, flags)
        except (TypeError, OverflowError):  # cffi's words for a bad id: say it for the user
            raise TypeError(f"destinations and handles must be handle ids (ints >= 0) or "
                            f"sequences of them, not {destinations!r} and {handles!r}") from None
        if ts < 0:
            # a receiver at its quota may be a peer whose processes died: reap and retry once
            if ts == -errno.EDQUOT and _reap_dead(bus):
                ts = _send(frame, self._slot, self._id, dest, n, payload, len(payload), nh, flags)
            if ts < 0:
                raise self._send_error(ts, destinations, len(payload), n or 1, nh)
        return (ts, self._id, seq[0])

    def recv(self, timeout: float | None = None) -> Message:
        """The next message: waits for one (None), fails at once (0, BlockingIOError), or
        waits at most `timeout` seconds (TimeoutError)."""
        bus = self._bus
        try:
            frame, _, handles, info, payload, _, _ = bus._tls.scratch
        except AttributeError:
            frame, _, handles, info, payload, _, _ = bus.scratch()  # raises: closed
        if not self._attached:
            self._attach()
        if timeout is None:
            r = _recv(frame, self._slot, self._id, -1)
        elif type(timeout) in (int, float) and timeout >= 0:
            r = _recv(frame, self._slot, self._id, _timeout_ns(timeout))
        elif type(timeout) in (int, float) and timeout < 0:
            raise ValueError(f"timeout must be None or >= 0, not {timeout!r}")
        else:
            raise TypeError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
        if r:
            self._recv_slow(r, timeout, frame)
        if self._ready is not None:
            self._ready.sync()
        ts, sender, seq, destination, kind, length, nh, _ = _unpack_info(info)
        return _new_message(Message, (MESSAGE_TYPES[kind], destination, payload[:length],
                                      tuple(_unpack(handles, nh)) if nh else (),
                                      (ts, sender, seq)))

    def _recv_slow(self, r, timeout, frame):
        """A receive interrupted by a signal (EINTR: its Python handler has run by now, so
        wait out the time the C helper says is left), or an error to raise."""
        while r:
            if r != _EINTR:
                raise self._recv_error(r, timeout)
            ns = -1 if timeout is None else frame.info.left_ns
            if ns == 0:  # the deadline passed while the handler ran: one last look
                r = _recv(frame, self._slot, self._id, 0)
                if r == _EAGAIN:
                    r = -errno.ETIMEDOUT
                continue
            r = _recv(frame, self._slot, self._id, ns)

    def query(self) -> PeerInfo:
        out = ffi.new("struct b1_peer_info *")
        r = lib.b1_peer_query(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"peer {self._id}")
        return PeerInfo.from_c(out)

    def disconnect(self) -> None:
        """Disconnect the peer for every process: its nodes are destroyed in one
        transaction, its handles released, its queue flushed; later calls raise ESHUTDOWN
        (BrokenPipeError).  Messages it already sent stay valid."""
        r = lib.b1_peer_disconnect(self._bus.base(), self._slot, self._id)
        _held.pop((self._bus.name, self._slot, self._id), None)
        if r:
            raise bus_error(r, f"peer {self._id}")

    def fileno(self) -> int:
        """A file descriptor readable while a committed message is at the front of the
        queue (for select, poll, selectors and asyncio's add_reader)."""
        if not self._attached:
            self._attach()
        ready = self._ready
        if ready is None or ready.pid != os.getpid():
            ready = self._ready = _ReadyPipe(self)
        return ready.read_fd

    # ---- errors ----

    def _send_error(self, r, destinations, length, n, nh):
        code = -r
        limits = self._bus.limits
        if code == errno.ENXIO:
            return bus_error(r, f"peer {self._id} holds no handle among destinations {destinations!r}"
                                f"{' or carried handles' if nh else ''}")
        if code == errno.EMSGSIZE:
            if nh > limits.max_msg_handles:
                return bus_error(r, f"{nh} handles exceed max_msg_handles={limits.max_msg_handles}")
            return bus_error(r, f"payload of {length} bytes exceeds max_payload={limits.max_payload}")
        if code == errno.EXFULL:
            return bus_error(r, f"no room for {n} cop{'y' if n == 1 else 'ies'} of {length} bytes "
                                f"(pool_size={limits.pool_size}, max_entries={limits.max_entries})")
        if code == errno.EDQUOT:
            return bus_error(r, f"a receiver among {destinations!r} is at its quota of queued "
                                f"messages, bytes or handles")
        if code == errno.EHOSTUNREACH:
            return bus_error(r, f"every destination in {destinations!r} is destroyed")
        if code == errno.EINVAL and n == 0:
            return bus_error(r, "no destinations")
        return bus_error(r, f"peer {self._id} sending to {destinations!r}")

    def _recv_error(self, r, timeout):
        if r == _EAGAIN:
            return bus_error(r, f"peer {self._id} has no committed message at its front")
        if r == -errno.ETIMEDOUT:
            return bus_error(r, f"no message for peer {self._id} within {timeout} s")
        return bus_error(r, f"peer {self._id}")


def send(peer: Peer, destinations, payload, handles=(), **flags) -> tuple:
    """`peer.send(destinations, payload, handles)` as a function."""
    return peer.send(destinations, payload, handles, **flags)


def _restore(bus_name: str, slot: int, peer_id: int) -> Peer:
    peer = Peer(Bus.attach(bus_name), slot, peer_id)
    try:
        peer._attach()
    except OSError:
        pass  # disconnected meanwhile: its calls will say so
    return peer


_last_reap = {}  # bus name -> monotonic time of this process's last reaping


def _reap_dead(bus: Bus) -> bool:
    """Reap the bus's dead peers (at most once a second per process: it reads /proc);
    True if any was reaped."""
    now = time.monotonic()
    if now - _last_reap.get(bus.name, -1.0) < 1.0:
        return False
    _last_reap[bus.name] = now
    return bus.gc()["peers_reaped"] > 0


def _timeout_ns(seconds) -> int:
    """Seconds as the C helper's nanoseconds: 0 is non-blocking, any positive time waits at
    least 1 ns, and a time past int64 nanoseconds (292 years, inf) waits forever (-1)."""
    if seconds <= 0:
        return 0
    if seconds >= 9.2e9:
        return -1
    return max(1, int(seconds * 1e9))


def _check_handle(handle, what):
    if type(handle) is not int or handle < 0 or handle >= 1 << 64:
        raise TypeError(f"{what} must be a handle id (an int >= 0), not {handle!r}")


def _fill(array, values, limit, what) -> int:
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


def _as_bytes(payload) -> bytes:
    if isinstance(payload, str):
        raise TypeError("payload must be bytes-like, not str (encode it first)")
    try:
        return memoryview(payload).tobytes()  # any buffer, strided ones too
    except TypeError:
        raise TypeError(f"payload must be bytes-like, not {type(payload).__name__}") from None


# ---- the processes holding peers ----

_peers: "weakref.WeakSet[Peer]" = weakref.WeakSet()  # every Peer object of this process
_held: dict = {}  # (bus name, slot, id) -> Peer this process recorded itself as holding
_exit_pid = [None]


def _after_fork_in_child():
    # the child holds nothing yet: it becomes a holder of a peer when it uses it
    for peer in list(_peers):
        peer._attached = False
        peer._ready = None
    _held.clear()


def _release_held_at_exit():
    """The last process holding a peer disconnects it as it exits."""
    pid = os.getpid()
    if _exit_pid[0] == pid:
        return
    _exit_pid[0] = pid
    for (name, slot, peer_id), peer in list(_held.items()):
        base = peer._bus._base
        if base is None:
            continue
        if lib.b1_peer_detach(base, slot, peer_id, pid) == 0:
            lib.b1_peer_disconnect(base, slot, peer_id)
    _held.clear()


def _register_exit_hook():
    """Once per process: leave as a holder at exit.  Lazily, at the first attach, because a
    multiprocessing child clears the finalizers it inherited before running its target,
    and leaves through os._exit after running its own (so atexit alone would not do)."""
    pid = os.getpid()
    if _exit_hook_pid[0] == pid:
        return
    _exit_hook_pid[0] = pid
    atexit.register(_release_held_at_exit)
    try:
        from multiprocessing import util as mp_util
    except ImportError:  # pragma: no cover
        return
    mp_util.Finalize(None, _release_held_at_exit, exitpriority=100)


_exit_hook_pid = [None]
os.register_at_fork(after_in_child=_after_fork_in_child)


class _ReadyPipe:
    """A pipe kept readable exactly while the peer's front entry is committed.

    A watcher thread follows changes made by other processes; a receive in this process
    re-syncs the pipe at once (`sync`), so select never sees readiness this process itself
    has just consumed.  Another process taking the message can leave the pipe readable for
    the moment the watcher needs to wake: a reader then gets EAGAIN, as with any shared fd.
    """

    def __init__(self, peer: Peer):
        self.pid = os.getpid()
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._peer = peer
        self._lock = threading.Lock()
        self._full = False
        threading.Thread(target=self._watch, name=f"bus1py-ready-{peer.id}", daemon=True).start()

    def _set(self, ready: bool) -> None:
        with self._lock:
            if ready and not self._full:
                os.write(self._write_fd, b"!")
                self._full = True
            elif not ready and self._full:
                try:
                    os.read(self.read_fd, 1)
                except BlockingIOError:
                    pass
                self._full = False

    def sync(self) -> None:
        peer = self._peer
        self._set(lib.b1_peer_ready(peer._bus.base(), peer._slot, peer._id) != 0)

    def _watch(self):
        peer = self._peer
        bus, slot, pid = peer._bus, peer._slot, peer._id
        # our own export of the mapping: while it exists Bus.close() cannot unmap it
        try:
            base = ffi.from_buffer(bus._mmap)
        except ValueError:
            return
        try:
            ready = None
            while bus._base is not None:
                ready = lib.b1_peer_watch(base, slot, pid, -1000 if ready is None else ready, 500_000_000)
                # disconnected (< 0): stay readable so the reader's recv reports it
                self._set(ready != 0)
                if ready < 0:
                    return
        finally:
            ffi.release(base)
