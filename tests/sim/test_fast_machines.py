"""Every C machine (csrc/sim/) is a byte-for-byte twin of its Python machine (bus1py.causal).

Both machines of a protocol are fed the same inputs in the same order, chosen by Hypothesis:
random sends (unicast and multicast, one destination at a time for a "sequential" protocol,
as the simulator serves it) and the network handing over any in-flight wire next, with runs
of newest-first and oldest-first. After every input the two must agree on every wire's
destination, bytes and cost, on every delivery and its order, and on `held`. The wires fed
on are the Python machine's, so a divergence is caught at the first input that shows it.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py import causal
from bus1py.sim import fast

pytestmark = pytest.mark.skipif(not fast.NAMES, reason="bus1py.sim._fast is not built")


def lockstep(name, n, seed, sends, multicast, sizes=None):
    """Drives the Python and C machines of `name` through one random schedule; returns the
    number of deliveries checked. Payloads are the send's number (8 bytes), or with `sizes`
    that many bytes, the length drawn from `sizes` for each send."""
    rng = random.Random(seed)
    py = [causal.create(name, i, n) for i in range(n)]
    cc = [fast.Machine(name, i, n) for i in range(n)]
    sequential = py[0].multicast == "sequential"
    flight: list = []                      # (dest, src, bytes)
    mode = "any"
    sent = delivered = 0

    def both(i, call, *args):
        nonlocal delivered
        a = getattr(py[i], call)(*args)
        b = getattr(cc[i], call)(*args)
        where = f"{name} n={n} seed={seed}: process {i} {call}"
        assert b.wires == a.wires, where
        assert b.costs == a.costs, where
        assert b.delivered == a.delivered, where
        assert cc[i].held == py[i].held, where
        flight.extend((d, i, data) for d, data in a.wires)
        delivered += len(a.delivered)

    while sent < sends or flight:
        if rng.random() < 0.1:
            mode = rng.choice(("any", "newest", "oldest"))
        if sent < sends and (not flight or rng.random() < 0.35):
            p = rng.randrange(n)
            others = [q for q in range(n) if q != p]
            dests = sorted(rng.sample(others, rng.randint(1, n - 1) if multicast else 1))
            payload = sent.to_bytes(8, "little") if sizes is None else \
                bytes([sent % 256]) * rng.choice(sizes)
            for group in ([[d] for d in dests] if sequential else [dests]):
                both(p, "send", group, payload)
            sent += 1
        else:
            k = {"any": rng.randrange(len(flight)), "newest": -1, "oldest": 0}[mode]
            dest, src, data = flight.pop(k)
            both(dest, "receive", src, data)
    assert all(p.held == 0 for p in cc)
    return delivered


@pytest.mark.parametrize("name", fast.NAMES)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 9), multicast=st.booleans())
def test_twin_on_random_schedules(name, seed, n, multicast):
    assert lockstep(name, n, seed, sends=4 * n, multicast=multicast) > 0


@pytest.mark.parametrize("name", fast.NAMES)
@pytest.mark.parametrize("multicast", [False, True])
def test_twin_at_n_30(name, multicast):
    assert lockstep(name, 30, 7, sends=120, multicast=multicast) > 0


@pytest.mark.parametrize("name", fast.NAMES)
@pytest.mark.parametrize("seed", [1, 2])
def test_twin_keeps_short_and_long_payloads_in_order(name, seed):
    # buffer.c and ordering.c (bus1) keep a payload of up to 16 bytes inline and a longer one
    # in a copy of its own: empty, inline-sized and longer payloads must all come out as the
    # Python machine's, in every twin
    assert lockstep(name, 5, seed, sends=40, multicast=True, sizes=(0, 1, 16, 17, 200)) > 0


def test_names_follow_the_protocol_list():
    assert set(fast.NAMES) <= set(causal.PROTOCOLS)
    assert list(fast.NAMES) == [p for p in causal.PROTOCOLS if p in fast.NAMES]


def test_machine_checks_arguments_as_the_python_one_does():
    with pytest.raises(ValueError, match="unknown protocol"):
        fast.Machine("nope", 0, 3)
    m = fast.Machine(fast.NAMES[0], 0, 3)
    with pytest.raises(ValueError, match="sending process itself"):
        m.send([0], b"x")
    with pytest.raises(ValueError, match="src must be another process"):
        m.receive(0, b"\0" * 8)


@pytest.mark.parametrize("name", fast.NAMES)
def test_truncated_wires_are_refused(name):
    py = causal.create(name, 0, 4)
    step = py.send([1, 2] if py.multicast != "sequential" else [1], b"payload!")
    data = step.wires[0][1]
    for cut in range(len(data) - 8):         # shorter than its framing
        c = fast.Machine(name, 1, 4)
        with pytest.raises(causal.WireError):
            c.receive(0, data[:cut])


def test_the_c_twins_register_the_names_of_the_python_classes():
    """csrc/sim/machine.c registers one twin per protocol, in bus1py.causal.PROTOCOLS order,
    each under the `name` its Python class has (the C file's `.name`)."""
    assert fast.NAMES == tuple(causal.protocol_class(p).name for p in causal.PROTOCOLS)
