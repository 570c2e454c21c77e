"""jpcy: exact transcripts, the pruning kinds of seed 001 Fig. 1, invariants, bytes, bad input;
and the C twin (csrc/sim/jpcy.c) on hand-built wires, which honest schedules never produce."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py import causal
from bus1py.causal import WireCost, WireError
from bus1py.causal.jpcy import Jpcy
from bus1py.sim import fast
from harness import random_run as _random_run
from harness import bits, one, held_wire, truncated_wires_raise_and_change_nothing


def procs(n):
    return [Jpcy(i, n) for i in range(n)]


def jw(j, tau, dests, ci=(), dc=(), payload=b""):
    """A wire built independently of the module: ci = [(k, tau, [ids])], dc = [(k, tau)]."""
    head = struct.pack("<HIHHH", j, tau, len(dests), len(ci), len(dc))
    head += struct.pack(f"<{len(dests)}H", *dests)
    head += struct.pack(f"<{len(ci)}H", *(len(ids) for _, _, ids in ci))
    allids = [x for _, _, ids in ci for x in ids]
    ctl = struct.pack(f"<{len(ci)}H", *(k for k, _, _ in ci))
    ctl += struct.pack(f"<{len(ci)}I", *(t for _, t, _ in ci))
    ctl += struct.pack(f"<{len(allids)}H", *allids)
    ctl += struct.pack(f"<{len(dc)}H", *(k for k, _ in dc))
    ctl += struct.pack(f"<{len(dc)}I", *(t for _, t in dc))
    return head + ctl + payload


def state(p):
    return (p.tau, {k: dict(v) for k, v in p.ci.items()}, list(p.dlv), p.held,
            {k: [(r[4], r[3], r[2]) for r in v] for k, v in p._hold.waiting.items()})


def test_registered_and_flags():
    assert causal.protocol_class("jpcy") is Jpcy
    assert Jpcy.multicast == "native" and Jpcy.causal and "DC_m" in Jpcy.rule


def test_exact_wires_and_costs():
    p0 = Jpcy(0, 3)
    s = p0.send([1], b"a")
    assert s.wires == [(1, jw(0, 1, [1], payload=b"a"))]
    assert s.costs == [WireCost(14, 0, 0, True)]          # own tuple added after the copy
    assert p0.ci == {0: {1: bits(1)}}
    s = p0.send([2], b"b")
    assert s.wires == [(2, jw(0, 2, [2], ci=[(0, 1, [1])], payload=b"b"))]
    assert s.costs == [WireCost(16, 6 + 2, 1, True)]
    # S2 moves (0, 1) into DC[1] and strips 1; S3 drops the emptied, no longer newest tuple.
    s = p0.send([1], b"c")
    assert s.wires == [(1, jw(0, 3, [1], ci=[(0, 2, [2])], dc=[(0, 1)], payload=b"c"))]
    assert s.costs == [WireCost(16, 8 + 6, 2, True)]
    assert p0.ci == {0: {2: bits(2), 3: bits(1)}}


def test_multicast_copies_share_ci_and_differ_in_dc():
    p0 = Jpcy(0, 4)
    p0.send([1], b"x")
    p0.send([2], b"y")                                    # CI_0[0] = {1: {1}, 2: {2}}
    s = p0.send([2, 1, 3], b"m")
    w = dict(s.wires)
    # S2 strips every destination of m from CI, S3 then drops the older empty tuple.
    assert w[2] == jw(0, 3, [2, 1, 3], ci=[(0, 2, [])], dc=[(0, 2)], payload=b"m")
    assert w[1] == jw(0, 3, [2, 1, 3], ci=[(0, 2, [])], dc=[(0, 1)], payload=b"m")
    assert w[3] == jw(0, 3, [2, 1, 3], ci=[(0, 2, [])], payload=b"m")
    assert [c.dependents for c in s.costs] == [2, 2, 1]
    assert p0.ci == {0: {2: 0, 3: bits(1, 2, 3)}}


def test_p1_multicast_successor_overtakes_and_is_held():
    # M to {1, 2}; 1 delivers and sends M2 to 2; M2 reaches 2 first and must wait for M.
    p0, p1, p2 = procs(3)
    m = dict(p0.send([1, 2], b"M").wires)
    assert p1.receive(0, m[1]).delivered == [(0, b"M")]
    assert p1.ci == {0: {1: bits(2)}}                     # R4 keeps only the other destination
    m2 = one(p1.send([2], b"M2"))
    assert m2 == jw(1, 1, [2], ci=[(0, 1, [])], dc=[(0, 1)], payload=b"M2")
    s = p2.receive(1, m2)
    assert s.delivered == [] and s.wires == [] and p2.held == 1
    s = p2.receive(0, m[2])
    assert s.delivered == [(0, b"M"), (1, b"M2")] and p2.held == 0
    assert p2.dlv == [1, 1, 0]


def test_chain_overtaking_direct_message_is_held():
    # seed 000 Fig. 4: 0 sends x to 2, then y to 1; 1 delivers y and sends z to 2.
    p0, p1, p2 = procs(3)
    x = one(p0.send([2], b"x"))
    y = one(p0.send([1], b"y"))
    assert p1.receive(0, y).delivered == [(0, b"y")]
    z = one(p1.send([2], b"z"))
    assert p2.receive(1, z).delivered == [] and p2.held == 1
    assert p2.receive(0, x).delivered == [(0, b"x"), (1, b"z")] and p2.held == 0


def test_just_delivered_r4():
    # Fig. 1 type 2: the destination knows m1 was delivered to it.
    p0, p1, p2 = procs(3)
    p1.receive(0, one(p0.send([1], b"m1")))
    assert p1.ci == {0: {1: 0}}              # kept (newest of 0) but lists nobody
    p1.receive(0, dict(p0.send([1, 2], b"m2").wires)[1])
    assert p1.ci == {0: {2: bits(2)}}        # only the other destination stays


def test_already_delivered_r6():
    # Fig. 1 type 3: 2 hears of m1 (0 -> 1) from 0, then learns from 1 it was delivered.
    p0, p1, p2 = procs(3)
    m1 = one(p0.send([1], b"m1"))
    p2.receive(0, one(p0.send([2], b"m3")))
    assert p2.ci[0] == {1: bits(1), 2: 0}
    p1.receive(0, m1)
    m4 = one(p1.send([2], b"m4"))
    assert m4 == jw(1, 1, [2], ci=[(0, 1, [])], payload=b"m4")
    assert p2.receive(1, m4).delivered == [(1, b"m4")]
    # R6 intersects {1} with {}; R9 then drops the empty, no longer newest tuple.
    assert p2.ci == {0: {2: 0}, 1: {1: 0}}


def test_just_replaced_s2():
    # Fig. 1 type 4: 2 knows m1 (0 -> 1); its own m2 to 1 replaces it.
    p0, p1, p2 = procs(3)
    m1 = one(p0.send([1], b"m1"))
    p2.receive(0, one(p0.send([2], b"m3")))
    assert p2.ci[0] == {1: bits(1), 2: 0}
    m2 = one(p2.send([1], b"m2"))
    assert m2 == jw(2, 1, [1], ci=[(0, 2, [])], dc=[(0, 1)], payload=b"m2")
    assert p2.ci == {0: {2: 0}, 2: {1: bits(1)}}   # (0, 1) is gone from CI_2
    assert p1.receive(2, m2).delivered == [] and p1.held == 1
    assert p1.receive(0, m1).delivered == [(0, b"m1"), (2, b"m2")]


def test_already_replaced_r5():
    # Fig. 1 type 5: 2 knows m1 (0 -> 1); 0 then sends m5 to 1 (which carries m1), and m6
    # tells 2 about m5 without m1.
    p0, p1, p2 = procs(3)
    p0.send([1], b"m1")
    p2.receive(0, one(p0.send([2], b"m3")))
    assert p2.ci[0] == {1: bits(1), 2: 0}
    m5 = one(p0.send([1], b"m5"))
    assert m5 == jw(0, 3, [1], ci=[(0, 2, [2])], dc=[(0, 1)], payload=b"m5")
    m6 = one(p0.send([2], b"m6"))
    assert m6 == jw(0, 4, [2], ci=[(0, 3, [1])], dc=[(0, 2)], payload=b"m6")
    assert p2.receive(0, m6).delivered == [(0, b"m6")]
    assert p2.ci == {0: {3: bits(1), 4: 0}}       # (0, 1) pruned by R5, (0, 3) replaces it
    assert jw(2, 1, [1], ci=[(0, 4, [])], dc=[(0, 3)], payload=b"z") == one(p2.send([1], b"z"))


def test_r5_judges_both_sides_before_deleting():
    # CI_2[0] = {4, 5}; the wire's CI_m[0] = {3, 7}. 4 and 5 go (older than 7, absent from
    # CI_m); 3 goes too (older than 5, absent from CI_2) although 5 itself is deleted:
    # marking first makes the result independent of the loop order.
    p0, p1, p2, p3 = procs(4)
    for _ in range(4):
        p0.send([1], b"to 1")
    p2.receive(0, one(p0.send([2], b"m5")))
    assert p2.ci[0] == {4: bits(1), 5: 0}
    w = jw(1, 1, [2], ci=[(0, 3, [3]), (0, 7, [])], payload=b"w")
    assert p2.receive(1, w).delivered == [(1, b"w")]
    assert p2.ci[0] == {7: 0}


def test_r8_keeps_only_newest_tuple_per_destination():
    # Honest senders never hand over two tuples of one sender listing the same process
    # (their own CI keeps R8), so this wire is built by hand: R8 must still strip the older.
    p0, p1, p2, p3 = procs(4)
    p0.send([3], b"m1")
    p2.receive(0, one(p0.send([2], b"m2")))
    assert p2.ci[0] == {1: bits(3), 2: 0}
    w = jw(1, 1, [2], ci=[(0, 1, [3]), (0, 3, [3])], payload=b"w")
    assert p2.receive(1, w).delivered == [(1, b"w")]
    assert p2.ci[0] == {3: bits(3)}                # R5 drops 2, R8 empties 1, R9 drops it


def check_invariants(p):
    me = p.me
    for k, tuples in p.ci.items():
        assert tuples, "a known sender keeps at least one tuple"
        order = sorted(tuples, reverse=True)
        # S3 runs before S5 adds the own tuple, so our previous tuple may be empty until
        # the next S3 or R9 (which always check sender `me`): it never goes on a wire.
        kept = order[:2] if k == me else order[:1]
        seen = 0
        for t in order:
            D = tuples[t]
            assert not D >> me & 1, "CI never lists the process itself"
            assert not D & seen, "one tuple per sender lists a given destination"
            assert D or t in kept, "empty tuples only as the newest of their sender"
            seen |= D
        newest = order[0]
        assert newest >= p.dlv[k], "the newest delivered tuple of each sender is kept"
    if p.tau:
        assert max(p.ci[me]) == p.tau


def parse_cost(data):
    """(header, control, dependents) recomputed from a wire with the section 10 formula;
    also checks that a copy's CI holds an empty tuple only as its sender's newest."""
    j, tau, nd, nci, ndc = struct.unpack_from("<HIHHH", data, 0)
    hdr = 12 + 2 * nd + 2 * nci
    dlens = struct.unpack_from(f"<{nci}H", data, 12 + 2 * nd)
    senders = struct.unpack_from(f"<{nci}H", data, hdr)
    taus = struct.unpack_from(f"<{nci}I", data, hdr + 2 * nci)
    newest = {}
    for k, t in zip(senders, taus):
        newest[k] = max(newest.get(k, 0), t)
    for k, t, ln in zip(senders, taus, dlens):
        assert ln or t == newest[k]
    return hdr, sum(6 + 2 * x for x in dlens) + 6 * ndc, nci + ndc


def random_run(n, sends, seed, multicast, check=check_invariants):
    return _random_run(procs, parse_cost, check, n, sends, seed, multicast)


@pytest.mark.parametrize("multicast", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_invariants_bytes_and_liveness_after_random_runs(seed, multicast):
    random_run(5 + seed % 3, 150, seed, multicast)


def test_receive_order_respects_causality_per_sender():
    # Messages from one sender to one destination are causally ordered: any arrival order
    # yields delivery in send order.
    p0, p1 = procs(2)
    ws = [one(p0.send([1], bytes([i]))) for i in range(6)]
    out = []
    for w in reversed(ws):
        out += p1.receive(0, w).delivered
    assert out == [(0, bytes([i])) for i in range(6)]


def test_truncated_wires_raise_and_change_nothing():
    truncated_wires_raise_and_change_nothing(procs, parse_cost, state)


def corrupt(data, offset, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


BAD_WIRES = [
    lambda w: corrupt(w, 0, "<H", 0),                      # sender field is not src
    lambda w: corrupt(w, 2, "<I", 0),                      # tau 0
    lambda w: corrupt(w, 12, "<H", 7),                     # destination out of range
    lambda w: corrupt(w, 12, "<H", 1),                     # dests: sender, not receiver
    lambda w: jw(1, 1, [2, 2], ci=[(0, 1, [])], dc=[(0, 1)]),          # duplicate dest
    lambda w: jw(1, 1, [2], ci=[(0, 1, [2])], dc=[(0, 1)]),           # CI lists a dest
    lambda w: jw(1, 1, [2], ci=[(0, 1, [0])], dc=[(0, 1)]),           # sent to itself
    lambda w: jw(1, 1, [2], ci=[(0, 1, []), (0, 1, [])]),              # tuple twice
    lambda w: jw(1, 1, [2], ci=[(1, 1, [])]),                          # own tau not older
    lambda w: jw(1, 1, [2], ci=[(2, 5, [])]),                          # receiver's future
    lambda w: jw(1, 1, [2], ci=[(0, 0, [])]),                          # tau 0 in CI
    lambda w: jw(1, 1, [2], ci=[(0, 1, [1, 1])]),                      # D lists 1 twice
    lambda w: jw(1, 1, [2], dc=[(2, 1)]),                              # waits on receiver
    lambda w: jw(1, 1, [2], dc=[(1, 1)]),                              # waits on itself
    lambda w: jw(1, 1, [2], dc=[(9, 1)]),                              # bad DC id
    lambda w: corrupt(w, 8, "<H", 500),                    # |CI| beyond the wire
]


@pytest.mark.parametrize("make", BAD_WIRES)
def test_bad_wires_raise_and_change_nothing(make):
    p2, m2, m = held_wire(procs)
    p2.receive(0, m)                            # some state to keep; 1's wires are all new
    before = state(p2)
    with pytest.raises(WireError) as e:
        p2.receive(1, make(m2))
    assert "duplicate" not in str(e.value)
    assert state(p2) == before
    assert p2.receive(1, m2).delivered == [(1, b"M2")]


def test_duplicates_raise_and_change_nothing():
    p2, m2, m = held_wire(procs)
    p2.receive(1, m2)
    before = state(p2)
    with pytest.raises(WireError, match="duplicate"):
        p2.receive(1, m2)                                  # already held
    assert state(p2) == before
    p2.receive(0, m)
    before = state(p2)
    with pytest.raises(WireError, match="duplicate"):
        p2.receive(0, m)                                   # already delivered
    assert state(p2) == before


@pytest.mark.parametrize("call", [
    lambda p: p.send([], b"x"),
    lambda p: p.send([0], b"x"),
    lambda p: p.send([1, 1], b"x"),
    lambda p: p.send([3], b"x"),
    lambda p: p.send([1], "x"),
    lambda p: p.receive(0, b""),
    lambda p: p.receive(5, b""),
    lambda p: p.receive(1, "x"),
])
def test_bad_arguments_raise_value_error_and_change_nothing(call):
    p = Jpcy(0, 3)
    p.send([1], b"a")
    before = state(p)
    with pytest.raises(ValueError) as e:
        call(p)
    assert not isinstance(e.value, WireError)
    assert state(p) == before


def test_bad_construction_and_exhausted_timestamps():
    with pytest.raises(ValueError):
        Jpcy(3, 3)
    with pytest.raises(ValueError):
        Jpcy(0, 1)
    p = Jpcy(0, 2)
    p.tau = 0xFFFFFFFF
    with pytest.raises(ValueError, match="exhausted"):
        p.send([1], b"x")
    assert p.tau == 0xFFFFFFFF and p.ci == {}


# ---- the C twin on hand-built wires ----

twin = pytest.mark.skipif("jpcy" not in fast.NAMES, reason="bus1py.sim._fast has no jpcy")


def cprocs(n):
    return [fast.Machine("jpcy", i, n) for i in range(n)]


def both(py, cc, call, *args):
    """The same input to both machines: the same result, or both refuse (None)."""
    try:
        a = getattr(py, call)(*args)
    except WireError:
        with pytest.raises(WireError):
            getattr(cc, call)(*args)
        return None
    b = getattr(cc, call)(*args)
    assert (b.wires, b.costs, b.delivered, cc.held) == (a.wires, a.costs, a.delivered, py.held)
    return a


@twin
@pytest.mark.parametrize("make", BAD_WIRES)
def test_twin_refuses_bad_wires(make):
    p2, m2, m = held_wire(procs)
    c2, _, cm = held_wire(cprocs)
    both(p2, c2, "receive", 0, m)
    assert both(p2, c2, "receive", 1, make(m2)) is None


@twin
def test_twin_keeps_the_order_of_a_ci_not_sorted_by_tau():
    # The Python dicts keep the wire's order, and so does the next wire.
    py, cc = Jpcy(2, 4), fast.Machine("jpcy", 2, 4)
    w = jw(1, 1, [2], ci=[(0, 7, []), (3, 2, [1]), (0, 3, [3]), (0, 5, [1])], payload=b"w")
    assert both(py, cc, "receive", 1, w).delivered == [(1, b"w")]
    assert list(py.ci) == [0, 3, 1] and list(py.ci[0]) == [7, 3, 5]
    assert both(py, cc, "send", [3], b"z").wires[0][1] == jw(
        2, 1, [3], ci=[(0, 7, []), (0, 5, [1]), (3, 2, [1]), (1, 1, [])], dc=[(0, 3)],
        payload=b"z")


@twin
@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(3, 6))
def test_twin_on_random_hand_built_wires(data, n):
    """Process 0 receives wires with any CI the Python machine accepts (senders interleaved,
    tuples in any order, constraints it must wait for) and sends now and then, which puts its
    CI on a wire; the two machines must agree throughout."""
    py, cc = Jpcy(0, n), fast.Machine("jpcy", 0, n)
    last = [0] * n
    ids = st.lists(st.integers(0, n - 1), unique=True, max_size=3)
    for _ in range(data.draw(st.integers(1, 10))):
        if data.draw(st.integers(0, 3)) == 0:
            dests = data.draw(st.lists(st.integers(1, n - 1), min_size=1, unique=True))
            both(py, cc, "send", dests, b"s")
            continue
        j = data.draw(st.integers(1, n - 1))
        tau = last[j] = last[j] + data.draw(st.integers(1, 2))
        dests = data.draw(st.permutations(
            [0] + data.draw(st.lists(st.integers(1, n - 1).filter(lambda x: x != j),
                                     unique=True))))
        ci, seen = [], set()
        for k, t, d in data.draw(st.lists(st.tuples(st.integers(0, n - 1),
                                                    st.integers(1, 6), ids), max_size=6)):
            t = min(t, tau - 1) if k == j else min(t, py.tau) if k == 0 else t
            if t and (k, t) not in seen:
                seen.add((k, t))
                ci.append((k, t, [x for x in d if x not in dests and x != k]))
        dc = [(k, t) for k, t in data.draw(st.lists(
            st.tuples(st.integers(1, n - 1), st.integers(1, 3)), max_size=3))
            if k != j or t < tau]
        if both(py, cc, "receive", j, jw(j, tau, dests, ci, dc, bytes([j, tau]))) is None:
            return
