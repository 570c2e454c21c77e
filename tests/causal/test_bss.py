"""bss: hand-built transcripts, exact wires and costs, broadcast discard, bad input."""
from __future__ import annotations

import struct

import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.bss import BSS
from bus1py.sim import fast


def procs(n):
    return [causal.create("bss", i, n) for i in range(n)]


def wires_to(step):
    return dict(step.wires)


def state(p):
    return (list(p.vt), {j: dict(h) for j, h in p.pending.items()}, p.held,
            {k: set(w) for k, w in p.waiters.items()})


def test_registered_and_flags():
    assert causal.protocol_class("bss") is BSS
    assert BSS.multicast == "broadcast" and BSS.causal


def test_send_broadcasts_with_exact_bytes_and_costs():
    p = BSS(1, 4)
    step = p.send([2], b"hi")
    assert [d for d, _ in step.wires] == [0, 2, 3]
    head = struct.pack("<HH", 1, 2)
    vt = struct.pack("<4I", 0, 1, 0, 0)        # VT[me] ticks before the stamp is taken
    w = wires_to(step)
    assert w[2] == head + vt + b"hi"
    assert w[0] == w[3] == head + vt           # non-destinations get no payload
    costs = dict(zip([d for d, _ in step.wires], step.costs))
    assert costs[2] == WireCost(4, 16, 4, True)
    assert costs[0] == costs[3] == WireCost(4, 16, 4, False)
    assert step.delivered == []


@pytest.mark.parametrize("n,dests", [(2, [0]), (5, [0, 2, 4]), (9, [3]), (9, list(range(1, 9)))])
def test_measured_cost_matches_length(n, dests):
    me = 1 if 0 in dests else 0
    dests = [d for d in dests if d != me]
    step = BSS(me, n).send(dests, b"payload")
    assert len(step.wires) == n - 1
    for (d, wire), c in zip(step.wires, step.costs):
        assert c.control == 4 * n and c.dependents == n and c.header == 2 + 2 * len(dests)
        assert c.data == (d in dests)
        assert len(wire) == c.header + c.control + (len(b"payload") if c.data else 0)


def test_non_destination_updates_clock_and_discards():
    p0, p1, p2 = procs(3)
    w = wires_to(p0.send([1], b"m"))
    assert p2.receive(0, w[2]).delivered == []
    assert p2.vt == [1, 0, 0] and p2.held == 0
    assert p1.receive(0, w[1]).delivered == [(0, b"m")]


def test_held_message_released_by_non_destination_copy():
    # P0 -> {P1}: m1; P1 delivers it and sends m2 -> {P2}. P2 gets m2 first: held, since it
    # depends on m1; m1's copy (not for P2) releases it, and only m2 reaches the application.
    p0, p1, p2 = procs(3)
    w1 = wires_to(p0.send([1], b"m1"))
    assert p1.receive(0, w1[1]).delivered == [(0, b"m1")]
    w2 = wires_to(p1.send([2], b"m2"))
    s = p2.receive(1, w2[2])
    assert s.delivered == [] and s.wires == [] and p2.held == 1
    s = p2.receive(0, w1[2])
    assert s.delivered == [(1, b"m2")] and p2.held == 0
    assert p2.vt == [1, 1, 0]
    # P0 gets m2's discard copy: both stamps now known everywhere
    assert p0.receive(1, w2[0]).delivered == [] and p0.vt == [1, 1, 0]


def test_fifo_restored_over_reordering():
    p0, p1 = procs(2)
    a = p0.send([1], b"a").wires[0][1]
    b = p0.send([1], b"b").wires[0][1]
    c = p0.send([1], b"c").wires[0][1]
    assert p1.receive(0, c).delivered == []
    assert p1.receive(0, b).delivered == []
    assert p1.held == 2
    assert p1.receive(0, a).delivered == [(0, b"a"), (0, b"b"), (0, b"c")]
    assert p1.held == 0


def _good_wire():
    return wires_to(BSS(0, 3).send([1], b"x"))[1]


BAD_WIRES = [                                                     # from P0 to P1, holding HELD
    b"",
    b"\x01",
    struct.pack("<H", 0) + struct.pack("<3I", 1, 0, 0),           # no destinations
    struct.pack("<H", 3) + struct.pack("<3H", 1, 2, 2),           # more dests than others
    struct.pack("<HH", 1, 1) + struct.pack("<2I", 1, 0),          # VT truncated
    struct.pack("<HH", 1, 7) + struct.pack("<3I", 1, 0, 0),       # dest out of range
    struct.pack("<HH", 1, 0) + struct.pack("<3I", 1, 0, 0),       # dest is the sender
    struct.pack("<HHH", 2, 1, 1) + struct.pack("<3I", 1, 0, 0),   # duplicate dest
    struct.pack("<HH", 1, 2) + struct.pack("<3I", 1, 0, 0) + b"x",  # payload to non-dest
    struct.pack("<HH", 1, 1) + struct.pack("<3I", 0, 0, 0),       # stamp 0: already seen
    struct.pack("<HH", 1, 1) + struct.pack("<3I", 1, 5, 0),       # names our future sends
]
HELD = struct.pack("<HH", 1, 1) + struct.pack("<3I", 1, 0, 2)     # from P2, needs P2's first


@pytest.mark.parametrize("wire", BAD_WIRES)
def test_bad_wire_raises_and_changes_nothing(wire):
    p1 = BSS(1, 3)
    p1.receive(2, HELD)
    before = state(p1)
    with pytest.raises(WireError):
        p1.receive(0, wire)
    assert state(p1) == before


def test_duplicate_wires_rejected():
    p1 = BSS(1, 3)
    w = _good_wire()
    p1.receive(0, w)
    with pytest.raises(WireError):
        p1.receive(0, w)                      # already delivered
    held = struct.pack("<HH", 1, 1) + struct.pack("<3I", 3, 0, 0)
    p1.receive(0, held)
    before = state(p1)
    with pytest.raises(WireError):
        p1.receive(0, held)                   # already held
    assert state(p1) == before


@pytest.mark.parametrize("dests,payload", [
    ([], b""), ([0], b""), ([3], b""), ([1, 1], b""), ("x", b""), ([1], "text"),
])
def test_bad_send_arguments(dests, payload):
    p = BSS(0, 3)
    with pytest.raises(ValueError):
        p.send(dests, payload)
    assert p.vt == [0, 0, 0]


def test_bad_receive_arguments():
    p = BSS(0, 3)
    for src in (0, 3, -1, True):
        with pytest.raises(ValueError):
            p.receive(src, _good_wire())
    with pytest.raises(ValueError):
        BSS(3, 3)


def test_cascade_across_senders():
    # x (P0) -> y (P1) -> z (P2), arriving at P3 as z, y, x: each waits on another sender's
    # broadcast, and x's copy releases the chain; y is not for P3 and is only counted.
    p0, p1, p2, p3 = procs(4)
    x = wires_to(p0.send([1, 3], b"x"))
    p1.receive(0, x[1])
    y = wires_to(p1.send([2], b"y"))
    p2.receive(0, x[2])
    p2.receive(1, y[2])
    z = wires_to(p2.send([3], b"z"))[3]
    assert p3.receive(2, z).delivered == []
    assert p3.receive(1, y[3]).delivered == []
    assert p3.held == 2 and set(p3.waiters) <= {0, 1}
    assert p3.receive(0, x[3]).delivered == [(0, b"x"), (2, b"z")]
    assert p3.held == 0 and p3.waiters == {} and p3.vt == [1, 1, 1, 0]


# ---- the C twin (csrc/sim/bss.c): the same bad wires and duplicates are refused ----

twin = pytest.mark.skipif("bss" not in fast.NAMES, reason="bus1py.sim._fast has no bss")


@twin
@pytest.mark.parametrize("wire", BAD_WIRES)
def test_twin_refuses_bad_wires(wire):
    c1 = fast.Machine("bss", 1, 3)
    assert c1.receive(2, HELD).delivered == [] and c1.held == 1
    with pytest.raises(WireError):
        c1.receive(0, wire)


@twin
def test_twin_refuses_duplicates():
    w = _good_wire()
    c1 = fast.Machine("bss", 1, 3)               # a failed C machine is not used again
    assert c1.receive(0, w).delivered == [(0, b"x")]
    with pytest.raises(WireError):
        c1.receive(0, w)                         # already delivered
    held = struct.pack("<HH", 1, 1) + struct.pack("<3I", 3, 0, 0)
    c1 = fast.Machine("bss", 1, 3)
    c1.receive(0, held)
    with pytest.raises(WireError):
        c1.receive(0, held)                      # already held
