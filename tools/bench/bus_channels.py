"""bus1py's channels: per-message (Peer.send / Peer.recv), batch (send_many / recv_many)
and zero-copy (recv(copy=False), reserve/commit)."""
from __future__ import annotations

import functools

import bus1py

from .transports import RETRY, Channel

# a bus whose receivers' quotas hold a whole multicast run (section 2), whatever its k:
# a lone sender's fair share is half of each, 2**21 messages and 2**39 bytes
FANOUT_QUOTAS = dict(quota_messages=1 << 22, quota_bytes=1 << 40)


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


class BusBatchChannel(BusChannel):
    """bus1py through `Peer.send_many` / `Peer.recv_many`:
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
    """bus1py receiving with `Peer.recv(copy=False)`: the payload is a view
    into the pool, released after use as a real consumer would."""

    def receiver(self, i=0):
        recv = functools.partial(self.rx[i].recv, copy=False)

        def r():
            m = recv()
            n = len(m.payload)
            m.release()
            return n
        return r


class BusReserveChannel(BusZeroCopyChannel):
    """bus1py zero-copy both ways: the sender takes a record with `Peer.reserve`, writes the
    payload into it and commits; the receiver reads it with `recv(copy=False)`.  The payload
    already exists as bytes here, as for every other row, so writing it is one copy, the
    same one `send` makes: the row shows the reserve/commit calls' own cost, not what a
    producer that builds its data in place saves."""

    def sender(self):
        reserve, dests, retries = self.tx.reserve, list(self.handles), [0]

        def s(p):
            while True:
                try:
                    with reserve(dests, len(p)) as r:
                        r.payload[:] = p
                    return
                except OSError as e:
                    if e.errno not in RETRY:
                        raise
                    retries[0] += 1
        s.retries = retries
        return s


class BusTopicChannel(Channel):
    """bus1py topics: a publisher peer's topic (`Peer.topic`), k subscriber peers
    (`Peer.subscribe`), `topic.send(payload)` and `sub.recv()`, each called as the
    multicast row calls `Peer.send` and `Peer.recv` (the C call itself, no Python frame of
    the harness's per message).  `limits` must hold a run: a subscriber over its quota
    would miss a message and its receiver wait for it until the harness's timeout fails
    the row.  EXFULL (the pool or the entries full) is retried as a send's refusal is."""

    name = "bus1py topic"

    def __init__(self, size, k=1, **limits):
        self.size, self.k = size, k
        self.bus = bus1py.Bus.create(**limits)
        self.topic = self.bus.peer().topic("bench")
        self.subs = [self.bus.peer().subscribe("bench") for _ in range(k)]
        assert self.topic.subscribers == k

    def sender(self):
        f = functools.partial(self.topic.send)
        f.retries = [0]
        return f

    def receiver(self, i=0):
        recv = self.subs[i].recv

        def r():
            return recv().payload
        return r

    def close(self):
        self.bus.__exit__(None, None, None)
