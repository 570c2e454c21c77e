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
  - A peer's store is its record's number of AF_UNIX datagram sockets bound at filesystem
    paths in its own directory, B1_FDS_DIR + its nonce.  The directory has the segment's
    owner (or this process's uid), the segment's group, and rwx for exactly the classes
    that may map the segment (0700 for a 0600 bus); one found otherwise, or a symbolic
    link, is refused with an error naming it and nothing bound.  So the kernel lets no
    other user send to, bind in or find a store.  Each socket has SO_PASSCRED from before
    its bind: every datagram carries its sender's credentials, checked at the take
    against the ones registered here (the segment's owner and group, root).
  - The sockets are bound by the process that creates the peer; a process that joins
    otherwise (spawn, a fork child at its first use) binds them afresh when no live
    process holds them (stale paths unlinked), or takes a live holder's (pidfd_getfd); all
    under an flock of the directory, so two joiners never both bind.  A process has at
    most one store per peer (`_stores`), all its sockets or none, registered with the C
    helper.  A process that cannot set the store up gets the error (EMFILE, EPERM)
    from the call that needed it and tries again at its next: a receive that meets a
    message with descriptors retries first; a sender to a store nobody bound gets
    ENOLINK and sends nothing.
  - A fork child holds no store (closed at the fork): only processes that use the peer do.
  - Received descriptors (`Message.fds`) are the receiver's to close: nothing here does.
  - A store of a peer no longer connected is emptied (every datagram popped, its
    descriptors closed) and closed by each holder: at `Peer.disconnect`, and within a
    watcher's rescan of the holders epoch (watch.py calls `prune`), which the disconnect
    moves; the disconnect unlinks its paths and directory (csrc/bus/peer.c).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import socket
import stat
import threading
from typing import NamedTuple

from ._lib import ffi, lib
from .errors import bus_error

MAX_FDS: int = lib.B1_MAX_FDS
_stores = {}  # (bus name, peer id) -> Store: this process's sockets of the peer's store
_missing = {}  # (bus name, peer id) -> the peer, for stores this process failed to set up
_lock = threading.RLock()  # around every change of _stores and each look at all of it (the watcher's too)


class Store(NamedTuple):
    slot: int
    socks: list
    paths: list
    bus: object  # the Bus object its peer was used through: Bus.close of it lets go
_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the generic syscall table)
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


def _paths(peer) -> list:
    """The filesystem paths of the sockets of `peer`'s store, in order."""
    out, paths = ffi.new("char[]", 108), []
    while True:
        n = lib.b1_fds_address(peer._bus.base(), peer._slot, peer._id, len(paths), out, 108)
        if n == -errno.ERANGE:
            return paths
        if n < 0:
            raise bus_error(n, f"the descriptor store of peer {peer._id}")
        paths.append(os.fsdecode(ffi.buffer(out, n)[:]))


def _classes(mode: int) -> tuple:
    """(directory mode, socket mode) for a segment of permission bits `mode`: rwx (rw on a
    socket) for each class that may open the segment read-write, nothing for the others."""
    dmode, smode = 0o700, 0o600
    if mode & 0o060 == 0o060:
        dmode, smode = dmode | 0o070, smode | 0o060
    if mode & 0o006 == 0o006:
        dmode, smode = dmode | 0o007, smode | 0o006
    return dmode, smode


def _open_dir(path: str, owner: tuple) -> int:
    """An fd of the store's directory, made when missing, checked: a directory (no
    symbolic link), of the segment's owner or this uid, the segment's group, mode exact."""
    uid, gid, mode = owner
    dmode = _classes(mode)[0]
    try:
        os.mkdir(path, 0o700)
        if dmode & 0o077:
            os.chown(path, -1, gid)
            os.chmod(path, dmode)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise PermissionError(e.errno, f"descriptor store directory {path!r}: {e.strerror} "
                                       "(not a directory of this bus's users)") from None
    st = os.fstat(fd)
    wrong = None
    if st.st_uid not in (uid, os.geteuid()):
        wrong = f"owned by uid {st.st_uid}"
    elif stat.S_IMODE(st.st_mode) != dmode:
        wrong = f"of mode {stat.S_IMODE(st.st_mode):#05o}, not {dmode:#05o}"
    elif dmode & 0o070 and st.st_gid != gid:
        wrong = f"of group {st.st_gid}, not the bus's {gid}"
    if wrong:
        os.close(fd)
        raise PermissionError(errno.EPERM, f"descriptor store directory {path!r} is {wrong}: refused")
    return fd


def _live(path: str) -> bool:
    """Some process holds the socket bound at `path` (a stale path refuses a connection)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    finally:
        probe.close()


def _bind(paths: list, smode: int):
    """Sockets bound at every one of `paths` (stale ones unlinked first), or None when a live
    process holds them (under the directory's flock: a holder has all of a store's paths or
    none, so the first one decides)."""
    socks = []
    try:
        for path in paths:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before any datagram can come
            try:
                sock.bind(path)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                if _live(path):
                    for s in socks:
                        s.close()
                    return None
                os.unlink(path)
                sock.bind(path)
            if smode & 0o066:  # a bus of the group or others: they need write on the file
                os.chmod(path, smode)  # (for the owner alone the directory is what stands)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


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
        _stores[(peer._bus.name, peer._id)] = Store(peer._slot, socks, [s.getsockname() for s in socks], peer._bus)


def ensure(peer) -> None:
    """This process holds `peer`'s store: kept, bound afresh, or taken from a live holder;
    else the error that says why not (nothing held then: `retry` and the next receive that
    needs it try again)."""
    key = (peer._bus.name, peer._id)
    if key in _stores:
        return
    with _lock:
        _missing[key] = peer
    paths = _paths(peer)
    try:
        dfd = _open_dir(os.path.dirname(paths[0]), peer._bus._owner)
    except OSError as e:
        raise _setup_error(peer, e) from None
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # one binder at a time (threads too); closing the fd lets go
        if key in _stores:
            return  # another thread of this process set it up meanwhile
        try:
            socks = _bind(paths, _classes(peer._bus._owner[2])[1])
            if socks is None:
                socks = _take(peer, paths)
        except OSError as e:
            raise _setup_error(peer, e) from None
        if socks is None:
            raise bus_error(errno.EPERM, f"the descriptor store of peer {peer._id} is held by processes "
                                         f"{list(peer.query().pids)} that this one may not take it from "
                                         "(pidfd_getfd needs the right to ptrace them)")
        _register(peer, socks)
    finally:
        os.close(dfd)
        with _lock:
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


def _take(peer, paths: list):
    """Copies of the sockets a live holder of `peer` (a recorded one, or this process's
    parent) has bound at `paths` (pidfd_getfd, which needs the right to ptrace it), or
    None unless every one was found."""
    inodes = {}
    wanted = {path: k for k, path in enumerate(paths)}
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] in wanted:
                inodes[f"socket:[{parts[6]}]"] = wanted[parts[7]]
    if len(set(inodes.values())) != len(paths):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    # its recorded holders, and the parent: a fork child drops the copies it inherited
    for pid in dict.fromkeys([*peer.query().pids, os.getppid()]):
        if pid in (0, os.getpid()):
            continue
        got = {}
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    k = inodes.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
                if k is None or k in got:
                    continue
                new = libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(fd), 0)
                if new >= 0:
                    os.set_inheritable(new, False)
                    got[k] = socket.socket(fileno=new)
                elif ctypes.get_errno() in (errno.EMFILE, errno.ENFILE):
                    for sock in got.values():
                        sock.close()
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        except FileNotFoundError:
            pass  # it exited meanwhile
        finally:
            os.close(pidfd)
        if len(got) == len(paths):
            return [got[k] for k in range(len(paths))]
        for sock in got.values():
            sock.close()
    return None


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
    recorded to hold loses its paths too: a later holder binds it afresh."""
    out = ffi.new("struct b1_peer_info *")
    with _lock:
        mine = [k for k, st in _stores.items() if st.bus is bus]
        mine += [k for k, peer in _missing.items() if peer._bus is bus]
    for key in mine:
        st = _stores.get(key)
        alone = st is not None and (lib.b1_peer_query(bus._base, st.slot, key[1], out) or
                                    not any(_alive(pid) for pid in out.pids if pid and pid != os.getpid()))
        _close(bus._base, key, drain=False)
        if alone:
            _unlink(st.paths)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _unlink(paths) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(paths[0]))


def _close(base, key, drain: bool) -> None:
    """Let go of the store of `key`; with `drain` (its peer is gone) emptied first, and its
    paths unlinked (the disconnect did, unless a bind raced it)."""
    with _lock:
        _missing.pop(key, None)
        st = _stores.pop(key, None)
    if st is not None:
        slot, socks = st.slot, st.socks
        if base is not None:
            lib.b1_fds_register(base, slot, key[1], ffi.NULL, 0, 0, -1)
        if drain:
            lib.b1_fds_drain(ffi.new("int32_t[]", [s.fileno() for s in socks]), len(socks))
            _unlink(st.paths)
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


def _after_fork_in_child() -> None:
    # the parent's stores: a child that uses a peer takes its store again (ensure)
    for st in _stores.values():
        for sock in st.socks:
            sock.close()
    _stores.clear()
    _missing.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
