"""A bus: one POSIX shared-memory segment holding every peer's queue, clock and handles.

Invariants:
  - The segment is sized once, at creation, from the limits; nothing grows later.
  - A process maps a bus once: `Bus.attach(name)` returns that process's mapping, which is
    what unpickled peers use, so a child started with fork or spawn shares one mapping.
  - After `close()` this process's mapping is gone and every call through it raises
    ValueError instead of touching unmapped memory.
  - The creating process unlinks the name when it exits normally, unless the bus was
    created persistent; other processes keep their mappings until they close them.
  - A name whose every holder is dead is taken over by one creator (b1_bus_reclaim's
    claim), never by two.
  - The limits are limits.py's; the segment file's naming, checks, mapping and takeover
    are segment.py's: this module creates, initialises and closes a bus's mapping.
"""
from __future__ import annotations

import atexit
import errno
import itertools
import mmap
import os
import secrets
import time
import threading
import weakref
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

import posix_ipc

from . import fdpaths as _fdpaths, fds as _fds, segment as _segment, watch as _watch
from ._lib import ffi, lib
from .errors import bus_error
from .frame import Frame
from .limits import INJECT_KINDS, MAX_NAMES, MAX_PEERS, MAX_SLOTS, Limits
from .peer import Peer
from .peerinfo import PeerInfo

if TYPE_CHECKING:
    from typing_extensions import Self

lib.b1_process_init()  # the C helper's cached pid is reset in forked children
__all__ = ["Bus", "Limits", "INJECT_KINDS", "MAX_NAMES", "MAX_PEERS", "MAX_SLOTS"]


def _restore(bus_name: str, slot: int, peer_id: int, open_args: dict[str, Any] | None = None) -> Peer:
    """An unpickled Peer (Bus._restore_peer), on this process's mapping of its bus."""
    peer = Peer(Bus.attach(bus_name, **(open_args or {})), slot, peer_id)
    try:
        peer._attach()
    except OSError:
        pass  # disconnected meanwhile: its calls will say so
    return peer


_CREATE_TRIES = 200  # 10 ms apart: how long create(exist_ok=True) waits out a racer's initialisation


class Bus:
    """A mapping of one bus in this process: `Bus.create` makes a bus, `Bus.open` maps an
    existing one by name, `peer()` makes peers on it.  As a context manager it closes the
    mapping when the block ends, and unlinks the name if this mapping created it.

    >>> import bus1py
    >>> with bus1py.Bus.create(max_payload=4096) as bus:
    ...     peer = bus.peer()
    ...     print(bus.limits.max_payload, len(bus.peers()))
    4096 1
    """

    _attached: dict[str, "Bus"] = {}
    _created: dict[str, int] = {}  # names this process created, unlinked at exit: name -> pid
    _lock = threading.Lock()
    _open_args: dict[str, Any]  # set in __init__ (its comment there)
    # what a pickled Peer calls to unpickle (peer.py needs no Bus): Bus.attach, then the peer
    _restore_peer = staticmethod(_restore)

    def __init__(self, name: str, mm: mmap.mmap, created: bool):
        self.name = name
        self._mmap = mm
        self._base = ffi.from_buffer(mm)
        self._made_here = created  # this mapping created the name: its `with` block unlinks it
        self._pool_view = None  # zero-copy payloads are slices of it (receive.py)
        self._open_args = {}  # what Bus.open checked: unpickled peers open the bus with them
        self._owner = (os.geteuid(), os.getegid(), 0o600)  # the segment's uid, gid, mode (fds.py)
        self._movers: str | None = None  # its mover directory (fdpaths.mover_dir), kept at close for unlink
        info = ffi.new("struct b1_bus_info *")
        lib.b1_bus_info(self._base, info)
        self.limits = Limits(**{f.name: getattr(info.limits, f.name) for f in fields(Limits)})
        self._tls = threading.local()  # .frame: this thread's Frame (scratch); dropped by close
        self._frames: weakref.WeakSet[Frame] = weakref.WeakSet()  # every Frame of it: close marks them closed (frame.py)

    # ---- creating and opening ----

    @classmethod
    def create(cls, name: str | None = None, *, mode: int = 0o600, persistent: bool = False,
               exist_ok: bool = False, inject: str | int = 0, **limits) -> "Bus":
        """Create a new bus.  `name=None` picks a fresh unique name.

        Keyword arguments are the fields of `Limits`.  `inject` selects a deliberately
        broken ordering path (see INJECT_KINDS) for proving the checker; never use it
        otherwise.  `mode` is the segment's permission bits (less the umask); other
        processes open a bus of a wider mode than 0o600 with the same `mode` (Bus.open).

        A bus of that name whose every holder is dead (its creator and the processes of
        its peers, judged as the reaper judges them) is taken over and created anew: a
        server killed by any signal is restarted with the same call.  A live one raises
        FileExistsError, or with `exist_ok=True` is opened (as Bus.open(name, mode=mode);
        the limits then are the existing bus's).  Of processes that restart one at the
        same time, one creates it (FileExistsError, or the bus opened, for the others).
        """
        _segment.check_open_args(mode)
        lim = Limits.asked(inject, limits)
        c_limits = lim.to_c()
        size = lib.b1_segment_size(c_limits)
        if size == 0:  # csrc/bus/bus.c limits_valid and Limits.check disagree: a bug
            raise ValueError(f"inconsistent bus limits: {asdict(lim)}")
        if name is None:
            shm_name = f"/bus1py-{os.getpid()}-{secrets.token_hex(6)}"
        else:
            shm_name = _segment.shm_name(name)
        for tries in itertools.count():
            try:
                shm = posix_ipc.SharedMemory(shm_name, posix_ipc.O_CREX, mode=mode, size=size)
                break
            except posix_ipc.ExistentialError:
                pass
            why = _segment.reclaim(shm_name, mode)
            if why is None:
                continue  # the dead bus's name is free: create it anew
            if exist_ok:
                try:
                    return cls.open(shm_name, mode=mode)
                except FileNotFoundError:
                    continue
                except OSError as e:  # a racer's bus still being initialised
                    if e.errno != errno.EBADMSG or tries >= _CREATE_TRIES:
                        raise
                    time.sleep(0.01)
                    continue
            raise FileExistsError(errno.EEXIST, f"a bus named {shm_name!r} already exists: {why}")
        try:
            mm = mmap.mmap(shm.fd, size)
            st = os.fstat(shm.fd)
        finally:
            shm.close_fd()
        bus = cls(shm_name, mm, created=True)
        bus._owner = _segment.owner(st)
        r = lib.b1_init(bus._base, size, c_limits)
        if r:
            bus.close()
            posix_ipc.unlink_shared_memory(shm_name)
            raise bus_error(r, "initialising the segment")
        bus.limits = lim
        bus._open_args = {"mode": mode, "trust_other_owner": False}
        if not persistent:
            cls._created[shm_name] = os.getpid()
        with cls._lock:
            cls._attached.setdefault(shm_name, bus)
        _watch.ensure(bus)
        return bus

    @classmethod
    def open(cls, name: str, *, mode: int = 0o600, trust_other_owner: bool = False,
             watch: bool = True) -> "Bus":
        """Map an existing bus; FileNotFoundError if there is none of that name.

        The segment must be a regular file owned by this user (the effective uid) whose
        permission bits are within `mode`: pass the `mode` the bus was created with when it
        is wider than the default 0o600.  Anything else raises PermissionError and maps
        nothing: another user who created the name first (a squatter) could read every
        message and scribble over the queues.  `trust_other_owner=True` accepts a segment
        of another owner, for buses shared between users on purpose (docs/RELIABILITY.md,
        "Trust model").  `watch=False` starts no death watcher (bus1py/watch.py) in this
        process for it: for tools that only look (`bus1py ls`, `fsck`), whose looking must
        not collect anything.
        """
        shm_name = _segment.shm_name(name)
        _segment.check_open_args(mode, trust_other_owner)
        mm, st = _segment.map_segment(shm_name, mode, trust_other_owner)
        bus = cls(shm_name, mm, created=False)
        bus._owner = _segment.owner(st)
        bus._open_args = {"mode": mode, "trust_other_owner": trust_other_owner}
        if watch:
            _watch.ensure(bus)
        return bus

    @classmethod
    def attach(cls, name: str, *, mode: int = 0o600, trust_other_owner: bool = False) -> "Bus":
        """This process's mapping of the bus, opened on first use (what unpickling uses,
        with the checks the pickling process's mapping was opened with; see `open`)."""
        shm_name = _segment.shm_name(name)
        with cls._lock:
            bus = cls._attached.get(shm_name)
            if bus is None or bus._base is None:
                bus = cls._attached[shm_name] = cls.open(shm_name, mode=mode,
                                                         trust_other_owner=trust_other_owner)
            return bus

    # ---- peers ----

    def peer(self, *, quota_messages: int = 0, quota_handles: int = 0, quota_bytes: int = 0) -> Peer:
        """A new peer; quotas default to the bus's."""
        slot = ffi.new("uint32_t *")
        pid = ffi.new("uint64_t *")
        for key, value, bits in (("quota_messages", quota_messages, 32), ("quota_handles", quota_handles, 32),
                                 ("quota_bytes", quota_bytes, 64)):
            if type(value) is not int or not 0 <= value < 1 << bits:
                raise ValueError(f"{key} must be an int from 0 (the bus default) to 2**{bits}-1, not {value!r}")
        r = lib.b1_peer_new(self.base(), quota_messages, quota_handles, quota_bytes, slot, pid)
        if r:
            raise bus_error(r, f"no free peer slot on bus {self.name!r} (max_peers={self.limits.max_peers})")
        peer = Peer(self, slot[0], pid[0])
        peer._attach()  # the creating process holds the peer
        return peer

    def peers(self) -> list[dict[str, Any]]:
        """Every peer slot carved on the bus, connected or not: PeerInfo with `state`
        ('connected', 'disconnected', 'free' for a reclaimed slot, ...) as a dict (for
        `bus1py ls`)."""
        out, rows = ffi.new("struct b1_peer_info *"), []
        states = {1: "connected", 2: "disconnected", 3: "disconnecting"}
        slot = 1
        while True:
            r = lib.b1_peer_at(self.base(), slot, out)
            if r == -errno.ENOENT:  # past the last slot
                break
            if r == 0:
                rows.append({"state": states.get(out.state, "free"), "pinned": bool(out.pinned),
                             **PeerInfo.from_c(out).__dict__})
            slot += 1
        return rows

    def names(self) -> dict[str, int]:
        """The well-known names of live nodes on the bus: {name: owner peer id}
        (Peer.publish).  A name whose node was destroyed, or whose owner disconnected, is
        not listed (and is removed from the table on the way)."""
        out, cursor, names = ffi.new("struct b1_name_info[]", 64), ffi.new("uint32_t *"), {}
        while True:
            slots_before = cursor[0]
            n = lib.b1_names_list(self.base(), out, len(out), cursor)
            if n < 0:
                raise bus_error(n, f"listing the names of bus {self.name!r}")
            for i in range(n):
                raw = ffi.unpack(out[i].name, out[i].len)
                names[raw.decode("utf-8", "replace")] = out[i].owner_id
            if cursor[0] == slots_before:  # past the last slot
                return names

    def gc(self, *, sole: bool = False) -> dict[str, int]:
        """Reap peers whose processes all died (their nodes are destroyed, as by
        disconnect) and finish or remove the half-sent messages of dead processes.

        `sole=True` states that no other process uses the bus now (a harness after its
        workers exited): then every free list and usage counter is also rebuilt from the
        objects' states, giving back what a process killed between two stores leaked
        (csrc/bus/rebuild.c).  OSError EBUSY, changing nothing, when a connected peer still
        names another live process.  This process's death watcher (bus1py/watch.py) is
        paused meanwhile; another process's watcher is a user of the bus like any other
        (BUS1PY_WATCH=0 there, or its bus closed)."""
        out = ffi.new("struct b1_gc_stats *")
        if sole:
            with _watch.paused(self):
                r = lib.b1_gc_sole(self.base(), out)
            if r:
                raise bus_error(r, f"bus {self.name!r} is in use by another process: gc(sole=True) "
                                   "rebuilds only a bus held alone")
        else:
            lib.b1_gc(self.base(), out)
        _fds.tidy(self.name, self.base(), out)  # the descriptors of what it dropped, the stores of whom it reaped
        return {"peers_reaped": out.peers_reaped, "blocks_completed": out.blocks_completed,
                "blocks_removed": out.blocks_removed, "live_peers": out.live_peers}

    def check(self) -> list[str]:
        """Every invariant of the segment checked (free lists, reference counts, queues,
        handle registrations, pool accounting, owners alive): the problems found, one
        sentence each; [] when the bus is clean.  Meant for a quiet bus (no call in
        flight), e.g. after gc: a bus in use changes under the walk."""
        out = ffi.new("char[]", 1 << 16)
        r = lib.b1_fsck(self.base(), out, len(out))
        if r < 0:
            raise bus_error(r, f"cannot check bus {self.name!r}")
        lines = ffi.string(out).decode("utf-8", "replace").splitlines()
        if r > len(lines):
            lines.append(f"... and {r - len(lines)} more")
        return lines

    def info(self) -> dict[str, Any]:
        """The segment's header: layout version, size, objects and pool bytes in use,
        the injected fault kind, the creating process and whether it lives."""
        info = ffi.new("struct b1_bus_info *")
        lib.b1_bus_info(self.base(), info)
        return {
            "name": self.name,
            "version": info.version,
            "segment_size": info.segment_size,
            "peers": info.peers_used,
            "nodes": info.nodes_used,
            "handles": info.handles_used,
            "entries_in_use": info.entries_used,
            "pool_used": info.pool_used,
            "pool_size": info.pool_size,
            "inject": info.inject,
            "creator_pid": info.creator_pid,
            "creator_alive": bool(info.creator_alive),
        }

    # ---- lifetime ----

    def base(self) -> Any:
        """The mapping's base address (a cffi pointer) for the C helper; ValueError once
        closed."""
        base = self._base
        if base is None:
            raise ValueError(f"bus {self.name!r} is closed in this process")
        return base

    def scratch(self) -> Frame:
        """This thread's frame for the hot C calls (frame.py)."""
        try:
            return self._tls.frame
        except AttributeError:
            frame = self._tls.frame = Frame(self.base(), self.limits)  # base() raises: closed
            self._frames.add(frame)
            return frame

    def close(self) -> None:
        """Unmap the bus in this process (peers of it become unusable here)."""
        if self._base is None:
            return
        _watch.stop(self)  # it maps the bus through its own export: gone before the unmap
        self._movers = _fdpaths.mover_dir(self._base)  # for unlink(), which may follow the unmap
        _fds.forget_bus(self)  # the peers' descriptor stores this process holds
        ffi.release(self._base)
        self._base = None
        self._tls = threading.local()
        for frame in list(self._frames):  # a Peer may keep one (csrc/py/peer.c): none maps the bus now
            frame.c.base = ffi.NULL
            frame.held = frame.whole = None
        if self._pool_view is not None:
            self._pool_view.release()  # its slices (zero-copy payloads) still hold the mapping
            self._pool_view = None
        try:
            self._mmap.close()
        except BufferError:
            pass  # a frame's view (reserve.py) or a payload view still points into it; it goes with the process
        with Bus._lock:
            if Bus._attached.get(self.name) is self:
                del Bus._attached[self.name]

    def unlink(self) -> None:
        """Remove the bus's name; processes that mapped it keep it until they close it."""
        Bus._created.pop(self.name, None)
        movers = _fdpaths.mover_dir(self._base) if self._base is not None else self._movers
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            raise FileNotFoundError(errno.ENOENT, f"no bus named {self.name!r}") from None
        _fdpaths.remove_movers(movers)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._made_here:
            try:
                self.unlink()
            except FileNotFoundError:
                pass

    @staticmethod
    def list_names() -> list[str]:
        """Names of the bus1py buses in /dev/shm that belong to this user (segment.py:
        symbolic links, FIFOs, other special files and files of another owner are skipped,
        never followed, waited on or read)."""
        return _segment.list_names()

    def __repr__(self) -> str:
        state = "closed" if self._base is None else "open"
        return f"<bus1py.Bus {self.name!r} {state}>"


@atexit.register
def _unlink_created() -> None:
    pid = os.getpid()
    for name, creator in list(Bus._created.items()):
        if creator == pid:
            try:
                posix_ipc.unlink_shared_memory(name)
            except posix_ipc.ExistentialError:
                pass
