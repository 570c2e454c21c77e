"""`pipe`: one `os.pipe` per ordered (sender, receiver) pair, length-prefixed frames.

Invariants: a pipe is a byte stream with one writer and one reader, so each channel is
FIFO and the sender is known by the pipe a frame came from.  Both ends are non-blocking;
a frame the pipe cannot take whole stays in the endpoint (what was written of it is
remembered, the rest is written first next time), so frames never interleave.
"""
from __future__ import annotations

import os
import resource
import select

from . import Endpoint, Transport

_LEN = 4


class PipeTransport(Transport):
    kind = "pipe"

    def setup(self):
        n = self.n
        need = 2 * n * n + 256
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < need:
            if hard != resource.RLIM_INFINITY and hard < need:
                raise ValueError(f"--transport pipe with {n} processes needs {need} file "
                                 f"descriptors; the limit is {hard}")
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        self.fds = {}  # (src, dst) -> (read fd, write fd)
        for s in range(n):
            for d in range(n):
                if s != d:
                    r, w = os.pipe()
                    os.set_blocking(r, False)
                    os.set_blocking(w, False)
                    self.fds[s, d] = (r, w)

    def inherited_fds(self, index):
        keep = set()
        for (s, d), (r, w) in self.fds.items():
            if d == index:
                keep.add(r)
            if s == index:
                keep.add(w)
        return keep

    def all_fds(self):
        return [fd for pair in self.fds.values() for fd in pair]

    def endpoint(self, index):
        return PipeEndpoint(index, {s: r for (s, d), (r, _) in self.fds.items() if d == index},
                            {d: w for (s, d), (_, w) in self.fds.items() if s == index})

    def close(self):
        for fd in self.all_fds():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}


class PipeEndpoint(Endpoint):
    def __init__(self, index, read_fds, write_fds):
        super().__init__()
        self.index = index
        self.src_of = {fd: s for s, fd in read_fds.items()}
        self.write_fds = write_fds
        self.inbuf = {fd: bytearray() for fd in read_fds.values()}
        self.part = None  # (dest, frame, bytes written): a frame half in its pipe
        self.poller = select.poll()
        for fd in read_fds.values():
            self.poller.register(fd, select.POLLIN)
        self.ready = []

    @property
    def backlog(self):
        return bool(self.pending or self.part)

    def send(self, dest, data):
        buf = len(data).to_bytes(_LEN, "little") + data
        if self.part or self.pending:
            self.pending.append((dest, buf))
        else:
            self._push(dest, buf)

    def _push(self, dest, buf, off=0) -> bool:
        """Write one frame from `off`; True when all of it is in the pipe."""
        fd = self.write_fds[dest]
        try:
            while off < len(buf):
                off += os.write(fd, memoryview(buf)[off:])
        except BlockingIOError:
            if off == 0:
                self.pending.appendleft((dest, buf))
            else:  # part of it is in the pipe: the rest goes next, before anything else
                self.part = (dest, buf, off)
            return False
        return True

    def flush(self):
        if self.part:
            part, self.part = self.part, None
            if not self._push(*part):
                return
        while self.pending:
            if not self._push(*self.pending.popleft()):
                return

    def _read_ready(self, timeout_ms):
        for fd, _ in self.poller.poll(timeout_ms):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                continue
            b = self.inbuf[fd]
            b += chunk
            src = self.src_of[fd]
            off = 0
            while len(b) - off >= _LEN:
                size = int.from_bytes(b[off:off + _LEN], "little")
                if len(b) - off - _LEN < size:
                    break
                self.ready.append((src, bytes(b[off + _LEN:off + _LEN + size])))
                off += _LEN + size
            del b[:off]

    def poll(self, limit=512):
        if len(self.ready) < limit:
            self._read_ready(0)
        out, self.ready = self.ready[:limit], self.ready[limit:]
        return out

    def wait(self, timeout):
        if not self.ready:
            self._read_ready(int(timeout * 1000))


TRANSPORT = PipeTransport
