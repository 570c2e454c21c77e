"""`unix`: one AF_UNIX datagram socket per receiver (abstract address), every sender
`sendto`s it; a datagram carries the sender index in its first 2 bytes.

Invariants: datagrams keep their boundaries; one sender's datagrams to one receiver
arrive in order (one kernel queue per socket); a full receiver queue makes the
non-blocking `sendto` fail (EAGAIN), and the datagram waits in the endpoint.
"""
from __future__ import annotations

import os
import select
import socket

from . import Endpoint, Transport, frame, unframe


class UnixTransport(Transport):
    kind = "unix"

    def setup(self):
        token = os.urandom(4).hex()
        self.addrs = [f"\0bus1py-stress-{os.getpid()}-{token}-{i}" for i in range(self.n)]
        self.socks = []
        for a in self.addrs:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(a)
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            self.socks.append(s)

    def inherited_fds(self, index):
        return {self.socks[index].fileno()}

    def all_fds(self):
        return [s.fileno() for s in self.socks]

    def endpoint(self, index):
        return UnixEndpoint(index, self.socks[index], self.addrs)

    def close(self):
        for s in self.socks:  # abstract addresses vanish with the last socket
            s.close()


class UnixEndpoint(Endpoint):
    def __init__(self, index, sock, addrs):
        super().__init__()
        self.index = index
        self.sock = sock
        self.addrs = addrs

    def _try_send(self, dest, data):
        try:
            self.sock.sendto(frame(self.index, data), self.addrs[dest])
        except BlockingIOError:
            return False
        return True

    def poll(self, limit=512):
        out = []
        recv = self.sock.recv
        while len(out) < limit:
            try:
                out.append(unframe(recv(1 << 20)))
            except BlockingIOError:
                break
        return out

    def wait(self, timeout):
        select.select([self.sock], [], [], timeout)


TRANSPORT = UnixTransport
