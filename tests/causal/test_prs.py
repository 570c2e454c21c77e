"""prs (a reconstruction): exact transcripts, direct predecessors only, invariants, bad input."""
from __future__ import annotations

import struct

import pytest

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.prs import Prs
from harness import random_run as _random_run
from harness import one, held_wire, truncated_wires_raise_and_change_nothing


def procs(n):
    return [Prs(i, n) for i in range(n)]


def pw(j, sn, dests, cb=(), payload=b""):
    """A wire built independently of the module: cb = [(k, [(sender, sn)])]."""
    head = struct.pack("<HIHH", j, sn, len(dests), len(cb))
    head += struct.pack(f"<{len(dests)}H", *dests)
    head += struct.pack(f"<{len(cb)}H", *(k for k, _ in cb))
    head += struct.pack(f"<{len(cb)}H", *(len(e) for _, e in cb))
    entries = [e for _, es in cb for e in es]
    ctl = struct.pack(f"<{len(entries)}H", *(s for s, _ in entries))
    ctl += struct.pack(f"<{len(entries)}I", *(x for _, x in entries))
    return head + ctl + payload


def state(p):
    return (p.sn, [dict(r) for r in p.cb], list(p.deliv), p.held,
            {k: [(r[4], r[3], r[2]) for r in v] for k, v in p._hold.waiting.items()})


def test_registered_and_flags():
    assert causal.protocol_class("prs") is Prs
    assert Prs.multicast == "native" and Prs.causal and "CB_M" in Prs.rule
    doc = __import__("bus1py.causal.prs", fromlist=["prs"]).__doc__
    assert "RECONSTRUCTION" in doc and "discrepancy" in doc


def test_exact_wires_and_costs():
    p0 = Prs(0, 3)
    s = p0.send([1], b"a")
    assert s.wires == [(1, pw(0, 1, [1], payload=b"a"))]
    assert s.costs == [WireCost(12, 0, 0, True)]
    assert p0.cb == [{}, {0: 1}, {}]
    s = p0.send([2], b"b")
    assert s.wires == [(2, pw(0, 2, [2], [(1, [(0, 1)])], b"b"))]
    assert s.costs == [WireCost(16, 6, 1, True)]
    s = p0.send([1], b"c")                      # the whole CB vector, one list per process
    assert s.wires == [(1, pw(0, 3, [1], [(1, [(0, 1)]), (2, [(0, 2)])], b"c"))]
    assert s.costs == [WireCost(20, 12, 2, True)]
    assert p0.cb == [{}, {0: 3}, {0: 2}]


def test_multicast_copies_are_identical():
    p0 = Prs(0, 4)
    p0.send([3], b"x")
    s = p0.send([2, 1], b"m")
    w = pw(0, 2, [2, 1], [(3, [(0, 1)])], b"m")
    assert s.wires == [(2, w), (1, w)]
    assert s.costs == [WireCost(18, 6, 1, True)] * 2


def test_p1_multicast_successor_overtakes_and_is_held():
    p0, p1, p2 = procs(3)
    m = dict(p0.send([1, 2], b"M").wires)
    assert p1.receive(0, m[1]).delivered == [(0, b"M")]
    assert p1.cb == [{}, {}, {0: 1}]             # M is a direct predecessor for process 2
    m2 = one(p1.send([2], b"M2"))
    assert m2 == pw(1, 1, [2], [(2, [(0, 1)])], b"M2")
    s = p2.receive(1, m2)
    assert s.delivered == [] and p2.held == 1
    assert p2.receive(0, m[2]).delivered == [(0, b"M"), (1, b"M2")] and p2.held == 0
    assert p2.deliv == [1, 1, 0]


def test_chain_overtaking_needs_the_whole_vector():
    # 0 -> 2 (x), 0 -> 1 (y), 1 -> 2 (z): z learns of x only through CB_y[2].
    p0, p1, p2 = procs(3)
    x = one(p0.send([2], b"x"))
    y = one(p0.send([1], b"y"))
    assert y == pw(0, 2, [1], [(2, [(0, 1)])], b"y")
    p1.receive(0, y)
    z = one(p1.send([2], b"z"))
    assert z == pw(1, 1, [2], [(2, [(0, 1)])], b"z")
    assert p2.receive(1, z).delivered == [] and p2.held == 1
    assert p2.receive(0, x).delivered == [(0, b"x"), (1, b"z")]


def test_only_direct_predecessors_are_kept():
    # 1 knows m1 (0 -> 2) is a predecessor for 2; M from 3 to {1, 2} waits for m1 at 2, so
    # after delivering M, 1 keeps only M for 2.
    p0, p1, p2, p3 = procs(4)
    p0.send([2], b"m1")
    m2 = one(p0.send([3], b"m2"))
    p1.receive(0, one(p0.send([1], b"m3")))
    p3.receive(0, m2)
    assert p1.cb[2] == {0: 1} and p3.cb[2] == {0: 1}
    m = dict(p3.send([1, 2], b"M").wires)
    assert m[1] == pw(3, 1, [1, 2], [(2, [(0, 1)])], b"M")
    assert p1.receive(3, m[1]).delivered == [(3, b"M")]
    assert p1.cb[2] == {3: 1}                   # (0, 1) dominated by CB_M[2], dropped
    assert p1.cb[3] == {0: 2} and p1.cb[0] == {}   # m2 (0 -> 3) stays direct for 3


def test_lists_are_in_canonical_order_whatever_the_merge_order():
    # 3 learns (2, 1) and then (0, 1) as predecessors for 1; its wire lists them by sender.
    p0, p1, p2, p3 = procs(4)
    p3.receive(2, dict(p2.send([1, 3], b"a").wires)[3])
    p3.receive(0, dict(p0.send([1, 3], b"b").wires)[3])
    assert list(p3.cb[1]) == [2, 0]                 # the dict's order is not the wire's
    assert one(p3.send([1], b"c")) == pw(3, 1, [1], [(1, [(0, 1), (2, 1)])], b"c")


def check_invariants(p):
    assert p.cb[p.me] == {}
    for k, row in enumerate(p.cb):
        assert k not in row
        for s, x in row.items():
            assert 0 < x and (x <= p.sn if s == p.me else True)


def parse_cost(data):
    """The cost of a wire, checking on the way that its lists are in canonical order."""
    j, sn, nd, nk = struct.unpack_from("<HIHH", data, 0)
    ks = struct.unpack_from(f"<{nk}H", data, 10 + 2 * nd)
    lens = struct.unpack_from(f"<{nk}H", data, 10 + 2 * nd + 2 * nk)
    senders = struct.unpack_from(f"<{sum(lens)}H", data, 10 + 2 * nd + 4 * nk)
    assert list(ks) == sorted(set(ks))
    at = 0
    for ln in lens:
        assert list(senders[at:at + ln]) == sorted(set(senders[at:at + ln]))
        at += ln
    return 10 + 2 * nd + 4 * nk, 6 * sum(lens), sum(lens)


def random_run(n, sends, seed, multicast, check=check_invariants):
    return _random_run(procs, parse_cost, check, n, sends, seed, multicast)


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_invariants_bytes_and_liveness_after_random_runs(seed, multicast):
    random_run(5 + seed % 3, 150, seed, multicast)


def test_truncated_wires_raise_and_change_nothing():
    truncated_wires_raise_and_change_nothing(procs, parse_cost, state)


@pytest.mark.parametrize("wire", [
    pw(0, 1, [2], [(2, [(0, 1)])]),                   # sender field is not src
    pw(1, 0, [2], [(2, [(0, 1)])]),                   # sn 0
    pw(1, 1, [7], [(2, [(0, 1)])]),                   # destination out of range
    pw(1, 1, [0], [(2, [(0, 1)])]),                   # destinations exclude receiver
    pw(1, 1, [2, 2], [(2, [(0, 1)])]),                # duplicate destination
    pw(1, 1, [2], [(1, [(0, 1)])]),                   # a list for the sender itself
    pw(1, 1, [2], [(2, [(0, 1)]), (2, [(0, 2)])]),    # one process listed twice
    pw(1, 1, [2], [(0, [])]),                         # an empty list
    pw(1, 1, [2], [(2, [(2, 1)])]),                   # a list naming its own process
    pw(1, 1, [2], [(0, [(1, 1)])]),                   # sender's entry not older than M
    pw(1, 1, [2], [(0, [(2, 1)])]),                   # receiver's future message
    pw(1, 1, [2], [(2, [(0, 0)])]),                   # sn 0 in an entry
    pw(1, 1, [2], [(2, [(9, 1)])]),                   # sender id out of range
    pw(1, 1, [2], [(2, [(0, 1), (0, 2)])]),           # one sender twice in a list
    pw(1, 1, [2], [(5, [(0, 1)])]),                   # list for a process out of range
    pw(1, 2, [2], [(2, [(0, 1)]), (0, [(1, 1)])]),    # lists not in process order
    pw(1, 2, [2], [(2, [(1, 1), (0, 1)])]),           # entries not in sender order
])
def test_bad_wires_raise_and_change_nothing(wire):
    p2, m2, m = held_wire(procs)
    p2.receive(0, m)                            # some state to keep; 1's wires are all new
    before = state(p2)
    with pytest.raises(WireError) as e:
        p2.receive(1, wire)
    assert "duplicate" not in str(e.value)
    assert state(p2) == before
    assert p2.receive(1, m2).delivered == [(1, b"M2")]


def test_duplicates_raise_and_change_nothing():
    p2, m2, m = held_wire(procs)
    p2.receive(1, m2)
    before = state(p2)
    with pytest.raises(WireError, match="duplicate"):
        p2.receive(1, m2)
    assert state(p2) == before
    p2.receive(0, m)
    before = state(p2)
    with pytest.raises(WireError, match="duplicate"):
        p2.receive(0, m)
    assert state(p2) == before


@pytest.mark.parametrize("call", [
    lambda p: p.send([], b"x"),
    lambda p: p.send([0], b"x"),
    lambda p: p.send([1, 1], b"x"),
    lambda p: p.send(["a"], b"x"),
    lambda p: p.send([1], 3),
    lambda p: p.receive(0, b""),
    lambda p: p.receive(3, b""),
    lambda p: p.receive(True, b""),
])
def test_bad_arguments_raise_value_error_and_change_nothing(call):
    p = Prs(0, 3)
    p.send([1], b"a")
    before = state(p)
    with pytest.raises(ValueError) as e:
        call(p)
    assert not isinstance(e.value, WireError)
    assert state(p) == before


def test_exhausted_sequence_numbers():
    p = Prs(0, 2)
    p.sn = 0xFFFFFFFF
    with pytest.raises(ValueError, match="exhausted"):
        p.send([1], b"x")
    assert p.cb == [{}, {}]
