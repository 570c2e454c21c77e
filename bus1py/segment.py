"""The segment's file: a bus's name, opening and mapping it without following or
blocking, judging its owner, mode and header, taking over a dead bus's name, and finding
this user's buses.

Invariants:
  - A bus name is one path component of valid UTF-8 without NUL (posix_ipc would crash
    on either); `shm_name` is the one place that says so.
  - Every judgement of a segment reads the fd that is mapped or read, never the path: a
    name swapped between two looks changes nothing; a symbolic link or a FIFO is never
    followed or waited on.
  - A segment is mapped only after those checks, and handed on only once the C helper
    accepted its header (b1_attach); this module knows no Bus class above it.
  - A name is taken over (`reclaim`) only when every holder is dead and this process won
    the claim in the segment, one atomic step (b1_bus_reclaim): of racers, one unlinks.
"""
from __future__ import annotations

import errno
import mmap
import os
import stat

import posix_ipc

from . import fdpaths
from ._lib import ffi, lib
from .errors import bus_error

SHM_DIR = "/dev/shm"
_MAGIC = 0x7962317375627962  # csrc/bus/layout.h B1_MAGIC


def shm_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip("/"):
        raise ValueError(f"bus name must be a non-empty string, not {name!r}")
    name = "/" + name.lstrip("/")
    if "/" in name[1:] or len(name) > 255:
        raise ValueError(f"bus name {name!r} must be one path component of at most 254 characters")
    # posix_ipc hands the name to C as a NUL-terminated UTF-8 string: an embedded NUL or a
    # lone surrogate crashes it rather than raising, so both are refused here
    if "\x00" in name:
        raise ValueError(f"bus name {name!r} must not contain a NUL character")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"bus name {name!r} is not valid UTF-8 text") from None
    return name


def check_open_args(mode: int, trust_other_owner: bool = False) -> None:
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777:
        raise ValueError(f"bus mode must be permission bits from 0o000 to 0o777, not {mode!r}")
    if not isinstance(trust_other_owner, bool):
        raise TypeError(f"trust_other_owner must be True or False, not {trust_other_owner!r}")


def _open_segment(shm_name: str) -> int:
    """An fd of the segment `shm_name`, opened read-write.

    On Linux the segment is the file /dev/shm/NAME (what glibc's shm_open opens), so it is
    opened there directly with O_NOFOLLOW and O_NONBLOCK: a symbolic link is refused
    rather than followed, and a FIFO or other special file cannot block the open (its
    type is refused after, on the fd).  posix_ipc takes no such flags.  Elsewhere
    shm_open is the only way in, and the caller's fstat checks are what stands."""
    if os.path.isdir(SHM_DIR):
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            return os.open(SHM_DIR + shm_name, flags)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, f"no bus named {shm_name!r}") from None
        except PermissionError as e:
            raise PermissionError(e.errno, f"cannot open bus {shm_name!r}: {e.strerror}") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, f"{shm_name!r} is a symbolic link, not a bus segment") from None
            raise OSError(e.errno, f"cannot open bus {shm_name!r}: {e.strerror}") from None
    try:
        shm = posix_ipc.SharedMemory(shm_name)
    except posix_ipc.ExistentialError:
        raise FileNotFoundError(errno.ENOENT, f"no bus named {shm_name!r}") from None
    except posix_ipc.PermissionsError as e:
        raise PermissionError(errno.EACCES, f"cannot open bus {shm_name!r}: {e}") from None
    try:
        return os.dup(shm.fd)
    finally:
        shm.close_fd()


def _check_segment(shm_name: str, st: os.stat_result, mode: int, trust_other_owner: bool) -> None:
    """Refuse a segment that is not a regular file, belongs to another user (unless
    trusted) or is open to more than `mode` allows; see Bus.open."""
    if not stat.S_ISREG(st.st_mode):
        raise bus_error(errno.EBADMSG, f"{shm_name!r} is not a regular file")
    if st.st_uid != os.geteuid() and not trust_other_owner:
        raise PermissionError(errno.EPERM, f"bus {shm_name!r} is owned by uid {st.st_uid}, not by this "
                                           f"user (uid {os.geteuid()}); refused unless opened with "
                                           f"trust_other_owner=True")
    bits = stat.S_IMODE(st.st_mode)
    if bits & ~mode:
        raise PermissionError(errno.EPERM, f"bus {shm_name!r} has mode {bits:#05o}, wider than "
                                           f"{mode:#05o}; refused unless opened with mode={bits:#05o}")
    if st.st_size == 0:
        raise bus_error(errno.EBADMSG, f"{shm_name!r} is empty")

def map_segment(shm_name: str, mode: int, trust_other_owner: bool) -> tuple[mmap.mmap, os.stat_result]:
    """The segment `shm_name` mapped, and the fstat it was judged by: a regular file of
    this user (or trusted) within `mode` (see Bus.open), whose header the C helper
    accepts (b1_attach); else the error that says which, nothing left mapped."""
    fd = _open_segment(shm_name)
    try:
        # every check reads the fd that is mapped, never the path: a name swapped after
        # the open changes nothing here
        st = os.fstat(fd)
        _check_segment(shm_name, st, mode, trust_other_owner)
        try:
            mm = mmap.mmap(fd, st.st_size)
        except (OSError, OverflowError) as e:
            raise OSError(getattr(e, "errno", None) or errno.ENOMEM,
                          f"cannot map bus {shm_name!r} of {st.st_size} bytes: {e}") from None
    finally:
        os.close(fd)
    probe = ffi.from_buffer(mm)
    r = lib.b1_attach(probe, len(mm))
    ffi.release(probe)
    if r:
        recorded = int.from_bytes(mm[16:24], "little")  # struct b1_header.segment_size
        mm.close()
        if r == -errno.EBADMSG and recorded > st.st_size:
            raise bus_error(r, f"{shm_name!r} is truncated: {st.st_size} bytes, its header "
                               f"records {recorded}")
        raise bus_error(r, f"{shm_name!r}")
    return mm, st


def reclaim(shm_name: str, mode: int) -> str | None:
    """Unlink the bus `shm_name` if every holder is dead and this process won its claim
    (csrc/bus/bus.c b1_bus_reclaim): None when the name is free now, else why it stays."""
    try:
        mm, _ = map_segment(shm_name, mode, False)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"it cannot be judged ({e})"
    base = ffi.from_buffer(mm)
    try:
        r = lib.b1_bus_reclaim(base)
        if r == 0:
            try:
                posix_ipc.unlink_shared_memory(shm_name)
            except posix_ipc.ExistentialError:
                pass
            fdpaths.remove_movers(fdpaths.mover_dir(base))  # the bus's, now nobody's
            lib.b1_bus_unlink_stores(base)  # its dead peers' store directories
    finally:
        ffi.release(base)
        mm.close()
    if r == 0:
        return None
    if r == -errno.EBUSY:
        return "live processes use it"
    if r == -errno.EALREADY:
        return "another process is taking it over"
    return str(bus_error(r, shm_name))


def owner(st: os.stat_result) -> tuple[int, int, int]:
    """The segment's uid, gid and permission bits, from the fstat of its fd (fds.py
    gives its descriptor stores the same)."""
    return (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def list_names() -> list[str]:
    """Names of the bus1py buses in /dev/shm that belong to this user.

    Each entry is opened with O_NOFOLLOW and O_NONBLOCK and judged by fstat of that fd:
    a symbolic link, a FIFO (whose read-only open would otherwise block until a writer
    came) or any other special file, and a file of another owner are skipped, never
    followed, waited on or read."""
    names: list[str] = []
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return names
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for entry in sorted(entries):
        path = os.path.join(SHM_DIR, entry)
        try:
            # a first look that opens nothing: a FIFO is not even opened (an open would
            # pair with a writer waiting on it); the fd's fstat below is what decides
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            head = os.pread(fd, 8, 0)
        except OSError:
            continue
        finally:
            os.close(fd)
        if len(head) == 8 and int.from_bytes(head, "little") == _MAGIC:
            names.append("/" + entry)
    return names
