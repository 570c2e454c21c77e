"""ses: hand-built transcripts, exact wires and costs, the one-event multicast case, bad input."""
from __future__ import annotations

import struct

import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.ses import SES
from bus1py.sim import fast


def procs(n):
    return [causal.create("ses", i, n) for i in range(n)]


def wires_to(step):
    return dict(step.wires)


def wire(n, tm, pairs=(), payload=b""):
    out = struct.pack("<H", len(pairs)) + struct.pack(f"<{n}I", *tm)
    for pid, vec in pairs:
        out += struct.pack(f"<H{n}I", pid, *vec)
    return out + payload


def state(p):
    return (list(p.t), p.V.tolist(), sorted(p.present), p.held, dict(p.parked),
            {k: dict(w) for k, w in p.waiters.items()},
            {j: sorted(h) for j, h in p.pending.items()})


def test_registered_and_flags():
    assert causal.protocol_class("ses") is SES
    assert SES.multicast == "native" and SES.causal


def test_unicast_wires_carry_clock_and_pairs_exactly():
    p0 = SES(0, 3)
    s = p0.send([1], b"a")
    assert s.wires == [(1, wire(3, (1, 0, 0), payload=b"a"))]
    assert s.costs == [WireCost(2, 12, 1, True)]
    s = p0.send([2], b"b")                     # now V_0 holds (P1, [1,0,0])
    assert s.wires == [(2, wire(3, (2, 0, 0), [(1, (1, 0, 0))], b"b"))]
    assert s.costs == [WireCost(2, 12 + 14, 2, True)]
    s = p0.send([1], b"c")                     # the copy to P1 carries P1's old pair
    assert s.wires == [(1, wire(3, (3, 0, 0), [(1, (1, 0, 0)), (2, (2, 0, 0))], b"c"))]


def test_multicast_copy_names_the_other_destinations():
    p0 = SES(0, 4)
    s = p0.send([2, 1], b"m")
    w = wires_to(s)
    assert w[2] == wire(4, (1, 0, 0, 0), [(1, (1, 0, 0, 0))], b"m")
    assert w[1] == wire(4, (1, 0, 0, 0), [(2, (1, 0, 0, 0))], b"m")
    for (_, data), c in zip(s.wires, s.costs):
        assert c == WireCost(2, 16 + 18, 2, True)
        assert len(data) == c.header + c.control + 1
    assert p0.V.tolist()[1] == p0.V.tolist()[2] == [1, 0, 0, 0]


def test_chain_overtaking_direct_message_is_held():
    # seed 000 Fig. 4: P0 sends x to P2 then y to P1; P1 delivers y and sends z to P2; z
    # reaches P2 first and must wait for x.
    p0, p1, p2 = procs(3)
    x = wires_to(p0.send([2], b"x"))[2]
    y = wires_to(p0.send([1], b"y"))[1]
    assert p1.receive(0, y).delivered == [(0, b"y")]
    z = wires_to(p1.send([2], b"z"))[2]
    s = p2.receive(1, z)
    assert s.delivered == [] and p2.held == 1
    s = p2.receive(0, x)
    assert s.delivered == [(0, b"x"), (1, b"z")] and p2.held == 0
    # t ticks at both deliveries and merges the senders' clocks
    assert p2.t == [2, 2, 2]


def test_one_event_multicast_case_p1():
    # M to {a, b}; a delivers and sends M2 to b; M2 reaches b first and must be held.
    p0, a, b = procs(3)
    w = wires_to(p0.send([1, 2], b"M"))
    assert a.receive(0, w[1]).delivered == [(0, b"M")]
    m2 = wires_to(a.send([2], b"M2"))[2]
    assert b.receive(1, m2).delivered == [] and b.held == 1
    assert b.receive(0, w[2]).delivered == [(0, b"M"), (1, b"M2")]


def test_several_held_released_in_causal_order():
    p0, p1, p2, p3 = procs(4)
    x = wires_to(p0.send([3], b"x"))[3]
    y = wires_to(p0.send([1], b"y"))[1]
    p1.receive(0, y)
    z = wires_to(p1.send([2, 3], b"z"))
    p2.receive(1, z[2])
    u = wires_to(p2.send([3], b"u"))[3]
    assert p3.receive(2, u).delivered == []
    assert p3.receive(1, z[3]).delivered == []
    assert p3.held == 2
    assert p3.receive(0, x).delivered == [(0, b"x"), (1, b"z"), (2, b"u")]


BAD_WIRES = [                                                        # from P0 to P1, holding HELD
    b"",
    b"\x00",
    struct.pack("<H", 0) + struct.pack("<2I", 1, 0),                 # clock truncated
    struct.pack("<H", 1) + struct.pack("<3I", 1, 0, 0),              # pair missing
    wire(3, (1, 0, 0), [(1, (1, 0, 0))])[:-1],                       # pair truncated
    struct.pack("<H", 3) + struct.pack("<3I", 1, 0, 0),              # pair count >= n
    wire(3, (1, 0, 0), [(5, (1, 0, 0))]),                            # pid out of range
    wire(3, (1, 0, 0), [(0, (1, 0, 0))]),                            # pair for the sender
    wire(3, (1, 0, 0), [(1, (1, 0, 0)), (1, (1, 0, 0))]),            # duplicate pid
    wire(3, (1, 0, 0), [(1, (2, 0, 0))]),                            # pair beyond t_M
    wire(3, (0, 0, 0)),                                              # no send event of src
    wire(3, (1, 1, 0)),                                              # names our future event
]
HELD = wire(3, (1, 0, 1), [(1, (1, 0, 1))])                          # from P2, needs P0's x


@pytest.mark.parametrize("data", BAD_WIRES)
def test_bad_wire_raises_and_changes_nothing(data):
    p1 = SES(1, 3)
    p1.receive(2, HELD)
    before = state(p1)
    with pytest.raises(WireError):
        p1.receive(0, data)
    assert state(p1) == before


def test_duplicate_wires_rejected():
    p0, p1 = procs(2)
    a = p0.send([1], b"a").wires[0][1]
    p1.receive(0, a)
    with pytest.raises(WireError):
        p1.receive(0, a)
    held = wire(2, (3, 0), [(1, (2, 0))])       # waits for P0's message 2, never sent
    p1.receive(0, held)
    before = state(p1)
    with pytest.raises(WireError):
        p1.receive(0, held)
    assert state(p1) == before and p1.held == 1


@pytest.mark.parametrize("dests,payload", [([], b""), ([0], b""), ([9], b""), ([1], None)])
def test_bad_send_arguments(dests, payload):
    p = SES(0, 3)
    with pytest.raises(ValueError):
        p.send(dests, payload)
    assert p.t == [0, 0, 0] and not p.V.any()


# ---- the C twin (csrc/sim/ses.c): the same bad wires and duplicates are refused ----

twin = pytest.mark.skipif("ses" not in fast.NAMES, reason="bus1py.sim._fast has no ses")


@twin
@pytest.mark.parametrize("data", BAD_WIRES)
def test_twin_refuses_bad_wires(data):
    c1 = fast.Machine("ses", 1, 3)
    assert c1.receive(2, HELD).delivered == [] and c1.held == 1
    with pytest.raises(WireError):
        c1.receive(0, data)


@twin
def test_twin_refuses_duplicates():
    a = SES(0, 2).send([1], b"a").wires[0][1]
    c1 = fast.Machine("ses", 1, 2)               # a failed C machine is not used again
    assert c1.receive(0, a).delivered == [(0, b"a")]
    with pytest.raises(WireError):
        c1.receive(0, a)                         # already delivered
    held = wire(2, (3, 0), [(1, (2, 0))])
    c1 = fast.Machine("ses", 1, 2)
    c1.receive(0, held)
    with pytest.raises(WireError):
        c1.receive(0, held)                      # already held
