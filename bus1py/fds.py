"""File descriptors in messages: what a send names, and each peer's descriptor store.

A send's descriptors are posted, as SCM_RIGHTS datagrams, to the store of every receiving
peer under the sender's lock at the stamp; a receive installs copies of its message's,
peeked from the store, in the lock hold that takes the message (csrc/bus/fds.c has the
matching rules).

Invariants:
  - What a send carries is checked before anything is staged: a sequence of at most
    B1_MAX_FDS ints (TypeError otherwise, EMSGSIZE past the limit), each an open
    descriptor (EBADF).  `named(fds)` names them to the C helper for the calls made inside
    it and names none again when it ends, however it ends: no later send of the thread
    carries them by mistake.
  - A peer's store is three AF_UNIX datagram sockets whatever its quota: an inbox bound
    at a filesystem path in a directory only the bus's users may enter, with SO_PASSCRED
    from before its bind, and a socketpair with no path (fdpaths.py); every inbox
    datagram's credentials are checked against the ones registered here (the segment's
    owner, its group for a group bus, anyone for a world bus; root).
  - A sender that finds an inbox full while its process holds no copy of the store asks
    the holder processes' movers (csrc/bus/fds.c): `mover_socket(bus)` is this process's
    on the bus, its watcher's (watch.py), which moves what is asked for (b1_fds_wakeup) by
    users the store lets post.  It is bound, SO_PASSCRED set first, at a path named by the
    process's pid and pidfs inode in the bus's mover directory (named by the bus's nonce,
    made and checked as a store's: only the bus's users may find, bind in or send to it);
    the watcher unlinks it when it stops, and a path whose process is gone (or has
    another pidfs inode) is unlinked by the next process that binds there.  The directory
    lives as long as the bus's name (Bus.unlink removes it, empty).  With no watcher
    (BUS1PY_WATCH=0) only a receive of the peer (which moves a filling inbox) or a send
    from a holder process makes room, and a send waits B1_FDS_WAIT_MS for it, then fails
    with EDQUOT.
  - The sockets are bound by the process that creates the peer; a process that joins
    otherwise (spawn, a fork child at its first use) makes them afresh when no live
    process holds them (a stale path unlinked), or takes a live holder's (pidfd_getfd); all
    under an flock of the directory, so two joiners never both bind.  A process has at
    most one store per peer (`_stores`), all its sockets or none, registered with the C
    helper.  A process that cannot set the store up gets the error (EMFILE, EPERM)
    from the call that needed it and tries again at its next: a receive that meets a
    message with descriptors retries first; a sender to a store nobody bound gets
    ENOLINK and sends nothing.
  - A fork child holds no store (closed at the fork): only processes that use the peer do.
    Nor does it hold a directory's flock: a descriptor of a directory a thread is binding in
    is in `_binding` from its open to its close (both under `_lock`, which a fork waits
    for), and the child closes its copies, or the flock would outlive the binding for as
    long as the child lives and stop every later binder, the child's own threads too.
  - Received descriptors (`Message.fds`) are the receiver's to close: nothing here does.
  - A store of a peer no longer connected is emptied (every datagram popped, its
    descriptors closed) and closed by each holder: at `Peer.disconnect`, and within a
    watcher's rescan of the holders epoch (watch.py calls `prune`), which the disconnect
    moves; the disconnect unlinks its path and directory (csrc/bus/peer.c).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import threading
from typing import NamedTuple

from . import fdpaths
from ._lib import ffi, lib
from .errors import bus_error
from .segment import SHM_DIR

MAX_FDS: int = lib.B1_MAX_FDS
_stores = {}  # (bus name, peer id) -> Store: this process's sockets of the peer's store
_missing = {}  # (bus name, peer id) -> the peer, for stores this process failed to set up
_lock = threading.RLock()  # around every change of _stores and each look at all of it (the watcher's too)
_binding: set = set()  # descriptors of store directories this process's threads hold flocks of


class Store(NamedTuple):
    slot: int
    socks: list
    path: str
    bus: object  # the Bus object its peer was used through: Bus.close of it lets go
_ACTIVE = 1  # b1_peer_info.state of a connected peer (B1_PEER_ACTIVE, csrc/bus/layout.h)
_ANYONE = -2  # b1_fds_register's gid for a bus every user may map: any sender's credentials


def check(fds) -> list:
    """`fds` as a list of open descriptors, or the one error that says what is wrong."""
    if isinstance(fds, int):
        raise TypeError(f"fds must be a sequence of ints, not one int ({fds!r}): pass ({fds},)")
    try:
        out = list(fds)
    except TypeError:
        raise TypeError(f"fds must be a sequence of ints, not {type(fds).__name__}") from None
    if len(out) > MAX_FDS:
        raise bus_error(errno.EMSGSIZE, f"{len(out)} descriptors exceed the {MAX_FDS} a message carries")
    for fd in out:
        if type(fd) is not int:
            raise TypeError(f"fds must be ints (file descriptors), not {type(fd).__name__} {fd!r}")
        try:
            os.fstat(fd)
        except (OSError, OverflowError):
            raise bus_error(errno.EBADF, f"fd {fd} is not an open file descriptor") from None
    return out


@contextlib.contextmanager
def named(fds):
    """The checked `fds` named to the C helper as what this thread's sends carry, for the
    duration of the block."""
    fds = check(fds)
    r = lib.b1_send_fds(ffi.new("int32_t[]", fds), len(fds))
    if r:
        raise bus_error(r, f"naming {len(fds)} descriptors")
    try:
        yield fds
    finally:
        lib.b1_send_fds(ffi.NULL, 0)


def _register(peer, socks) -> None:
    uid, gid, mode = peer._bus._owner
    if mode & 0o006 == 0o006:
        gid = _ANYONE
    elif mode & 0o060 != 0o060:
        gid = -1
    fds = [s.fileno() for s in socks]
    r = lib.b1_fds_register(peer._bus.base(), peer._slot, peer._id, ffi.new("int32_t[]", fds), len(fds), uid, gid)
    if r:
        for s in socks:
            s.close()
        raise bus_error(r, f"registering the descriptor store of peer {peer._id}")
    with _lock:
        _stores[(peer._bus.name, peer._id)] = Store(peer._slot, socks, socks[0].getsockname(), peer._bus)


def ensure(peer) -> None:
    """This process holds `peer`'s store: kept, bound afresh, or taken from a live holder;
    else the error that says why not (nothing held then: `retry` and the next receive that
    needs it try again)."""
    key = (peer._bus.name, peer._id)
    if key in _stores:
        return
    with _lock:
        _missing[key] = peer
    path = fdpaths.path(peer)[0]
    try:
        with _lock:
            dfd = fdpaths.open_dir(os.path.dirname(path), peer._bus._owner)
            _binding.add(dfd)
    except OSError as e:
        raise _setup_error(peer, e) from None
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # one binder at a time (threads too); closing the fd lets go
        if key in _stores:
            return  # another thread of this process set it up meanwhile
        try:
            socks = fdpaths.bind(path, fdpaths.classes(peer._bus._owner[2])[1])
            if socks is None:
                socks = fdpaths.take(peer, path)
        except OSError as e:
            raise _setup_error(peer, e) from None
        if socks is None:
            raise bus_error(errno.EPERM, f"the descriptor store of peer {peer._id} is held by processes "
                                         f"{list(peer.query().pids)} that this one may not take it from "
                                         "(pidfd_getfd needs the right to ptrace them)")
        _register(peer, socks)
        # a disconnect that unlinked the path before this bind made it again: the peer is
        # gone, so its store goes now, not when a watcher's rescan finds it (this process
        # may exit first)
        forget(peer)
    finally:
        with _lock:
            _binding.discard(dfd)
            os.close(dfd)
            if key in _stores:
                _missing.pop(key, None)


def _setup_error(peer, e: OSError) -> OSError:
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return OSError(e.errno, f"peer {peer._id} cannot set up its descriptor store: out of file "
                                "descriptors; close some and call again (the message stays queued)")
    return OSError(e.errno, f"peer {peer._id} cannot set up its descriptor store: {e}")


def missing(peer) -> bool:
    """This process failed to set up `peer`'s store and tries again."""
    return (peer._bus.name, peer._id) in _missing


def retry(name) -> None:
    """Set up again the stores of bus `name` this process failed to set up (the watcher
    calls it at each rescan); errors stay for the receive that needs the store to raise."""
    with _lock:
        mine = [(key, peer) for key, peer in _missing.items() if key[0] == name]
    for key, peer in mine:
        try:
            ensure(peer)
        except OSError as e:
            if e.errno in (errno.ESHUTDOWN, errno.EINVAL):
                with _lock:
                    _missing.pop(key, None)  # gone: nothing to set up


def forget(peer) -> None:
    """After a disconnect of `peer` here: its store emptied and let go of, unless the peer
    is still connected (the disconnect failed)."""
    base, out = peer._bus._base, ffi.new("struct b1_peer_info *")
    if base is not None and not lib.b1_peer_query(base, peer._slot, peer._id, out) and out.state == _ACTIVE:
        return
    _close(base, (peer._bus.name, peer._id), drain=True)


def forget_bus(bus) -> None:
    """This process lets go of every store of `bus` (it is being closed here; the peers may
    live on in other processes, so nothing is emptied).  A store no other live process is
    recorded to hold loses its path too: a later holder binds it afresh."""
    out = ffi.new("struct b1_peer_info *")
    with _lock:
        mine = [k for k, st in _stores.items() if st.bus is bus]
        mine += [k for k, peer in _missing.items() if peer._bus is bus]
    for key in mine:
        st = _stores.get(key)
        alone = st is not None and (lib.b1_peer_query(bus._base, st.slot, key[1], out) or
                                    not any(fdpaths.alive(pid) for pid in out.pids if pid and pid != os.getpid()))
        _close(bus._base, key, drain=False)
        if alone and st is not None:
            fdpaths.unlink(st.path)


def _close(base, key, drain: bool) -> None:
    """Let go of the store of `key`; with `drain` (its peer is gone) emptied first, and its
    path unlinked (the disconnect did, unless a bind raced it)."""
    with _lock:
        _missing.pop(key, None)
        st = _stores.pop(key, None)
    if st is not None:
        slot, socks = st.slot, st.socks
        if base is not None:
            lib.b1_fds_register(base, slot, key[1], ffi.NULL, 0, 0, -1)
        if drain:
            lib.b1_fds_drain(ffi.new("int32_t[]", [s.fileno() for s in socks]), len(socks))
            fdpaths.unlink(st.path)
        for sock in socks:
            sock.close()


def prune(name, base) -> None:
    """The stores this process holds of bus `name`'s peers no longer connected: emptied and
    closed (the watcher calls it at each rescan, tidy after a gc)."""
    out = ffi.new("struct b1_peer_info *")
    with _lock:
        mine = [(key, st.slot) for key, st in _stores.items() if key[0] == name]
    for key, slot in mine:
        if (lib.b1_peer_query(base, slot, key[1], out) or out.state != _ACTIVE):
            _close(base, key, drain=True)


def tidy(name, base, stats) -> None:
    """After a gc of bus `name` (mapped at `base`) that did something (its b1_gc_stats):
    the stores this process holds of peers no longer connected are closed, the others
    swept (gc dropped messages whose descriptors they hold).  Bus.gc and the death
    watcher (watch.py) both call it."""
    if not (stats.peers_reaped or stats.blocks_completed or stats.blocks_removed):
        return
    prune(name, base)
    with _lock:
        mine = [(key, st.slot) for key, st in _stores.items() if key[0] == name]
    for key, slot in mine:
        lib.b1_fds_sweep(base, slot, key[1])


def sweep(peer) -> None:
    """Close the descriptors at the heads of the store whose messages are no longer queued (a reset
    dropped them)."""
    lib.b1_fds_sweep(peer._bus.base(), peer._slot, peer._id)


def mover_socket(bus):
    """This process's mover socket on `bus` (its watcher's: one per process per bus), bound
    with SO_PASSCRED at b1_fds_mover_address in the bus's mover directory (made and checked
    as a store's: only the bus's users may send to it or bind in it), the stale paths of
    gone processes there unlinked first; the path is its owner's to unlink
    (`close_mover`)."""
    base = bus.base()
    out = ffi.new("char[]", 108)
    n = lib.b1_fds_mover_address(base, out, 108)
    if n < 0:
        raise bus_error(n, f"the mover socket of bus {bus.name!r}")
    path = os.fsdecode(ffi.buffer(out, n)[:])
    dfd = fdpaths.open_dir(os.path.dirname(path), bus._owner)
    try:
        for name in os.listdir(dfd):
            if lib.b1_fds_mover_stale(os.fsencode(name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before any request can come
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # this process's own name: a leftover of a watcher cut short
        sock.bind(path)
        smode = fdpaths.classes(bus._owner[2])[1]
        if smode & 0o066:  # a bus of the group or others: they need write on the file
            os.chmod(path, smode)
    except OSError:
        sock.close()
        raise
    return sock


def close_mover(sock, name: str | None = None) -> None:
    """Close a mover socket (mover_socket's); given its bus's name (in its owner process),
    unlink its path, and the directory too once the name is gone and no live process is
    bound there.  The directory stays while the bus's name does: removed earlier, an
    outsider who saw its name in /proc/net/unix could make one of that name first."""
    if name is not None:
        path = sock.getsockname()
        with contextlib.suppress(OSError):
            os.unlink(path)
        if not os.path.exists(SHM_DIR + name):
            fdpaths.remove_movers(os.path.dirname(path))
    sock.close()


def move_asked(sock) -> None:
    """Move what the requests readable on `sock` (mover_socket's) ask for."""
    lib.b1_fds_wakeup(sock.fileno())


def _after_fork_in_child() -> None:
    # the fork waited for _lock (before=), so the tables are whole; the child's copy of the
    # lock is held by the forking thread's twin: a lock of its own instead
    global _lock
    _lock = threading.RLock()
    for dfd in _binding:  # the parent's threads' flocks stay theirs
        os.close(dfd)
    _binding.clear()
    # the parent's stores: a child that uses a peer takes its store again (ensure)
    for st in _stores.values():
        for sock in st.socks:
            sock.close()
    _stores.clear()
    _missing.clear()


# a fork while another thread (the watcher's prune) holds _lock would give the child a lock
# no thread of it can release: the fork waits for it instead
os.register_at_fork(before=lambda: _lock.acquire(), after_in_parent=lambda: _lock.release(),
                    after_in_child=_after_fork_in_child)
