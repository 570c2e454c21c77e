"""rst (form B): exact matrices, 4n^2 control bytes, held messages, selective mode, bad input."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.rst import RST
from bus1py.sim import fast


def procs(n, **kw):
    return [RST(i, n, **kw) for i in range(n)]


def wires_to(step):
    return dict(step.wires)


def matrix(n, entries):
    m = [[0] * n for _ in range(n)]
    for (k, l), v in entries.items():
        m[k][l] = v
    return struct.pack(f"<{n * n}I", *(x for row in m for x in row))


def state(p):
    return (p.sent.tolist(), list(p.deliv), list(p._myrow), p.held,
            {k: set(w) for k, w in p.waiters.items()},
            {j: sorted(h) for j, h in p.pending.items()})


def test_registered_and_flags():
    assert causal.protocol_class("rst") is RST
    assert RST.multicast == "native" and RST.causal


def test_send_counts_every_destination_before_attaching_the_matrix():
    p0 = RST(0, 3)
    s = p0.send([1, 2], b"m")
    want = matrix(3, {(0, 1): 1, (0, 2): 1}) + b"m"
    assert s.wires == [(1, want), (2, want)]
    assert s.costs == [WireCost(0, 36, 9, True)] * 2
    s = p0.send([2], b"n")
    assert s.wires == [(2, matrix(3, {(0, 1): 1, (0, 2): 2}) + b"n")]


@pytest.mark.parametrize("n", [2, 3, 10, 50])
def test_control_is_exactly_4n_squared(n):
    p = RST(0, n)
    s = p.send(list(range(1, n)), b"xyz")
    assert len(s.wires) == n - 1
    for (_, data), c in zip(s.wires, s.costs):
        assert c == WireCost(0, 4 * n * n, n * n, True)
        assert len(data) == c.header + c.control + 3


def test_chain_overtaking_direct_message_is_held():
    p0, p1, p2 = procs(3)
    x = wires_to(p0.send([2], b"x"))[2]
    y = wires_to(p0.send([1], b"y"))[1]
    assert p1.receive(0, y).delivered == [(0, b"y")]
    z = wires_to(p1.send([2], b"z"))[2]
    assert p2.receive(1, z).delivered == [] and p2.held == 1
    assert p2.receive(0, x).delivered == [(0, b"x"), (1, b"z")]
    assert p2.held == 0 and p2.deliv == [1, 1, 0]
    assert p2.sent.reshape(3, 3).tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0]]


def test_one_event_multicast_case_p1():
    p0, a, b = procs(3)
    w = wires_to(p0.send([1, 2], b"M"))
    assert a.receive(0, w[1]).delivered == [(0, b"M")]
    m2 = wires_to(a.send([2], b"M2"))[2]
    assert b.receive(1, m2).delivered == [] and b.held == 1
    assert b.receive(0, w[2]).delivered == [(0, b"M"), (1, b"M2")]


def test_per_sender_fifo_over_reordering():
    p0, p1 = procs(2)
    ws = [p0.send([1], bytes([65 + i])).wires[0][1] for i in range(4)]
    for w in (ws[3], ws[1], ws[2]):
        assert p1.receive(0, w).delivered == []
    assert p1.held == 3
    assert [pl for _, pl in p1.receive(0, ws[0]).delivered] == [b"A", b"B", b"C", b"D"]


def test_selective_mode_delivers_only_on_request():
    p0, p1, p2 = procs(3, selective=True)
    x = wires_to(p0.send([2], b"x"))[2]
    y = wires_to(p1.send([2], b"y"))[2]
    assert p2.receive(1, y).delivered == [] and p2.receive(0, x).delivered == []
    assert p2.held == 2
    assert p2.deliver_from(0) == b"x"           # concurrent with y: any order is causal
    assert p2.deliver_from(0) is None
    assert p2.deliver_from(1) == b"y"
    assert p2.held == 0 and p2.deliv == [1, 1, 0]


def test_selective_mode_refuses_a_non_causal_pick():
    p0, p1, p2 = procs(3, selective=True)
    x = wires_to(p0.send([2], b"x"))[2]
    y = wires_to(p0.send([1], b"y"))[1]
    p1.receive(0, y)
    assert p1.deliver_from(0) == b"y"
    z = wires_to(p1.send([2], b"z"))[2]
    p2.receive(1, z)
    p2.receive(0, x)
    assert p2.deliver_from(1) is None           # z depends on x
    assert p2.deliver_from(0) == b"x"
    assert p2.deliver_from(1) == b"z"


def test_deliver_from_arguments():
    with pytest.raises(ValueError):
        RST(0, 3).deliver_from(1)               # not selective
    p = RST(0, 3, selective=True)
    for k in (0, 3, -1, "1"):
        with pytest.raises(ValueError):
            p.deliver_from(k)


BAD_WIRES = [                                   # from P0 to P1, which holds HELD
    b"",
    matrix(3, {(0, 1): 1})[:-1],                # truncated matrix
    matrix(3, {}),                              # ST[0][1] = 0: already delivered
    matrix(3, {(0, 1): 1, (1, 2): 1}),          # counts a message from us never sent
]
HELD = matrix(3, {(2, 1): 1, (0, 1): 1})        # from P2 to P1, needs P0's first


@pytest.mark.parametrize("data", BAD_WIRES)
def test_bad_wire_raises_and_changes_nothing(data):
    p1 = RST(1, 3)
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
    held = matrix(2, {(0, 1): 3})
    p1.receive(0, held)
    before = state(p1)
    with pytest.raises(WireError):
        p1.receive(0, held)
    assert state(p1) == before


def test_bad_send_arguments():
    p = RST(0, 3)
    for dests in ([], [0], [3], [1, 1]):
        with pytest.raises(ValueError):
            p.send(dests, b"")
    assert not p.sent.any()
    p.sent[1] = p._myrow[1] = 0xFFFFFFFF        # as if 2^32 - 1 messages went to P1
    with pytest.raises(ValueError):
        p.send([2, 1], b"")
    assert p.sent[:3].tolist() == [0, 0xFFFFFFFF, 0]
    assert p.sent.dtype == np.dtype("<u4")


def test_cascade_across_senders():
    # x (P0) -> y (P1) -> z (P2), all to P3, arriving z, y, x: each waits on another
    # sender's message, and x's delivery releases the chain in causal order.
    p0, p1, p2, p3 = procs(4)
    x = wires_to(p0.send([1, 3], b"x"))
    p1.receive(0, x[1])
    y = wires_to(p1.send([2, 3], b"y"))
    p2.receive(1, y[2])
    z = wires_to(p2.send([3], b"z"))[3]
    assert p3.receive(2, z).delivered == []
    assert p3.waiters == {0: {2}}              # parked on the first sender it is ahead of
    assert p3.receive(1, y[3]).delivered == []
    assert p3.waiters == {0: {1, 2}}
    assert p3.receive(0, x[3]).delivered == [(0, b"x"), (1, b"y"), (2, b"z")]
    assert p3.held == 0 and p3.waiters == {} and p3.pending == {}


# ---- the C twin (csrc/sim/rst.c): the same bad wires and duplicates are refused ----

twin = pytest.mark.skipif("rst" not in fast.NAMES, reason="bus1py.sim._fast has no rst")


@twin
@pytest.mark.parametrize("data", BAD_WIRES)
def test_twin_refuses_bad_wires(data):
    c1 = fast.Machine("rst", 1, 3)
    assert c1.receive(2, HELD).delivered == [] and c1.held == 1
    with pytest.raises(WireError):
        c1.receive(0, data)


@twin
def test_twin_refuses_duplicates():
    a = RST(0, 2).send([1], b"a").wires[0][1]
    c1 = fast.Machine("rst", 1, 2)               # a failed C machine is not used again
    assert c1.receive(0, a).delivered == [(0, b"a")]
    with pytest.raises(WireError):
        c1.receive(0, a)                         # already delivered
    held = matrix(2, {(0, 1): 3})
    c1 = fast.Machine("rst", 1, 2)
    c1.receive(0, held)
    with pytest.raises(WireError):
        c1.receive(0, held)                      # already held
