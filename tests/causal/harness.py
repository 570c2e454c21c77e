"""A random run of a dependency-list protocol, with its per-wire and end-of-run checks.

Shared by the prs, ks and jpcy transcripts: random sends (unicast or multicast) and random
deliveries of in-flight wires until all are delivered. Every wire's measured cost must add up
to its length and match the protocol's own decoding of it (`parse_cost`), `check(machine)`
runs after every step, and at the end nothing is held and every copy was delivered once.
Also the wire that must be held (`held_wire`) and the truncation check every decoder passes:
a wire cut anywhere in its header or control part raises WireError and changes nothing.
"""
from __future__ import annotations

import random

import pytest

from bus1py.causal import WireError


def random_run(procs, parse_cost, check, n, sends, seed, multicast):
    rng = random.Random(seed)
    ps = procs(n)
    flight, expected, got = [], {}, {}
    done = 0
    while done < sends or flight:
        if done < sends and (not flight or rng.random() < 0.4):
            s = rng.randrange(n)
            others = [x for x in range(n) if x != s]
            dests = rng.sample(others, rng.randint(1, n - 1) if multicast else 1)
            payload = f"{s}:{done}".encode()
            step = ps[s].send(dests, payload)
            for (d, data), c in zip(step.wires, step.costs):
                assert c.header + c.control + len(payload) == len(data)
                assert (c.header, c.control, c.dependents) == parse_cost(data)
                flight.append((s, d, data))
                expected.setdefault(d, []).append(payload)
            done += 1
            check(ps[s])
        else:
            s, d, data = flight.pop(rng.randrange(len(flight)))
            for _, payload in ps[d].receive(s, data).delivered:
                got.setdefault(d, []).append(payload)
            check(ps[d])
    assert all(p.held == 0 for p in ps)
    assert {d: sorted(v) for d, v in got.items()} == {d: sorted(v) for d, v in expected.items()}
    return ps


def bits(*ids):
    """The destination bit mask of process ids."""
    m = 0
    for x in ids:
        m |= 1 << x
    return m


def one(step):
    """The only wire of a unicast step."""
    (dest, data), = step.wires
    return data


def held_wire(procs):
    """Process 2 of 3 holding nothing yet, a wire to it that must be held (it depends on a
    copy p2 has not received), and the copies of the multicast it depends on."""
    p0, p1, p2 = procs(3)
    m = dict(p0.send([1, 2], b"M").wires)
    p1.receive(0, m[1])
    return p2, one(p1.send([2], b"M2")), m[2]


def truncated_wires_raise_and_change_nothing(procs, parse_cost, state):
    p2, m2, _ = held_wire(procs)
    hdr, ctl, _ = parse_cost(m2)
    for cut in range(hdr + ctl):
        before = state(p2)
        with pytest.raises(WireError):
            p2.receive(1, m2[:cut])
        assert state(p2) == before
    assert p2.receive(1, m2).delivered == [] and p2.held == 1
