"""bus1 as message passing: transcripts of every wire, blocks, one order at every receiver,
side channels, byte counts constant in n, and wires that must be refused."""
from __future__ import annotations

import copy
import struct

import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.bus1 import (ACK_COST, COMMIT_COST, REPLY_COST, STAGE_COST, SYNC_COMMIT_COST,
                                SYNC_COST, Bus1)
from bus1py.sim import fast


def stage(sender, tx, clock, payload):
    return struct.pack("<BHII", 0, sender, tx, clock) + payload


def reply(tx, clock):
    return struct.pack("<BII", 1, tx, clock)


def sync(tx, ts):
    return struct.pack("<BII", 2, tx, ts)


def ack(tx):
    return struct.pack("<BI", 3, tx)


def commit(tx):
    return struct.pack("<BI", 4, tx)


def sync_commit(tx, ts):
    return struct.pack("<BII", 5, tx, ts)


def procs(n):
    return [Bus1(i, n) for i in range(n)]


def state(p):
    out = {seq: (r.tx.max_ts, r.tx.ts, r.dests, r.waiting, r.commit) for seq, r in p.out.items()}
    return copy.deepcopy((p.queue.clock, p.queue.entries, p.seq, out,
                          [r.tx.seq for r in p.staging], [r.tx.seq for r in p.syncing],
                          p.open, p.last_tx))


class Net:
    """Wires in flight, handed over in whatever order a test names."""

    def __init__(self, n):
        self.p = procs(n)
        self.flight = []            # (src, dest, data, cost)
        self.got = {i: [] for i in range(n)}

    def _post(self, src, step):
        for (dest, data), cost in zip(step.wires, step.costs):
            self.flight.append((src, dest, data, cost))
        self.got[src].extend(payload for _, payload in step.delivered)
        return step

    def send(self, src, dests, payload):
        return self._post(src, self.p[src].send(dests, payload))

    def hand(self, src, dest, tag=None, wire=None):
        """Deliver the oldest wire from src to dest (of type `tag`, or exactly `wire`)."""
        for i, (s, d, data, _) in enumerate(self.flight):
            if s == src and d == dest and (tag is None or data[0] == tag) \
                    and (wire is None or data == wire):
                del self.flight[i]
                return self._post(dest, self.p[dest].receive(src, data))
        raise AssertionError(f"no wire {src}->{dest} tag {tag} in flight")

    def drain(self):
        while self.flight:
            s, d, data, _ = self.flight.pop(0)
            self._post(d, self.p[d].receive(s, data))


def test_registered_and_flags():
    assert causal.protocol_class("bus1") is Bus1
    assert Bus1.multicast == "native" and Bus1.causal
    assert isinstance(causal.create("bus1", 0, 2), Bus1)


def test_multicast_transcript_every_wire():
    p0, p1, p2 = procs(3)
    p2.queue.sync(6)                                    # p2 has seen more than the others
    s = p0.send([1, 2], b"m")
    assert s.wires == [(1, stage(0, 0, 0, b"m")), (2, stage(0, 0, 0, b"m"))]
    assert s.costs == [STAGE_COST] * 2 == [WireCost(1, 10, 1, True)] * 2
    assert s.delivered == [] and p0.busy

    r1, r2 = p1.receive(0, s.wires[0][1]), p2.receive(0, s.wires[1][1])
    assert r1.wires == [(0, reply(0, 0))] and r2.wires == [(0, reply(0, 6))]
    assert r1.costs == [REPLY_COST] == [WireCost(0, 9, 0, False)]
    assert p1.queue.front() == (1, 0, 0, 0) and p2.queue.front() == (7, 0, 0, 0)   # blocks
    assert p1.held == p2.held == 1

    assert p0.receive(2, r2.wires[0][1]).wires == []    # one reply still due
    st = p0.receive(1, r1.wires[0][1])                  # max(0, 6) + 2
    assert st.wires == [(1, sync(0, 8)), (2, sync(0, 8))] and st.costs == [SYNC_COST] * 2
    assert p0.queue.clock == 8 and p0.busy

    a1, a2 = p1.receive(0, sync(0, 8)), p2.receive(0, sync(0, 8))
    assert a1.wires == [(0, ack(0))] == [(0, b"\x03\x00\x00\x00\x00")] and a1.delivered == []
    assert a1.costs == [ACK_COST] == [WireCost(0, 5, 0, False)]
    assert p1.queue.clock == p2.queue.clock == 8        # synced before anything is visible

    assert p0.receive(1, ack(0)).wires == []
    c = p0.receive(2, ack(0))
    assert c.wires == [(1, commit(0)), (2, commit(0))] and c.costs == [COMMIT_COST] * 2
    assert not p0.busy                                  # past the sync round

    for p in (p1, p2):
        d = p.receive(0, commit(0))
        assert d.wires == [] and d.delivered == [(0, b"m")] and p.held == 0


def test_unicast_folds_sync_into_the_commit():
    p0, p1 = procs(2)
    s = p0.send([1], b"a")
    r = p1.receive(0, s.wires[0][1])
    st = p0.receive(1, r.wires[0][1])
    assert st.wires == [(1, sync_commit(0, 2))] and st.costs == [SYNC_COMMIT_COST]
    assert p0.busy and p1.held == 1
    d = p1.receive(0, sync_commit(0, 2))
    assert d.delivered == [(0, b"a")] and d.wires == [(0, ack(0))] and p1.held == 0
    assert p0.receive(1, ack(0)).wires == [] and not p0.busy


def test_pipelined_sends_stamp_and_commit_in_send_order():
    p0, p1 = procs(2)
    sa, sb = p0.send([1], b"a"), p0.send([1], b"b")     # both stage at once
    assert sb.wires == [(1, stage(0, 1, 0, b"b"))] and p0.busy
    rb = p1.receive(0, sb.wires[0][1])                  # the network swaps them
    ra = p1.receive(0, sa.wires[0][1])
    assert p0.receive(1, rb.wires[0][1]).wires == []    # b may not stamp before a
    st = p0.receive(1, ra.wires[0][1])                  # stamps a (2), then b (4); a may
    assert st.wires == [(1, sync_commit(0, 2)), (1, sync(1, 4))]    # commit, b only sync
    assert st.costs == [SYNC_COMMIT_COST, SYNC_COST]
    assert p1.receive(0, sync(1, 4)).wires == [(0, ack(1))]
    assert p0.receive(1, ack(1)).wires == []            # b waits for a's sync round
    d = p1.receive(0, sync_commit(0, 2))                # b's block (staged first, at 1)
    assert d.delivered == [] and d.wires == [(0, ack(0))]   # holds a back: no deadlock,
    nxt = p0.receive(1, ack(0))                         # since the ACK is what b waits for
    assert nxt.wires == [(1, commit(1))] and not p0.busy and p0.out == {}
    assert p1.receive(0, commit(1)).delivered == [(0, b"a"), (0, b"b")]


def test_a_pipelined_multicast_commits_only_after_the_earlier_sync_round():
    net = Net(3)
    net.send(0, [1, 2], b"m1")
    net.send(0, [1, 2], b"m2")
    for dest in (1, 2):
        net.hand(0, dest), net.hand(0, dest)            # both STAGEs
    for dest in (1, 2):
        net.hand(dest, 0), net.hand(dest, 0)            # all four REPLYs: both stamped
    assert [net.p[0].out[i].tx.ts for i in (0, 1)] == [2, 4]
    for dest in (1, 2):
        net.hand(0, dest, tag=2)                        # m1's SYNCs
        net.hand(0, dest, tag=2)                        # m2's SYNCs
    net.hand(1, 0, wire=ack(1)), net.hand(2, 0, wire=ack(1)), net.hand(1, 0, wire=ack(0))
    assert all(data[0] != 4 for _, _, data, _ in net.flight)   # m2 waits for m1's rounds
    net.hand(2, 0, wire=ack(0))                         # m1's last ACK: both commit
    assert sorted(data for _, _, data, _ in net.flight) == [commit(0), commit(0), commit(1),
                                                           commit(1)]
    net.flight.reverse()                                # m2's COMMITs arrive first
    net.drain()
    assert net.got[1] == net.got[2] == [b"m1", b"m2"]


def test_a_block_at_the_front_holds_a_later_committed_entry():
    net = Net(3)
    net.send(1, [0], b"slow")
    net.hand(1, 0)                                      # slow's block at 0
    net.send(2, [0], b"fast")
    net.hand(2, 0), net.hand(0, 2), net.hand(2, 0)      # fast: staged, stamped, committed
    assert net.got[0] == [] and net.p[0].held == 2      # committed, but behind the block
    net.hand(0, 1), net.hand(1, 0)                      # slow commits at the same ts 2
    assert net.got[0] == [b"slow", b"fast"]             # the tie goes to sender 1
    net.drain()
    assert not net.p[1].busy and not net.p[2].busy


def test_concurrent_multicasts_are_delivered_in_one_order():
    net = Net(4)
    net.send(2, [0, 1], b"x")
    net.send(3, [1, 0], b"y")
    for dest in (0, 1):                                 # both stage everywhere first
        net.hand(2, dest), net.hand(3, dest)
    for src in (2, 3):
        for dest in (0, 1):
            net.hand(dest, src)                         # replies: both stamp 2
    assert net.p[2].out[0].tx.ts == net.p[3].out[0].tx.ts == 2
    net.drain()                                         # syncs, acks, then the commits
    assert net.got[0] == net.got[1] == [b"x", b"y"]


def test_concurrent_multicasts_commit_in_opposite_orders():
    net = Net(4)
    net.send(3, [0, 1], b"y")
    net.send(2, [1, 0], b"x")
    for src in (3, 2):
        for dest in (0, 1):
            net.hand(src, dest)
            net.hand(dest, src)
    for src in (3, 2):
        for dest in (0, 1):
            net.hand(src, dest)                         # SYNC
            net.hand(dest, src)                         # ACK
    net.hand(3, 0), net.hand(2, 0), net.hand(2, 1), net.hand(3, 1)   # COMMITs crossed
    assert net.got[0] == net.got[1] and sorted(net.got[0]) == [b"x", b"y"]
    assert net.flight == []


def test_side_channel_effect_is_delivered_after_its_cause():
    """X (3) multicasts m to A (1) and B (2); A delivers m and tells D (0) through a pipe; D
    sends m2 to B while m's COMMIT to B is still in flight. D's id is below X's, so a tie on
    the timestamp would put m2 first: only the sync round (B's clock already at ts(m)) keeps
    m2 above m."""
    net = Net(4)
    net.p[3].queue.sync(10)
    net.send(3, [1, 2], b"m")
    for dest in (1, 2):
        net.hand(3, dest), net.hand(dest, 3)
    ts_m = net.p[3].out[0].tx.ts
    for dest in (1, 2):
        net.hand(3, dest), net.hand(dest, 3)            # SYNC, ACK
    net.hand(3, 1)                                      # COMMIT at A only
    assert net.got[1] == [b"m"] and net.p[2].queue.clock == ts_m
    net.send(0, [2], b"m2")                             # ... after A's signal
    net.hand(0, 2), net.hand(2, 0)
    assert net.p[0].out[0].tx.ts > ts_m
    net.hand(0, 2)                                      # m2 committed at B, behind m's block
    assert net.got[2] == []
    net.hand(3, 2)                                      # m's late COMMIT
    assert net.got[2] == [b"m", b"m2"]


def test_a_later_send_stays_invisible_until_the_earlier_sync_round_is_done():
    """P (4) sends m1 to Q (1) and X (2), then m2 to R (3) and X. If m2 could commit at R
    before m1's SYNC reached Q, R could deliver m2 and signal S (0), whose m3 to Q would stamp
    at Q's old clock: a tie with m1 that S's lower id wins. m2 waits instead."""
    net = Net(5)
    net.p[4].queue.sync(10)
    net.send(4, [1, 2], b"m1")
    net.send(4, [3, 2], b"m2")
    for dest in (1, 2, 3):
        net.hand(4, dest), net.hand(dest, 4)
    net.hand(4, 2), net.hand(2, 4)                      # second STAGE at X, and its REPLY
    assert [net.p[4].out[i].tx.ts for i in (0, 1)] == [12, 14]
    net.hand(4, 3), net.hand(3, 4)                      # m2's SYNC and ACK at R
    net.hand(4, 2, wire=sync(1, 14)), net.hand(2, 4, wire=ack(1))
    net.hand(4, 2, wire=sync(0, 12)), net.hand(2, 4, wire=ack(0))
    assert all(data[0] != 4 for _, _, data, _ in net.flight) and net.got[3] == []
    assert net.p[4].busy and net.p[1].queue.clock == 10
    net.hand(4, 1), net.hand(1, 4)                      # m1's SYNC reaches Q at last
    net.hand(4, 3)                                      # m2's COMMIT at R
    assert net.got[3] == [b"m2"]
    net.send(0, [1], b"m3")                             # ... after R's signal
    net.hand(0, 1), net.hand(1, 0), net.hand(0, 1)
    assert net.p[0].out[0].tx.ts == 14 and net.got[1] == []
    net.drain()
    assert net.got[1] == [b"m1", b"m3"] and net.got[2] == [b"m1", b"m2"]


def test_a_signal_once_not_busy_is_ordered_after_the_send():
    """X multicasts m to A and B; once X is no longer busy (its COMMITs still in flight) it
    signals D, and D's m2 to B must come after m."""
    net = Net(4)
    net.p[3].queue.sync(10)
    net.send(3, [1, 2], b"m")
    while net.p[3].busy:
        s, d, data, _ = net.flight.pop(0)
        assert data[0] != 4                             # no COMMIT leaves while busy
        net._post(d, net.p[d].receive(s, data))
    net.send(0, [2], b"m2")
    net.hand(0, 2), net.hand(2, 0), net.hand(0, 2)
    assert net.got[2] == []                             # m2 waits behind m's block
    net.drain()
    assert net.got[2] == [b"m", b"m2"] and net.got[1] == [b"m"]


@pytest.mark.parametrize("n", [2, 10, 50])
def test_costs_do_not_grow_with_n(n):
    def run(dests):
        net = Net(n)
        net.send(0, dests, b"payload")
        seen = []
        while net.flight:
            s, d, data, cost = net.flight.pop(0)
            seen.append((data[0], len(data), cost))
            net._post(d, net.p[d].receive(s, data))
        assert all(net.got[d] == [b"payload"] for d in dests)
        return sorted(seen)

    uni = run([n - 1])
    assert uni == [(0, 18, STAGE_COST), (1, 9, REPLY_COST), (3, 5, ACK_COST),
                   (5, 9, SYNC_COMMIT_COST)]
    for kind, size, cost in uni:                        # measured: the sizes add up
        assert cost.header + cost.control + (7 if cost.data else 0) == size
    assert sum(c.control for _, _, c in uni) == 33
    if n == 2:
        return                                          # a multicast needs two others
    k = n - 1
    multi = run(list(range(1, n)))
    assert sorted(set(multi)) == [(0, 18, STAGE_COST), (1, 9, REPLY_COST), (2, 9, SYNC_COST),
                                  (3, 5, ACK_COST), (4, 5, COMMIT_COST)]
    assert len(multi) == 5 * k                          # each kind once per copy
    assert sum(c.control for _, _, c in multi) == 38 * k
    assert sum(c.dependents for _, _, c in multi) == k


BAD = [
    ("idle", 1, b""),                                   # empty
    ("idle", 1, b"\x09\x00"),                           # unknown tag
    ("idle", 1, stage(1, 0, 0, b"")[:-1]),              # truncated STAGE
    ("idle", 1, stage(2, 0, 0, b"x")),                  # names another sender
    ("idle", 1, stage(1, 0, 3, b"x")),                  # odd clock
    ("idle", 1, reply(0, 0)),                           # no transaction of mine
    ("idle", 1, ack(0)),
    ("idle", 1, sync(0, 2)),                            # nothing staged from 1
    ("idle", 1, commit(0)),
    ("idle", 1, sync_commit(0, 2)),
    ("staged", 1, stage(1, 0, 0, b"again")),            # staged before
    ("staged", 1, sync(0, 1)),                          # odd
    ("staged", 1, sync(0, 0)),                          # not above the block
    ("staged", 1, sync(0, 2) + b"\x00"),                # trailing byte
    ("staged", 1, commit(0)),                           # not synced yet
    ("staged", 1, sync_commit(0, 1)),
    ("synced", 1, sync(0, 2)),                          # twice
    ("synced", 1, sync_commit(0, 2)),                   # already synced
    ("synced", 2, commit(0)),                           # another sender's transaction
    ("sending", 1, ack(0)),                             # before the stamp
    ("sending", 2, reply(0, 0)),                        # not a destination
    ("sending", 1, reply(1, 0)),                        # another transaction
    ("sending", 1, reply(0, 5)),                        # odd clock
    ("sending", 1, reply(0, 0xFFFFFFFE)),               # no u32 stamp above it
    ("sending", 1, reply(0, 0)[:-1]),
    ("stamped", 1, reply(0, 0)),                        # replies are over
    ("stamped", 2, ack(0)),
    ("stamped", 1, ack(0) + b"\x00"),
    ("pipelined", 1, reply(1, 0)),                      # stamped already
    ("pipelined", 2, ack(1)),                           # not a destination
    ("pipelined", 1, sync(1, 2)),                       # I am the sender, not staged here
]


def in_state(name, make=Bus1):
    p = make(0, 3)
    if name == "staged":                                # a block from 1, not yet synced
        p.receive(1, stage(1, 0, 0, b"x"))
    elif name == "synced":
        p.receive(1, stage(1, 0, 0, b"x"))
        p.receive(1, sync(0, 2))
    elif name in ("sending", "stamped"):
        p.send([1], b"x")
        if name == "stamped":
            p.receive(1, reply(0, 0))
    elif name == "pipelined":                           # two unicasts, both stamped
        p.send([1], b"x"), p.send([1], b"y")
        p.receive(1, reply(1, 0)), p.receive(1, reply(0, 0))
    return p


@pytest.mark.parametrize("where,src,data", BAD)
def test_bad_wire_raises_and_changes_nothing(where, src, data):
    p = in_state(where)
    before = state(p)
    with pytest.raises(WireError):
        p.receive(src, data)
    assert state(p) == before


def test_a_finished_transaction_cannot_be_replayed():
    p = Bus1(0, 2)
    p.receive(1, stage(1, 4, 0, b"x"))
    p.receive(1, sync_commit(4, 2))
    for wire in (stage(1, 4, 0, b"x"), stage(1, 3, 0, b"x"), sync_commit(4, 2)):
        before = state(p)
        with pytest.raises(WireError):
            p.receive(1, wire)
        assert state(p) == before
    assert p.receive(1, stage(1, 5, 0, b"y")).wires == [(1, reply(5, 2))]


def test_bad_send_arguments():
    p = Bus1(0, 3)
    for dests in ([], [0], [3], [1, 1]):
        with pytest.raises(ValueError):
            p.send(dests, b"")
    assert p.seq == 0 and not p.busy


# ---- the C twin (csrc/sim/bus1.c): payloads of every length its queue stores, bad wires ----

twin = pytest.mark.skipif("bus1" not in fast.NAMES, reason="bus1py.sim._fast has no bus1")


def cmachine(me, n):
    return fast.Machine("bus1", me, n)


@twin
@pytest.mark.parametrize("where,src,data", BAD)
def test_twin_refuses_bad_wires(where, src, data):
    py, cc = in_state(where), in_state(where, cmachine)
    assert cc.held == py.held
    with pytest.raises(WireError):
        cc.receive(src, data)


@twin
@pytest.mark.parametrize("wire", [stage(1, 4, 0, b"x"), stage(1, 3, 0, b"x"), sync_commit(4, 2)])
def test_twin_refuses_a_finished_transaction(wire):
    c = cmachine(0, 2)
    c.receive(1, stage(1, 4, 0, b"x"))
    assert c.receive(1, sync_commit(4, 2)).delivered == [(1, b"x")]
    with pytest.raises(WireError):
        c.receive(1, wire)
