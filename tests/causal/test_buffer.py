"""buffer (Mattern-Fuenfrocken): OB/IB transcripts, one ACK per copy, the multicast reading."""
from __future__ import annotations

import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.buffer import Buffer
from bus1py.sim import fast

DATA_COST = WireCost(1, 0, 0, True)
ACK = (b"\x01", WireCost(0, 1, 0, False))


def procs(n, **kw):
    return [Buffer(i, n, **kw) for i in range(n)]


def state(p):
    return (list(p.ob), p.outstanding, list(p.ib))


def test_registered_and_flags():
    assert causal.protocol_class("buffer") is Buffer
    assert Buffer.multicast == "sequential" and Buffer.causal


def test_one_copy_in_flight_until_its_ack():
    p0, p1, p2 = procs(3)
    s = p0.send([1], b"a")
    assert s.wires == [(1, b"\x00a")] and s.costs == [DATA_COST]
    assert p0.send([2], b"b").wires == []            # OB waits for a's ACK
    assert p0.send([1], b"c").wires == []            # no FIFO shortcut (footnote 4)
    assert p0.held == 2 and p0.outstanding == 1
    r = p1.receive(0, b"\x00a")
    assert r.delivered == [(0, b"a")]
    assert list(zip(r.wires, r.costs)) == [((0, ACK[0]), ACK[1])]
    s = p0.receive(1, b"\x01")
    assert s.wires == [(2, b"\x00b")] and s.delivered == [] and p0.held == 1
    s = p0.receive(2, b"\x01")
    assert s.wires == [(1, b"\x00c")] and p0.held == 0
    s = p0.receive(1, b"\x01")
    assert s.wires == [] and p0.outstanding is None


def test_multicast_is_served_as_sequential_copies():
    p0 = Buffer(0, 4)
    assert p0.send([3, 1, 2], b"m").wires == [(3, b"\x00m")]
    assert p0.receive(3, b"\x01").wires == [(1, b"\x00m")]
    assert p0.receive(1, b"\x01").wires == [(2, b"\x00m")]
    assert p0.receive(2, b"\x01").wires == []


def test_unicast_chain_cannot_overtake():
    # seed 000 Fig. 4: x to P2 is got (and ACKed) before y to P1 is even posted, so z from
    # P1 to P2, caused by y, arrives at IB2 after x.
    p0, p1, p2 = procs(3)
    assert p0.send([2], b"x").wires == [(2, b"\x00x")]
    assert p0.send([1], b"y").wires == []
    assert p2.receive(0, b"\x00x").delivered == [(0, b"x")]
    y = p0.receive(2, b"\x01").wires
    assert y == [(1, b"\x00y")]
    assert p1.receive(0, b"\x00y").delivered == [(0, b"y")]
    assert p1.send([2], b"z").wires == [(2, b"\x00z")]
    assert p2.receive(1, b"\x00z").delivered == [(1, b"z")]


def test_not_causal_for_one_event_multicast():
    # docs/PROTOCOL_RULES.md P1: M to {a, b}; a delivers M and sends M2 to b. M's copy to b is posted
    # only after a's ACK, so M2 reaches b first and b delivers it before M. This is why the
    # protocol declares multicast = "sequential".
    p0, a, b = procs(3)
    assert p0.send([1, 2], b"M").wires == [(1, b"\x00M")]
    r = a.receive(0, b"\x00M")
    assert r.delivered == [(0, b"M")]
    assert a.send([2], b"M2").wires == [(2, b"\x00M2")]
    assert b.receive(1, b"\x00M2").delivered == [(1, b"M2")]
    assert p0.receive(1, r.wires[0][1]).wires == [(2, b"\x00M")]
    assert b.receive(0, b"\x00M").delivered == [(0, b"M")]


def test_selective_mode_takes_only_the_ib_head():
    p0, p1, p2 = procs(3, selective=True)
    r = p2.receive(1, b"\x00y")
    assert r.delivered == [] and r.wires == [(1, b"\x01")]    # ACK at arrival ("get")
    p2.receive(0, b"\x00x")
    assert p2.held == 2
    assert p2.deliver_from(0) is None
    assert p2.deliver_from(1) == b"y"
    assert p2.deliver_from(1) is None
    assert p2.deliver_from(0) == b"x"
    assert p2.held == 0


def test_deliver_from_arguments():
    with pytest.raises(ValueError):
        Buffer(0, 3).deliver_from(1)
    p = Buffer(0, 3, selective=True)
    for k in (0, 3, None):
        with pytest.raises(ValueError):
            p.deliver_from(k)


@pytest.mark.parametrize("src,data", [
    (1, b""),                  # no type tag
    (1, b"\x02x"),             # unknown tag
    (1, b"\x01\x00"),          # ACK with a body
    (2, b"\x01"),              # ACK from a process we are not waiting for
])
def test_bad_wire_raises_and_changes_nothing(src, data):
    p0 = Buffer(0, 3)
    p0.send([1], b"a")
    p0.send([2], b"b")
    before = state(p0)
    with pytest.raises(WireError):
        p0.receive(src, data)
    assert state(p0) == before


def test_ack_with_nothing_outstanding():
    with pytest.raises(WireError):
        Buffer(0, 2).receive(1, b"\x01")


def test_bad_send_arguments():
    p = Buffer(0, 3)
    for dests in ([], [0], [3], [2, 2]):
        with pytest.raises(ValueError):
            p.send(dests, b"")
    with pytest.raises(ValueError):
        p.send([1], 5)
    assert state(p) == ([], None, [])


def test_empty_payload_round_trip():
    p0, p1 = procs(2)
    w = p0.send([1], b"").wires
    assert w == [(1, b"\x00")]
    assert p1.receive(0, w[0][1]).delivered == [(0, b"")]


# ---- the C twin (csrc/sim/buffer.c): payloads of every length it stores, bad wires ----

twin = pytest.mark.skipif("buffer" not in fast.NAMES, reason="bus1py.sim._fast has no buffer")


@twin
@pytest.mark.parametrize("src,data", [(1, b""), (1, b"\x02x"), (1, b"\x01\x00"), (2, b"\x01")])
def test_twin_refuses_bad_wires(src, data):
    c0 = fast.Machine("buffer", 0, 3)
    c0.send([1], b"a")
    c0.send([2], b"b")
    with pytest.raises(WireError):
        c0.receive(src, data)
