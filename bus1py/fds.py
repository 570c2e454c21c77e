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
  - A peer's store is its record's number of AF_UNIX datagram sockets, each bound at the
    abstract address the record names for it: bound by the process that creates the
    peer, inherited by a fork, taken from a live holder (pidfd_getfd) by a process that
    joins otherwise, or bound afresh when no process holds them any more.  A process has
    at most one store per peer (`_stores`), all its sockets or none, registered with the
    C helper; one without it cannot receive a message that carries descriptors (EPERM),
    so none is ever delivered without them.
  - Received descriptors (`Message.fds`) are the receiver's to close: nothing here does.
  - Disconnecting a peer closes this process's store; once no holder has it open the
    kernel closes every descriptor still queued in it (a disconnected receiver drops them).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket

from ._lib import ffi, lib
from .errors import bus_error

MAX_FDS: int = lib.B1_MAX_FDS
_stores = {}  # (bus name, peer id) -> (slot, this process's sockets of the peer's store)
_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the generic syscall table)
_ACTIVE = 1  # b1_peer_info.state of a connected peer (B1_PEER_ACTIVE, csrc/bus/layout.h)


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


def _addresses(peer) -> list:
    """The abstract names of the sockets of `peer`'s store, in order."""
    out, names = ffi.new("char[]", 108), []
    while True:
        n = lib.b1_fds_address(peer._bus.base(), peer._slot, peer._id, len(names), out, 108)
        if n == -errno.ERANGE:
            return names
        if n < 0:
            raise bus_error(n, f"the descriptor store of peer {peer._id}")
        names.append(ffi.buffer(out, n)[:])


def _register(peer, socks) -> None:
    fds = [s.fileno() for s in socks]
    r = lib.b1_fds_register(peer._bus.base(), peer._slot, peer._id, ffi.new("int32_t[]", fds), len(fds))
    if r:
        for s in socks:
            s.close()
        raise bus_error(r, f"registering the descriptor store of peer {peer._id}")
    _stores[(peer._bus.name, peer._id)] = (peer._slot, socks)


def ensure(peer) -> None:
    """This process holds `peer`'s store, if any process can give it one: kept, bound
    afresh, or taken from a live holder."""
    if (peer._bus.name, peer._id) in _stores:
        return
    names, socks = _addresses(peer), []
    try:
        for name in names:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.bind(b"\0" + name)
    except OSError as e:
        for sock in socks:
            sock.close()
        if e.errno != errno.EADDRINUSE:
            raise
        socks = _take(peer, names)
        if socks is None:
            return  # receiving a message with descriptors raises EPERM
    _register(peer, socks)


def _take(peer, names: list):
    """Copies of the sockets a live holder of `peer` has bound at `names` (pidfd_getfd,
    which needs the right to ptrace it), or None unless every one was found."""
    inodes = {}
    wanted = {"@" + name.decode(): k for k, name in enumerate(names)}
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] in wanted:
                inodes[f"socket:[{parts[6]}]"] = wanted[parts[7]]
    if len(inodes) != len(names):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in peer.query().pids:
        got = {}
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
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
        except OSError:
            pass
        finally:
            os.close(pidfd)
        if len(got) == len(names):
            return [got[k] for k in range(len(names))]
        for sock in got.values():
            sock.close()
    return None


def forget(peer) -> None:
    """This process lets go of `peer`'s store (the peer was disconnected)."""
    _close(peer._bus._base, (peer._bus.name, peer._id))


def forget_bus(bus) -> None:
    """This process lets go of every store of `bus` (it is being closed here)."""
    for key in [k for k in _stores if k[0] == bus.name]:
        _close(bus._base, key)


def _close(base, key) -> None:
    slot, socks = _stores.pop(key, (0, ()))
    if socks:
        if base is not None:
            lib.b1_fds_register(base, slot, key[1], ffi.NULL, 0)
        for sock in socks:
            sock.close()


def tidy(name, base, stats) -> None:
    """After a gc of bus `name` (mapped at `base`) that did something (its b1_gc_stats):
    the stores this process holds of peers no longer connected are closed, the others
    swept (gc dropped messages whose descriptors they hold).  Bus.gc and the death
    watcher (watch.py) both call it."""
    if not (stats.peers_reaped or stats.blocks_completed or stats.blocks_removed):
        return
    out = ffi.new("struct b1_peer_info *")
    for key, (slot, _) in list(_stores.items()):
        if key[0] != name:
            continue
        if lib.b1_peer_query(base, slot, key[1], out) or out.state != _ACTIVE:
            _close(base, key)
        else:
            lib.b1_fds_sweep(base, slot, key[1])


def sweep(peer) -> None:
    """Close the descriptors at the heads of the store whose messages are no longer queued (a reset
    dropped them)."""
    lib.b1_fds_sweep(peer._bus.base(), peer._slot, peer._id)
