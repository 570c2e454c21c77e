"""Deaths noticed without gc: one small thread per process per attached bus.

The kernel's bus1 notices a dead peer at once, because its file descriptor closes; here a
peer is a record in shared memory, so someone must watch the processes that hold peers.

Invariants:
  - Each process attached to a bus runs at most one watcher for it, however many Bus
    objects of the bus it opened (started by Bus.open, Bus.create and the first use of a
    peer in a forked child; shared by every open Bus of the name; stopped and joined when
    the last of them closes, moved to another's mapping when the one it maps closes;
    forgotten by a fork child, which starts its own).  So opening and closing a bus any
    number of times leaves no thread, descriptor, mapping or mover path behind.
  - The watcher holds a pidfd (os.pidfd_open, Linux >= 5.3) of every other live process
    recorded in the bus's connected peers (b1_peer_watchlist), rescanned within RESCAN
    seconds of a process being recorded as a holder (the segment's holders epoch) and
    every FULL_RESCAN seconds anyway.  A pidfd names one process for its whole life, so a reused pid is never
    mistaken for the process it replaced.  When one becomes readable (its process
    exited), a look at the watched holders' exec markers every RESCAN seconds finds one
    closed (it exec'd: _execd), or a rescan finds a peer gc would act on, the watcher
    runs b1_gc: that is what disconnects the dead's peers (NODE_DESTROY to the holders of
    their nodes, their names gone), and gc's liveness rule -- dead only on the kernel's
    word: pidfs inode, exec marker -- is what decides; the watcher only decides when to
    ask.  So a peer whose processes all died or exec'd is disconnected within about
    RESCAN + the gc's own time while any process with a watcher is attached, and a live
    process is never reaped.
  - Idle, a watcher sleeps in poll(): it wakes every RESCAN seconds to read one counter,
    and every FULL_RESCAN seconds scans the peer table (a lock per carved peer slot, one
    /proc read per distinct process).
    Measured cost: docs/RELIABILITY.md, "Deaths noticed".
  - The watcher maps the bus through its own export of the mapping, so the mapping stays
    valid while it runs; Bus.close wakes it (an eventfd) and joins it before unmapping.
  - Bus.gc(sole=True) pauses this process's watcher (paused()): the rebuild of a bus
    held alone must be the only call touching it.
  - After a gc that did something, the descriptor stores this process holds of peers
    no longer connected are closed and the others swept (fds.tidy), as Bus.gc does: the
    descriptors in flight to a dead receiver close within the same second.  Each rescan
    (a disconnect moves the holders epoch) closes the stores of peers disconnected by
    anyone (fds.prune).
  - The watcher owns this process's mover socket on the bus (fds.mover_socket: a path
    only the bus's users may reach, made with the watcher, unlinked when it stops), polls
    it and moves the descriptor store inboxes senders ask it to (a sender finding one
    full), at once.  One that cannot be made (its directory refused) leaves the watcher
    without: full inboxes are then moved by receives and holder senders only.
  - BUS1PY_WATCH=0 in the environment starts no watcher (gc then runs only when called,
    or when a send meets EDQUOT; a full inbox is moved only by its peer's receives and
    by holder processes' sends), for benchmarks and tests that time gc themselves.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import os
import select
import threading
import time
import weakref

from . import fds
from ._lib import ffi, lib

RESCAN = 0.5  # seconds between looks at the holders' epoch (a rescan when it moved)
FULL_RESCAN = 5.0  # seconds between scans of the peer table when nothing moved
MAX_WATCHED = 4096  # processes watched per bus at most (the rest are found by rescans)

_watchers: dict = {}  # bus name -> Watcher of this process
_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get("BUS1PY_WATCH", "1") != "0" and hasattr(os, "pidfd_open")


def ensure(bus) -> None:
    """This process's watcher of `bus`, started if it has none."""
    if not enabled() or bus._base is None:
        return
    pid = os.getpid()
    with _lock:
        w = _watchers.get(bus.name)
        if w is not None and w.pid == pid and w.thread.is_alive() and w.bus._base is not None:
            w.users.add(bus)
            return
        users = w.users if w is not None and w.pid == pid else weakref.WeakSet()
        if w is not None and w.pid == pid:
            w.stop()
        users.add(bus)
        try:
            _watchers[bus.name] = Watcher(bus, users)
        except OSError:
            _watchers.pop(bus.name, None)  # out of descriptors or threads: gc still runs when called


@contextlib.contextmanager
def paused(bus):
    """No call of this process's watcher of `bus` runs inside the block (a rebuild of the
    bus held alone, Bus.gc(sole=True), must be the only one touching it)."""
    with _lock:
        w = _watchers.get(bus.name)
    if w is None or w.pid != os.getpid():
        yield
        return
    with w.busy:
        yield


def stop(bus) -> None:
    """`bus` (one Bus object) is closing here: the watcher stops when no other open Bus of
    the name uses it, else moves off this one's mapping (before it goes)."""
    with _lock:
        w = _watchers.get(bus.name)
        if w is None or w.pid != os.getpid():
            return
        w.users.discard(bus)
        others = [b for b in w.users if b._base is not None]
        if others and w.bus is not bus:
            return
        del _watchers[bus.name]
    w.stop()
    if others:
        ensure(others[0])
        with _lock:
            moved = _watchers.get(bus.name)
            if moved is not None:
                moved.users.update(others)


class Watcher:
    def __init__(self, bus, users):
        self.bus = bus
        self.users = users  # the open Bus objects of the name in this process (weak)
        self.pid = os.getpid()
        self.base = ffi.from_buffer(bus._mmap)  # our export: the mapping outlives us
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:  # senders that find an inbox of this process's full on this bus ask it
            self.mover = fds.mover_socket(bus)
        except OSError:  # (its directory refused, out of descriptors): receives still move
            self.mover = None
        self.fds: dict = {}  # pid -> pidfd
        self.markers: list = []  # (pid, fd, inode) of each watched holder's exec marker
        self.gcs = 0  # how many times it ran gc (tests and docs read it)
        self.busy = threading.Lock()  # held around each call into the bus (paused())
        self.thread = threading.Thread(target=self._run, name=f"bus1py-watch-{bus.name}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.pid != os.getpid():
            return  # a fork child: the thread is the parent's
        try:
            os.eventfd_write(self.wake, 1)
        except OSError:
            pass
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=5)

    def _gc(self) -> None:
        out = ffi.new("struct b1_gc_stats *")
        with self.busy:
            lib.b1_gc(self.base, out)
            fds.tidy(self.bus.name, self.base, out)  # the descriptor stores of whom it reaped
        self.gcs += 1

    def _rescan(self, holders, dead) -> bool:
        """Watch the processes the peers name now; True if gc has work at once."""
        with self.busy:
            n = lib.b1_peer_watchlist(self.base, holders, len(holders), dead)
            fds.prune(self.bus.name, self.base)  # the stores of peers disconnected since
            fds.retry(self.bus.name)  # and those this process failed to set up
        if n < 0:
            return False
        self.markers = _markers(holders, n, self.pid)
        now = {holders[i].pid for i in range(n)} - {self.pid}
        for pid in set(self.fds) - now:
            os.close(self.fds.pop(pid))
        work = dead[0] > 0
        for pid in now - set(self.fds):
            try:
                self.fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                work = True  # died since the scan: gc judges it
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                    raise
                break  # out of descriptors: the rest are caught by later rescans
        return work

    def _run(self) -> None:
        holders, dead = ffi.new("struct b1_watched[]", MAX_WATCHED), ffi.new("uint32_t *")
        epoch, last_full, poller, by_fd = None, 0.0, None, {}
        mover = self.mover
        try:
            while True:
                now = time.monotonic()
                moved = lib.b1_holders_epoch(self.base)  # one load: no pause needed
                if moved != epoch or now - last_full >= FULL_RESCAN:
                    epoch, last_full, poller = moved, now, None
                    if self._rescan(holders, dead):
                        self._gc()
                        self._rescan(holders, dead)  # what to watch now; more work waits a round
                if poller is None:
                    poller = select.poll()
                    poller.register(self.wake, select.POLLIN)
                    if mover is not None:
                        poller.register(mover, select.POLLIN)
                    by_fd = {fd: pid for pid, fd in self.fds.items()}
                    for fd in by_fd:
                        poller.register(fd, select.POLLIN)
                ready = poller.poll(RESCAN * 1000)
                if any(fd == self.wake for fd, _ in ready):
                    return
                if mover is not None and any(fd == mover.fileno() for fd, _ in ready):
                    fds.move_asked(mover)
                exited = [by_fd[fd] for fd, _ in ready if fd in by_fd]
                for pid in exited:
                    os.close(self.fds.pop(pid))
                if exited or _execd(self.markers):
                    poller = None
                    self._gc()
                    if not exited:
                        epoch = None  # its peers are gone: watch what is left
        finally:
            for fd in self.fds.values():
                os.close(fd)
            self.fds.clear()
            os.close(self.wake)
            if mover is not None:
                fds.close_mover(mover, self.bus.name)
            ffi.release(self.base)


def _markers(holders, n: int, me: int) -> list:
    """The exec markers of the first n watched holders but this process's own."""
    return [(h.pid, h.marker_fd, h.marker_ino) for h in (holders[i] for i in range(n))
            if h.pid != me and h.marker_fd >= 0 and h.marker_ino]


def _execd(markers) -> bool:
    """Has a watched holder exec'd (or closed its marker)?  Exec does not end a process,
    so its pidfd stays quiet: the kernel's word is /proc/PID/fd/N, gone or another file
    (csrc/bus/proc.c).  A process that died shows the same, and gc tells them apart."""
    for pid, fd, ino in markers:
        try:
            if os.stat(f"/proc/{pid}/fd/{fd}").st_ino != ino:
                return True
        except FileNotFoundError:
            return True
        except OSError:
            pass  # EACCES (not dumpable), ENOMEM: doubt is life
    return False


def _after_fork_in_child():
    # the threads are the parent's; their descriptors are closed here, not shared
    for w in _watchers.values():
        for fd in list(w.fds.values()) + [w.wake]:
            try:
                os.close(fd)
            except OSError:
                pass
        if w.mover is not None:  # the parent's path: the child binds its own
            fds.close_mover(w.mover)
    _watchers.clear()


def _stop_all_at_exit():
    # before the interpreter freezes daemon threads: no gc is cut short by the exit
    pid = os.getpid()
    with _lock:
        mine = [w for w in _watchers.values() if w.pid == pid]
        _watchers.clear()
    for w in mine:
        w.stop()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_stop_all_at_exit)
