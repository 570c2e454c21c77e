"""A descriptor store's place in the filesystem (fds.py keeps which stores this process
holds; csrc/bus/fds.c posts to and takes from them).

Invariants:
  - A peer's store is three AF_UNIX datagram sockets: the inbox, bound at B1_FDS_DIR +
    its nonce + "/inbox" (b1_fds_address), and a socketpair (a, b) with no path, whose
    inode numbers the record keeps (written at b1_fds_register).  The directory has the segment's
    owner (or the caller's uid), the segment's group, and rwx for exactly the classes that
    may open the segment read-write (0700 for a 0600 bus); one found otherwise, or a
    symbolic link, is refused with an error naming it (`open_dir`).  So the kernel lets no
    other user send to, bind in or find a store.  A socket file gets rw for the same
    classes when they go beyond the owner.
  - The inbox has SO_PASSCRED before its bind: no datagram reaches it without its
    sender's credentials (`bind`).  a's send buffer is the most the kernel grants: what b
    can queue.
  - `bind` makes a whole store or none, and only when no live process holds the inbox (a
    holder has all three or none: binders hold the directory's flock); a stale path is
    unlinked first.
  - `take` copies a live holder's three sockets (pidfd_getfd: the right to ptrace it), all
    of them or none.
  - A bus's mover directory (`mover_dir`, checked by `open_dir` like a store's) lives as
    long as the bus's name: `remove_movers` removes it, with its stale names, when the
    name is unlinked (Bus.unlink, a reclaim) and no live process is bound there.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import stat

from ._lib import ffi, lib
from .errors import bus_error

_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the generic syscall table)


def path(peer) -> tuple:
    """The filesystem path of `peer`'s store's inbox, and the inode numbers of its pair as
    its record names them (0, 0 before any holder registered it)."""
    out, pair = ffi.new("char[]", 108), ffi.new("uint64_t[2]")
    n = lib.b1_fds_address(peer._bus.base(), peer._slot, peer._id, out, 108, pair)
    if n < 0:
        raise bus_error(n, f"the descriptor store of peer {peer._id}")
    return os.fsdecode(ffi.buffer(out, n)[:]), (pair[0], pair[1])


def classes(mode: int) -> tuple:
    """(directory mode, socket mode) for a segment of permission bits `mode`: rwx (rw on a
    socket) for each class that may open the segment read-write, nothing for the others."""
    dmode, smode = 0o700, 0o600
    if mode & 0o060 == 0o060:
        dmode, smode = dmode | 0o070, smode | 0o060
    if mode & 0o006 == 0o006:
        dmode, smode = dmode | 0o007, smode | 0o006
    return dmode, smode


def open_dir(path: str, owner: tuple) -> int:
    """An fd of a store's directory (or a bus's mover directory, fds.mover_socket), made
    when missing, checked: a directory (no symbolic link), of the segment's owner or this
    uid, the segment's group, mode exact."""
    uid, gid, mode = owner
    dmode = classes(mode)[0]
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


def live(path: str) -> bool:
    """Some process holds the socket bound at `path` (a stale path refuses a connection)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    finally:
        probe.close()


def bind(path: str, smode: int):
    """[inbox bound at `path` (a stale one unlinked first), a, b], or None when a live
    process holds the inbox (under the directory's flock: a holder has all three or none)."""
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        inbox.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before any datagram can come
        try:
            inbox.bind(path)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            if live(path):
                inbox.close()
                return None
            os.unlink(path)
            inbox.bind(path)
        if smode & 0o066:  # a bus of the group or others: they need write on the file
            os.chmod(path, smode)  # (for the owner alone the directory is what stands)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        inbox.close()
        raise
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)  # the kernel caps it at 2 * wmem_max
    return [inbox, a, b]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


def take(peer, inbox: str):
    """Copies of the inbox bound at `inbox` and of the pair its record names (read under
    the directory's flock: the holder that bound them wrote it under the same) that a live
    holder of `peer` (a recorded one, or this process's parent) holds (pidfd_getfd, which
    needs the right to ptrace it), or None unless all three were found in one holder."""
    pair = path(peer)[1]
    inodes = {f"socket:[{ino}]": k for k, ino in ((1, pair[0]), (2, pair[1])) if ino}
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] == inbox:
                inodes[f"socket:[{parts[6]}]"] = 0
    if len(set(inodes.values())) != 3:
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
        if len(got) == 3:
            return [got[k] for k in range(3)]
        for sock in got.values():
            sock.close()
    return None


def mover_dir(base) -> str | None:
    """The mover directory of the bus mapped (and attached) at `base`."""
    out = ffi.new("char[]", 108)
    n = lib.b1_fds_mover_address(base, out, 108)
    return os.path.dirname(os.fsdecode(ffi.buffer(out, n)[:])) if n > 0 else None


def remove_movers(path: str | None) -> None:
    """A bus's name was unlinked: its mover directory `path` (mover_dir) goes, unless a
    live process is still bound there (the stale names are unlinked first; the last live
    one out removes it then, fds.close_mover)."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        for entry in os.listdir(path):
            if lib.b1_fds_mover_stale(os.fsencode(entry)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(path, entry))
        os.rmdir(path)
