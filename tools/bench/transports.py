"""The peer transports under test, each as a Channel from one sender to k receivers.

A channel's `sender()` and `receiver(i)` are called in the process that uses that end (after
fork) and return plain callables.  Per-message ends (`send_batch == 0`, `recv_batch == 0`):
    send(payload: bytes) -> None        recv() -> bytes
Batch ends:
    send(payloads: list[bytes]) -> None recv(max_messages: int) -> list[bytes] (at least one)
`reverse()` gives a channel the other way (for ping-pong).  bus1py's channels are in
bus_channels.py, the rows the sections run in rows.py."""
from __future__ import annotations

import errno
import functools
import os
import secrets
import socket

try:
    import posix_ipc
except ImportError:  # pragma: no cover - a dependency of bus1py itself
    posix_ipc = None
try:
    import faster_fifo
except ImportError:  # pragma: no cover - the [bench] extra
    faster_fifo = None

RETRY = (errno.EXFULL, errno.EDQUOT)
MQ_DEPTH = 1024


class Channel:
    name = "?"
    k = 1
    send_batch = 0
    recv_batch = 0

    def sender(self):
        raise NotImplementedError

    def receiver(self, i=0):
        raise NotImplementedError

    def reverse(self):
        return type(self)(self.size)

    def close(self):
        pass


class MPQueueChannel(Channel):
    name = "mp.Queue"

    def __init__(self, size):
        from .common import CTX
        self.size = size
        self.q = CTX.Queue()

    def sender(self):
        return self.q.put

    def receiver(self, i=0):
        return self.q.get

    def close(self):
        self.q.close()
        self.q.cancel_join_thread()


class MPPipeChannel(Channel):
    name = "mp.Pipe"

    def __init__(self, size):
        from .common import CTX
        self.size = size
        self.r, self.w = CTX.Pipe(duplex=False)

    def sender(self):
        return self.w.send_bytes

    def receiver(self, i=0):
        return self.r.recv_bytes

    def close(self):
        self.r.close()
        self.w.close()


class OsPipeChannel(Channel):
    """Raw os.pipe with fixed-size frames: every message is exactly `size` bytes."""

    name = "os.pipe"

    def __init__(self, size):
        self.size = size
        self.r, self.w = os.pipe()

    def sender(self):
        write, w, size = os.write, self.w, self.size

        def s(p):
            n = write(w, p)
            while n < size:  # only for frames above the pipe's capacity
                n += write(w, p[n:])
        return s

    def receiver(self, i=0):
        read, r, size = os.read, self.r, self.size

        def rcv():
            b = read(r, size)
            if len(b) == size:
                return b
            parts, got = [b], len(b)
            while got < size:
                c = read(r, size - got)
                if not c:
                    raise EOFError("pipe closed")
                parts.append(c)
                got += len(c)
            return b"".join(parts)
        return rcv

    def close(self):
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


class SocketChannel(Channel):
    """AF_UNIX SOCK_SEQPACKET; buffers grown for big messages.  The constructor sends one
    message through, so a size the socket cannot carry fails here, not in a worker."""

    name = "socketpair"

    def __init__(self, size):
        self.size = size
        self.a, self.b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if size > 65536:
            for s, opt in ((self.a, socket.SO_SNDBUF), (self.b, socket.SO_RCVBUF)):
                s.setsockopt(socket.SOL_SOCKET, opt, 4 * size)
        self.a.send(bytes(size))
        if len(self.b.recv(size)) != size:
            raise ValueError(f"socketpair cannot carry {size} B in one message")

    def sender(self):
        return self.a.send

    def receiver(self, i=0):
        return functools.partial(self.b.recv, self.size)

    def close(self):
        self.a.close()
        self.b.close()


class MQChannel(Channel):
    """posix_ipc message queues, one per receiver; the sender sends k unicasts."""

    name = "posix_ipc MQ"

    def __init__(self, size, k=1):
        self.size, self.k = size, k
        self.qs = []
        try:
            for _ in range(k):
                name = f"/b1bench-{os.getpid()}-{secrets.token_hex(4)}"
                try:
                    q = posix_ipc.MessageQueue(name, posix_ipc.O_CREX, max_messages=MQ_DEPTH,
                                               max_message_size=max(size, 64))
                except (ValueError, OSError, posix_ipc.Error):
                    q = posix_ipc.MessageQueue(name, posix_ipc.O_CREX, max_message_size=max(size, 64))
                self.qs.append(q)
        except BaseException:
            self.close()
            raise
        self.depth = self.qs[0].max_messages

    def sender(self):
        if self.k == 1:
            return self.qs[0].send
        sends = [q.send for q in self.qs]

        def s(p):
            for f in sends:
                f(p)
        return s

    def receiver(self, i=0):
        receive = self.qs[i].receive

        def r():
            return receive()[0]
        return r

    def close(self):
        for q in self.qs:
            try:
                q.close()
                q.unlink()
            except posix_ipc.Error:
                pass


class FasterFifoChannel(Channel):
    """faster_fifo.Queue; send_batch/recv_batch > 0 use put_many/get_many.  The buffer holds
    at least four batches of the size under test."""

    name = "faster_fifo"

    def __init__(self, size, send_batch=0, recv_batch=0):
        self.size, self.send_batch, self.recv_batch = size, send_batch, recv_batch
        self.q = faster_fifo.Queue(max_size_bytes=max(4 << 20, 4 * max(send_batch, 1) * (size + 64)))

    def sender(self):
        if self.send_batch:
            return functools.partial(self.q.put_many, timeout=600.0)
        return functools.partial(self.q.put, timeout=600.0)

    def receiver(self, i=0):
        if self.recv_batch:
            get_many = self.q.get_many

            def r(m):
                return get_many(timeout=600.0, max_messages_to_get=m)
            return r
        return functools.partial(self.q.get, timeout=600.0)

    def reverse(self):
        return FasterFifoChannel(self.size, self.send_batch, self.recv_batch)

    def close(self):
        self.q.close()
