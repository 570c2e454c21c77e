"""`bus`: one bus1py bus; each process has a peer and one node, and holds a handle to
every other process's node (full mesh, transferred in the parent before fork).

Invariants: a send never blocks; one the bus refuses for want of room (a receiver's
quota, the pool: EDQUOT, EXFULL, EAGAIN) waits in the endpoint and is retried in order;
any other error is raised.  A message carries the sender index in its first 2 bytes.
`send_many` is one bus transaction to all its destinations (native multicast).
"""
from __future__ import annotations

import errno

from ...bus import Bus
from . import Endpoint, Transport, frame, unframe

_ROOM = {errno.EDQUOT, errno.EXFULL, errno.EAGAIN, errno.ENOBUFS, errno.ENOSPC}


class BusTransport(Transport):
    kind = "bus"
    native_multicast = True

    def setup(self):
        n, cfg = self.n, self.cfg
        self.bus = Bus.create(
            max_peers=n + 8, max_nodes=max(1024, 2 * n), max_handles=max(4096, 2 * n * n + n),
            max_entries=262144, max_payload=max(1 << 16, cfg.sizes.b + 64 + 4 * n * n + 8 * n),
            max_dests=max(16, n), spin_ns=cfg.spin_ns, pool_size=128 << 20)
        self.peers = [self.bus.peer() for _ in range(n)]
        own = [p.create_node() for p in self.peers]
        self.handles = [{i: self.peers[i].transfer(own[i], self.peers[j]) for i in range(n) if i != j}
                        for j in range(n)]
        self.name = self.bus.name

    def endpoint(self, index):
        return BusEndpoint(index, self.peers[index], self.handles[index])

    def close(self):
        if getattr(self, "bus", None) is not None:
            self.bus.close()
            try:
                self.bus.unlink()
            except FileNotFoundError:
                pass
            self.bus = None


class BusEndpoint(Endpoint):
    def __init__(self, index, peer, handles):
        super().__init__()
        self.index = index
        self.peer = peer
        self.handles = handles  # process -> handle of its node
        self.got = []

    def _try_send(self, dest, data):
        hs = [self.handles[d] for d in dest] if isinstance(dest, list) else [self.handles[dest]]
        try:
            self.peer.send(hs, frame(self.index, data))
        except OSError as e:
            if e.errno in _ROOM:
                return False
            raise
        return True

    def send_many(self, dests, data):
        self.send(list(dests), data)

    def poll(self, limit=512):
        out, self.got = self.got, []
        recv = self.peer.recv
        while len(out) < limit:
            try:
                out.append(unframe(recv(0).payload))
            except BlockingIOError:
                break
        return out

    def wait(self, timeout):
        if not self.got:
            try:
                self.got.append(unframe(self.peer.recv(timeout).payload))
            except TimeoutError:
                pass


TRANSPORT = BusTransport
