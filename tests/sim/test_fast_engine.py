"""The C event loop (csrc/sim/engine.c via bus1py.sim.cloop) is the twin of engine.py's loop.

For every protocol with a C machine, both loops run the same specs (n = 2, 5, 13, both
modes, two seeds, one of them wider than 32 bits) and must give the same figures, every key
but the two timings, bit for bit. An event digest (FNV-1a 64 over every machine call, its
wires, costs, deliveries and held count, in event order) catches a divergence the figures
could hide; the Python side hashes the same bytes over the Python machines' steps.
"""
from __future__ import annotations

import struct

import pytest

from bus1py.sim import cloop, engine, fast

pytestmark = pytest.mark.skipif(not cloop.NAMES,
                                reason="bus1py.sim._fast is not built with its loop")

TIMINGS = ("seconds", "receive_events_per_s")


def figures(spec, **kw):
    r = engine.run(spec, **kw)
    for k in TIMINGS:
        r.pop(k)
    return r


@pytest.mark.parametrize("name", cloop.NAMES)
@pytest.mark.parametrize("mode", engine.MODES)
@pytest.mark.parametrize("n", [2, 5, 13])
def test_same_figures(name, mode, n):
    for seed in (1, 2**40 + 7):
        spec = engine.RunSpec(name, n, mode, seed=seed, warmup=10, measure=40)
        want = figures(spec, fast=False)
        got = figures(spec)
        assert got == want, spec
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


def python_digest(spec, monkeypatch) -> int:
    """The digest csrc/sim/engine.c computes, over the Python loop and machines."""
    lib = fast.lib
    h = cloop.FNV_OFFSET

    def feed(*parts):
        nonlocal h
        b = b"".join(parts)
        h = lib.sim_fnv1a(h, b, len(b))

    def step_done(step, held):
        feed(struct.pack("<I", len(step.wires)))
        for (dest, data), c in zip(step.wires, step.costs):
            feed(struct.pack("<II", dest, len(data)), data,
                 struct.pack("<IIIB", c.header, c.control, c.dependents, c.data))
        feed(struct.pack("<I", len(step.delivered)))
        for sender, payload in step.delivered:
            feed(struct.pack("<II", sender, len(payload)), payload)
        feed(struct.pack("<q", held))

    create = engine.causal.create

    def traced(name, me, n):
        p = create(name, me, n)
        send, receive = p._send, p._receive

        def _send(dests, payload):
            feed(struct.pack(f"<BII{len(dests)}I", 0, me, len(dests), *dests))
            step = send(dests, payload)
            step_done(step, p.held)
            return step

        def _receive(src, data):
            feed(struct.pack("<BII", 1, me, src))
            step = receive(src, data)
            step_done(step, p.held)
            return step
        p._send, p._receive = _send, _receive
        return p

    with monkeypatch.context() as m:
        m.setattr(engine.causal, "create", traced)
        engine.run(spec, fast=False)
    return h


@pytest.mark.parametrize("name", cloop.NAMES)
@pytest.mark.parametrize("mode", engine.MODES)
def test_same_events(name, mode, monkeypatch):
    spec = engine.RunSpec(name, 13, mode, seed=3, warmup=5, measure=20)
    assert cloop.run(spec, digest=True).digest == python_digest(spec, monkeypatch)


def test_fnv1a():
    def fnv(b, h=cloop.FNV_OFFSET):
        for x in b:
            h = ((h ^ x) * 0x100000001b3) & (2**64 - 1)
        return h
    for b in (b"", b"a", b"foobar", bytes(range(256))):
        assert fast.lib.sim_fnv1a(cloop.FNV_OFFSET, b, len(b)) == fnv(b)


def test_fast_path_runs_no_python_machine(monkeypatch):
    def refuse(*a):
        raise AssertionError("a Python machine was created")
    monkeypatch.setattr(engine.causal, "create", refuse)
    r = engine.run(engine.RunSpec(cloop.NAMES[0], 5, "multicast", warmup=5, measure=10))
    assert r["undelivered"] == 0 and r["receive_events"] > 0


BAD = [dict(protocol="nosuch"), dict(n=1), dict(mode="broadcast"), dict(warmup=-1),
       dict(measure=0), dict(send_mean=0.0), dict(net_delay=-0.5)]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: next(iter(b)))
def test_bad_spec_raises_the_same(bad):
    spec = engine.RunSpec(**{**dict(protocol=cloop.NAMES[0], n=3, mode="unicast"), **bad})
    with pytest.raises(ValueError) as py:
        engine.run(spec, fast=False)
    with pytest.raises(ValueError) as c:
        engine.run(spec)
    assert type(c.value) is type(py.value) and str(c.value) == str(py.value)


def test_c_loop_refuses_a_spec_engine_would_not_hand_it():
    with pytest.raises(ValueError):
        cloop.run(engine.RunSpec(cloop.NAMES[0], 1, "unicast"))
    with pytest.raises(ValueError):
        cloop.run(engine.RunSpec("nosuch", 3, "unicast"))
