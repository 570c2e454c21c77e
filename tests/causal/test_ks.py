"""ks: exact transcripts (O_M per destination), purging, invariants, bytes, bad input; the C
twin (csrc/sim/ks.c) on wires in any entry order and on bad wires."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.ks import Ks
from bus1py.sim import fast
from harness import random_run as _random_run
from harness import bits, one, held_wire, truncated_wires_raise_and_change_nothing


def procs(n):
    return [Ks(i, n) for i in range(n)]


def kw(k, t, dests, om=(), payload=b""):
    """A wire built independently of the module: om = [(sender, clock, [dest ids])]."""
    head = struct.pack("<HIHH", k, t, len(dests), len(om))
    head += struct.pack(f"<{len(dests)}H", *dests)
    head += struct.pack(f"<{len(om)}H", *(len(ids) for _, _, ids in om))
    allids = [x for _, _, ids in om for x in ids]
    ctl = struct.pack(f"<{len(om)}H", *(s for s, _, _ in om))
    ctl += struct.pack(f"<{len(om)}I", *(c for _, c, _ in om))
    ctl += struct.pack(f"<{len(allids)}H", *allids)
    return head + ctl + payload


def state(p):
    return (p.clock, {s: dict(v) for s, v in p.log.items()}, list(p.sr), p.held,
            {k: [(r[4], r[3], r[2]) for r in v] for k, v in p._hold.waiting.items()})


INIT3 = [(0, 0, []), (1, 0, []), (2, 0, [])]


def test_registered_and_flags():
    assert causal.protocol_class("ks") is Ks
    assert Ks.multicast == "native" and Ks.causal and "O_M" in Ks.rule


def test_exact_wires_costs_and_purge():
    p0 = Ks(0, 3)
    assert p0.log == {0: {0: 0}, 1: {0: 0}, 2: {0: 0}}     # the book's initial (s, 0, {})
    s = p0.send([1], b"a")
    assert s.wires == [(1, kw(0, 1, [1], INIT3, b"a"))]
    assert s.costs == [WireCost(18, 18, 3, True)]
    s = p0.send([2], b"b")                                  # (0, 0) empty, no longer newest
    assert s.wires == [(2, kw(0, 2, [2], [(0, 1, [1]), (1, 0, []), (2, 0, [])], b"b"))]
    assert s.costs == [WireCost(18, 8 + 6 + 6, 3, True)]
    assert p0.log[0] == {1: bits(1), 2: bits(2)}            # PURGE_NULL_ENTRIES removed (0, 0)
    # (0, 1) keeps 1 in the copy to 1 (the delivery constraint), then leaves the log.
    s = p0.send([1], b"c")
    assert s.wires == [(1, kw(0, 3, [1], [(0, 1, [1]), (0, 2, [2]), (1, 0, []), (2, 0, [])],
                          b"c"))]
    assert s.costs == [WireCost(20, 28, 4, True)]
    assert p0.log[0] == {2: bits(2), 3: bits(1)}


def test_o_m_is_computed_per_destination():
    p0 = Ks(0, 4)
    p0.send([1], b"x")
    p0.send([2], b"y")
    s = p0.send([2, 1, 3], b"m")
    w = dict(s.wires)
    rest = [(1, 0, []), (2, 0, []), (3, 0, [])]
    assert w[2] == kw(0, 3, [2, 1, 3], [(0, 2, [2])] + rest, b"m")
    assert w[1] == kw(0, 3, [2, 1, 3], [(0, 1, [1]), (0, 2, [])] + rest, b"m")
    assert w[3] == kw(0, 3, [2, 1, 3], [(0, 2, [])] + rest, b"m")
    assert [c.dependents for c in s.costs] == [4, 5, 4]
    assert p0.log[0] == {2: 0, 3: bits(1, 2, 3)}


def test_p1_multicast_successor_overtakes_and_is_held():
    p0, p1, p2 = procs(3)
    m = dict(p0.send([1, 2], b"M").wires)
    assert p1.receive(0, m[1]).delivered == [(0, b"M")]
    assert p1.log[0] == {1: bits(2)}                         # j removed from M's Dests
    m2 = one(p1.send([2], b"M2"))
    assert m2 == kw(1, 1, [2], [(0, 1, [2]), (1, 0, []), (2, 0, [])], b"M2")
    s = p2.receive(1, m2)
    assert s.delivered == [] and p2.held == 1
    assert p2.receive(0, m[2]).delivered == [(0, b"M"), (1, b"M2")] and p2.held == 0
    assert p2.sr == [1, 1, 0]


def test_chain_overtaking_direct_message_is_held():
    p0, p1, p2 = procs(3)
    x = one(p0.send([2], b"x"))
    p1.receive(0, one(p0.send([1], b"y")))
    z = one(p1.send([2], b"z"))
    assert p2.receive(1, z).delivered == [] and p2.held == 1
    assert p2.receive(0, x).delivered == [(0, b"x"), (1, b"z")]


def test_merge_marks_then_deletes_and_intersects():
    # 2 hears of m1 (0 -> 1) from 0; 1 then tells 2 that m1 is delivered (same (s, t):
    # Dests intersect to {}), and 0 tells 2 of a newer entry without m1 (marked, deleted).
    p0, p1, p2 = procs(3)
    m1 = one(p0.send([1], b"m1"))
    p2.receive(0, one(p0.send([2], b"m3")))
    assert p2.log[0] == {1: bits(1), 2: 0}
    p1.receive(0, m1)
    p2.receive(1, one(p1.send([2], b"m4")))
    assert p2.log[0] == {2: 0}
    q0, q1, q2 = procs(3)
    q0.send([1], b"m1")
    q2.receive(0, one(q0.send([2], b"m3")))
    q0.send([1], b"m5")                                      # carries m1; log drops (0, 1)
    q2.receive(0, one(q0.send([2], b"m6")))
    assert q2.log[0] == {3: bits(1), 4: 0}


def test_merge_judges_both_sides_before_deleting():
    # LOG_2[0] = {4, 5}; O_M[0] = {3, 7}: 4 and 5 are marked (older than 7, absent from
    # O_M), and so is 3 (older than 5, absent from LOG) although 5 itself goes.
    p0, p1, p2, p3 = procs(4)
    for _ in range(4):
        p0.send([1], b"to 1")
    p2.receive(0, one(p0.send([2], b"m5")))
    assert p2.log[0] == {4: bits(1), 5: 0}
    w = kw(1, 1, [2], [(0, 3, [3]), (0, 7, [])], b"w")
    assert p2.receive(1, w).delivered == [(1, b"w")]
    assert p2.log[0] == {7: 0}


def check_invariants(p):
    me = p.me
    for s, entries in p.log.items():
        order = sorted(entries, reverse=True)
        kept = order[:2] if s == me else order[:1]     # own previous entry until next purge
        seen = 0
        for t in order:
            D = entries[t]
            assert not D >> me & 1, "LOG never lists the process itself"
            assert not D & seen, "one entry per sender lists a given destination"
            assert D or t in kept, "empty entries only as the newest of their sender"
            seen |= D
        assert order[0] >= p.sr[s]
    assert max(p.log[me]) == p.clock


def parse_cost(data):
    k, t, nd, no = struct.unpack_from("<HIHH", data, 0)
    dlens = struct.unpack_from(f"<{no}H", data, 10 + 2 * nd)
    return 10 + 2 * nd + 2 * no, sum(6 + 2 * x for x in dlens), no


def random_run(n, sends, seed, multicast, check=check_invariants):
    return _random_run(procs, parse_cost, check, n, sends, seed, multicast)


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_invariants_bytes_and_liveness_after_random_runs(seed, multicast):
    random_run(5 + seed % 3, 150, seed, multicast)


def test_truncated_wires_raise_and_change_nothing():
    truncated_wires_raise_and_change_nothing(procs, parse_cost, state)


BAD_WIRES = [
    kw(0, 1, [2], [(0, 1, [2])]),                     # sender field is not src
    kw(1, 0, [2], [(0, 1, [2])]),                     # clock 0
    kw(1, 1, [7], [(0, 1, [2])]),                     # destination out of range
    kw(1, 1, [0], [(0, 1, [2])]),                     # destinations exclude receiver
    kw(1, 1, [2, 2], [(0, 1, [2])]),                  # duplicate destination
    kw(1, 1, [2], [(0, 1, [0])]),                     # entry sent to its own sender
    kw(1, 1, [2], [(0, 1, [2]), (0, 1, [])]),         # entry twice
    kw(1, 1, [2], [(1, 1, [])]),                      # own entry not older than M
    kw(1, 1, [2], [(2, 4, [])]),                      # receiver's future
    kw(1, 1, [2], [(0, 0, [2])]),                     # clock 0 with destinations
    kw(1, 1, [2], [(0, 1, [2, 2])]),                  # Dests lists 2 twice
    kw(1, 1, [2], [(9, 1, [])]),                      # sender id out of range
]


@pytest.mark.parametrize("wire", BAD_WIRES)
def test_bad_wires_raise_and_change_nothing(wire):
    p2, m2, m = held_wire(procs)
    p2.receive(0, m)                            # some state to keep; 1's wires are all new
    before = state(p2)
    with pytest.raises(WireError) as e:
        p2.receive(1, wire)
    assert "duplicate" not in str(e.value)
    assert state(p2) == before
    assert p2.receive(1, m2).delivered == [(1, b"M2")]


def test_entry_listing_another_destination_of_m_is_refused():
    # SND step 2 leaves only the copy's own destination of M in any o.Dests.
    p0, p1, p2, p3 = procs(4)
    p2.receive(0, one(p0.send([2], b"a")))
    before = state(p2)
    with pytest.raises(WireError, match="bad O_M entry"):
        p2.receive(1, kw(1, 1, [2, 3], [(0, 1, [3])]))
    assert state(p2) == before
    assert p2.receive(1, kw(1, 1, [2, 3], [(0, 1, [2])], b"ok")).delivered == [(1, b"ok")]


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
    lambda p: p.send([2, 2], b"x"),
    lambda p: p.send([3], b"x"),
    lambda p: p.send([1], None),
    lambda p: p.receive(0, b""),
    lambda p: p.receive(-1, b""),
    lambda p: p.receive(1, 5),
])
def test_bad_arguments_raise_value_error_and_change_nothing(call):
    p = Ks(0, 3)
    p.send([1], b"a")
    before = state(p)
    with pytest.raises(ValueError) as e:
        call(p)
    assert not isinstance(e.value, WireError)
    assert state(p) == before


def test_exhausted_clock():
    p = Ks(0, 2)
    p.clock = 0xFFFFFFFF
    with pytest.raises(ValueError, match="exhausted"):
        p.send([1], b"x")
    assert p.log == {0: {0: 0}, 1: {0: 0}}


# ---- the C twin (csrc/sim/ks.c); tests/sim/test_fast_machines.py covers honest schedules ----

twin = pytest.mark.skipif("ks" not in fast.NAMES, reason="bus1py.sim._fast has no ks")


def shuffled(data, rng):
    """The same message with its Dests, O_M entries and each entry's ids in another order:
    ks.py accepts it, and the order reaches its log rows (dicts) and so its later wires."""
    k, t, nd, no = struct.unpack_from("<HIHH", data, 0)
    at = 10 + 2 * nd
    dests = list(struct.unpack_from(f"<{nd}H", data, 10))
    dlens = struct.unpack_from(f"<{no}H", data, at)
    senders = struct.unpack_from(f"<{no}H", data, at + 2 * no)
    clocks = struct.unpack_from(f"<{no}I", data, at + 4 * no)
    at += 8 * no
    om = []
    for s, c, ln in zip(senders, clocks, dlens):
        ids = list(struct.unpack_from(f"<{ln}H", data, at))
        at += 2 * ln
        rng.shuffle(ids)
        om.append((s, c, ids))
    rng.shuffle(om)
    rng.shuffle(dests)
    return kw(k, t, dests, om, data[at:])


@twin
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 7), multicast=st.booleans())
def test_c_twin_follows_wires_in_any_entry_order(seed, n, multicast):
    rng = random.Random(seed)
    py, cc = procs(n), [fast.Machine("ks", i, n) for i in range(n)]
    flight = []
    sent = 0

    def both(i, call, *args):
        a, b = getattr(py[i], call)(*args), getattr(cc[i], call)(*args)
        assert (b.wires, b.costs, b.delivered, cc[i].held) == \
            (a.wires, a.costs, a.delivered, py[i].held), (i, call)
        flight.extend((d, i, shuffled(w, rng)) for d, w in a.wires)

    while sent < 4 * n or flight:
        if sent < 4 * n and (not flight or rng.random() < 0.35):
            p = rng.randrange(n)
            others = [q for q in range(n) if q != p]
            both(p, "send", rng.sample(others, rng.randint(1, n - 1) if multicast else 1),
                 bytes([sent]))
            sent += 1
        else:
            d, s, w = flight.pop(rng.randrange(len(flight)) if rng.random() < 0.6 else -1)
            both(d, "receive", s, w)
    assert all(c.held == 0 for c in cc)


@twin
@pytest.mark.parametrize("wire", BAD_WIRES)
def test_c_twin_refuses_the_bad_wires(wire):
    c0, c1, c2 = (fast.Machine("ks", i, 3) for i in range(3))
    m = dict(c0.send([1, 2], b"M").wires)
    c1.receive(0, m[1])
    c2.receive(0, m[2])
    with pytest.raises(WireError):
        c2.receive(1, wire)
