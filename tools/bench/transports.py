"""The transports under test, each as a Channel from one sender to k receivers, and the
registry of rows the sections run (`unicast_transports`, `multicast_variants`).

A channel's `sender()` and `receiver(i)` are called in the process that uses that end (after
fork) and return plain callables.  Per-message ends (`send_batch == 0`, `recv_batch == 0`):
    send(payload: bytes) -> None        recv() -> bytes
Batch ends:
    send(payloads: list[bytes]) -> None recv(max_messages: int) -> list[bytes] (at least one)
`reverse()` gives a channel the other way (for ping-pong)."""
from __future__ import annotations

import errno
import functools
import inspect
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Callable

import bus1py

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


class BusChannel(Channel):
    """bus1py: k receiver peers, each owning a node; the sender holds a handle to each.

    multicast=True sends one transaction to all k nodes; False sends k unicasts."""

    name = "bus1py"

    def __init__(self, size, k=1, multicast=True, bus=None, peers=None, **limits):
        self.size, self.k, self.multicast = size, k, multicast
        self._own = bus is None
        self.bus = bus or bus1py.Bus.create(**limits)
        if peers:
            self.tx, self.rx = peers
        else:
            self.tx = self.bus.peer()
            self.rx = [self.bus.peer() for _ in range(k)]
        self.handles = [p.transfer(p.create_node(), self.tx) for p in self.rx]

    def sender(self):
        send = self.tx.send
        retries = [0]
        if self.multicast or self.k == 1:
            # Peer.send itself, bound to the destinations: no Python frame of the harness's
            # per message, as the other transports' put/send are called directly; a refusal
            # for a full receiver is retried by the harness loops (harness.resend)
            f = functools.partial(send, list(self.handles))
            f.retries = retries
            return f
        dlist = [[h] for h in self.handles]

        def g(p):
            for d in dlist:
                while True:
                    try:
                        send(d, p)
                        break
                    except OSError as e:
                        if e.errno not in RETRY:
                            raise
                        retries[0] += 1
        g.retries = retries
        return g

    def receiver(self, i=0):
        recv = self.rx[i].recv

        def r():
            return recv().payload
        return r

    def reverse(self):
        # the same bus and peers the other way: each process of a ping-pong holds one peer
        return BusChannel(self.size, 1, True, bus=self.bus, peers=(self.rx[0], [self.tx]))

    def close(self):
        if self._own:
            self.bus.__exit__(None, None, None)


def _bus_has_batches():
    return all(hasattr(bus1py.Peer, f) for f in ("send_many", "recv_many"))


def _bus_has_zero_copy():
    try:
        return "copy" in inspect.signature(bus1py.Peer.recv).parameters
    except (TypeError, ValueError):
        return False


class BusBatchChannel(BusChannel):
    """bus1py through `Peer.send_many` / `Peer.recv_many` (issue 16 item 1).  Registered only
    when the Peer has both calls; the API it is written against is the issue's:
    `send_many(destinations, payloads) -> int` (how many were sent, raising if none could be)
    and `recv_many(max_messages) -> list[Message]`."""

    def __init__(self, size, batch, **kw):
        super().__init__(size, **kw)
        self.send_batch = self.recv_batch = batch

    def sender(self):
        send_many, dests, retries = self.tx.send_many, list(self.handles), [0]

        def s(payloads):
            done = 0
            while done < len(payloads):
                try:
                    done += send_many(dests, payloads[done:] if done else payloads)
                except OSError as e:
                    if e.errno not in RETRY:
                        raise
                    retries[0] += 1
        s.retries = retries
        return s

    def receiver(self, i=0):
        recv_many = self.rx[i].recv_many

        def r(m):
            return [x.payload for x in recv_many(m)]
        return r


class BusZeroCopyChannel(BusChannel):
    """bus1py receiving with `Peer.recv(copy=False)` (issue 16 item 2): the payload is a view
    into the pool, released after use as a real consumer would.  Registered only when
    `Peer.recv` takes `copy`."""

    def receiver(self, i=0):
        recv = functools.partial(self.rx[i].recv, copy=False)

        def r():
            m = recv()
            n = len(m.payload)
            m.release()
            return n
        return r


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


@dataclass(frozen=True)
class Transport:
    """One row family of the two-process sections.

    `peer` groups the rows judged together (a target compares bus1py's best row with each
    peer's best row); `api` is "per-message", "batch" or "zero-copy"; `missing` says why a
    row cannot run against this build of bus1py (the row is listed, not measured)."""
    name: str
    peer: str
    make: Callable
    api: str = "per-message"
    rtt: bool = True
    placements: tuple = ("pinned", "unpinned")
    missing: str | None = None


def unicast_transports(batch=64):
    """Every two-process row, bus1py's first.  Peers run pinned and unpinned: helper threads
    (mp.Queue's feeder) or a receiver that should move away from another job do better
    unpinned, so each peer is judged at its better placement."""
    out = [
        Transport("bus1py", "bus1py", lambda s: BusChannel(s)),
        Transport("bus1py spin_ns=0", "bus1py", lambda s: BusChannel(s, spin_ns=0), placements=("pinned",)),
        Transport("bus1py send_many/recv_many", "bus1py", lambda s: BusBatchChannel(s, batch), api="batch",
                  rtt=False, missing=None if _bus_has_batches() else "Peer has no send_many/recv_many yet"),
        Transport("bus1py recv(copy=False)", "bus1py", lambda s: BusZeroCopyChannel(s), api="zero-copy", rtt=False,
                  missing=None if _bus_has_zero_copy() else "Peer.recv has no copy= parameter yet"),
        Transport("mp.Queue", "mp.Queue", MPQueueChannel),
        Transport("mp.Pipe", "mp.Pipe", MPPipeChannel),
        Transport("os.pipe", "os.pipe", OsPipeChannel),
        Transport("socketpair", "socketpair", SocketChannel),
    ]
    if posix_ipc is not None:
        out.append(Transport("posix_ipc MQ", "posix_ipc MQ", lambda s: MQChannel(s)))
    if faster_fifo is not None:
        out += [Transport("faster_fifo", "faster_fifo", FasterFifoChannel),
                Transport("faster_fifo get_many", "faster_fifo", lambda s: FasterFifoChannel(s, 0, batch),
                          api="batch", rtt=False),
                Transport("faster_fifo put_many/get_many", "faster_fifo",
                          lambda s: FasterFifoChannel(s, batch, batch), api="batch", rtt=False)]
    return out


def multicast_variants():
    out = {"bus1py multicast": lambda s, k: BusChannel(s, k, multicast=True),
           "bus1py multicast spin_ns=0": lambda s, k: BusChannel(s, k, multicast=True, spin_ns=0),
           "bus1py k x unicast": lambda s, k: BusChannel(s, k, multicast=False)}
    if posix_ipc is not None:
        out["posix_ipc MQ k x unicast"] = lambda s, k: MQChannel(s, k)
    return out
