"""What the descriptor tests share (test_fds.py, test_fds_store.py, test_fds_room.py):
this process's open descriptors, a pipe's end-of-file, a descriptor table filled to its
limit, and a message that arrives with the pipe end it was sent with."""
from __future__ import annotations

import errno
import os
import select


def open_fds() -> set:
    """This process's open descriptors (not the one the listing itself used)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(fd))
            out.add(int(fd))
        except OSError:
            pass
    return out


def eof(read_end, timeout=5.0) -> bool:
    """Every write end of the pipe is closed: the reader sees end-of-file in time."""
    ready, _, _ = select.select([read_end], [], [], timeout)
    return bool(ready) and os.read(read_end, 64) == b""


def fill_table() -> list:
    """Descriptors (copies of stderr) opened until the table is full (EMFILE): the
    caller's to close."""
    fillers = []
    try:
        while True:
            fillers.append(os.dup(2))
    except OSError as e:
        if e.errno != errno.EMFILE:
            for fd in fillers:
                os.close(fd)
            raise
    return fillers


def arrives_with(r, payload: bytes, rd: int) -> None:
    """r's next message is `payload` with one descriptor, the write end of pipe `rd`; once
    that copy is closed no write end is left anywhere (the pipe's reader sees end-of-file)."""
    m = r.recv(timeout=1)
    assert m.payload == payload and len(m.fds) == 1
    assert os.fstat(m.fds[0]).st_ino == os.fstat(rd).st_ino
    os.close(m.fds[0])
    assert eof(rd)
    os.close(rd)
