"""Hostile arguments to every public call.

Invariants checked:
  - Wrong types, huge and negative numbers, unknown and stale ids, closed buses and gone
    peers make a call raise TypeError, ValueError or OSError with a message -- never
    OverflowError, SystemError or a crash from the C layer.
  - A call that raises changed nothing: every peer's query(), and the bus's use of peers,
    nodes, handles, entries and pool bytes are as before.
"""
from __future__ import annotations

import errno
import math
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import bus1py
from bus1py import Transaction

CLEAR = (TypeError, ValueError, OSError)

junk = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([-1, -(1 << 63), (1 << 32) - 1, 1 << 32, (1 << 64) - 1, 1 << 64, 1 << 63, 0,
                     math.inf, -math.inf, math.nan]),
    st.text(max_size=4), st.binary(max_size=4),
    st.lists(st.integers(min_value=-(1 << 66), max_value=1 << 66), max_size=3),
    st.builds(object), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
# sizes for bus limits: every wrong one, no valid huge one (that would map a huge segment)
bad_limit = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3),
                      st.sampled_from([-1, -(1 << 63), 1 << 64, 1 << 70]), st.builds(object))


def our_segments() -> set:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"bus1py-{os.getpid()}-")}


class World:
    def __init__(self):
        self.bus = bus1py.Bus.create(max_peers=64, max_payload=1024, max_dests=8, max_msg_handles=4,
                                     quota_messages=64, pool_size=1 << 20)
        self.a, self.b = self.bus.peer(), self.bus.peer()
        self.node = self.b.create_node()
        self.h = self.b.transfer(self.node, self.a)
        gone = self.bus.peer()
        self.stale_handle = gone.create_node()
        gone.destroy(self.stale_handle, release=True)
        gone.disconnect()
        self.gone = gone
        self.tx = None

    def snapshot(self):
        info = self.bus.info()
        return ([self.a.query(), self.b.query()],
                {k: info[k] for k in ("peers", "nodes", "handles", "entries_in_use", "pool_used")})

    def settle(self):
        """After a call that succeeded (junk that happened to be valid): back to the start."""
        for p in (self.a, self.b):
            while True:
                try:
                    p.recv(timeout=0)
                except BlockingIOError:
                    break


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w
    w.bus.__exit__(None, None, None)


def check(world, call):
    before = world.snapshot()
    try:
        call()
    except CLEAR as e:
        assert str(e), f"{type(e).__name__} without a message"
        assert type(e) is not OverflowError, e
        assert world.snapshot() == before, f"failed with {e!r} but changed the bus"
        return e
    except BaseException as e:  # pragma: no cover - the failure being tested for
        raise AssertionError(f"unclear exception {type(e).__name__}: {e}") from e
    world.settle()
    return None


CALLS = {
    "send dest": lambda w, x: w.a.send(x, b"x"),
    "send payload": lambda w, x: w.a.send(w.h, x),
    "send handles": lambda w, x: w.a.send(w.h, b"x", x),
    "send dest list": lambda w, x: w.a.send([w.h, x], b"x"),
    "recv timeout": lambda w, x: w.a.recv(timeout=x),
    "transfer handle": lambda w, x: w.a.transfer(x, w.b),
    "transfer to": lambda w, x: w.b.transfer(w.node, x),
    "release": lambda w, x: w.a.release(x),
    "destroy": lambda w, x: w.b.destroy(x),
    "peer quota_messages": lambda w, x: w.bus.peer(quota_messages=x),
    "peer quota_handles": lambda w, x: w.bus.peer(quota_handles=x),
    "peer quota_bytes": lambda w, x: w.bus.peer(quota_bytes=x),
    "tx dests": lambda w, x: Transaction(w.a, x, b"x"),
    "tx payload": lambda w, x: Transaction(w.a, [w.h], x),
    "tx handles": lambda w, x: Transaction(w.a, [w.h], b"x", x),
    "tx stage": lambda w, x: _tx_step(w, "stage", x),
    "tx sync": lambda w, x: _tx_step(w, "sync", x),
    "tx commit": lambda w, x: _tx_step(w, "commit", x),
    "open": lambda w, x: bus1py.Bus.open(x),
    "attach": lambda w, x: bus1py.Bus.attach(x),
    "open mode": lambda w, x: bus1py.Bus.open(w.bus.name, mode=x).close(),
    "open trust_other_owner": lambda w, x: bus1py.Bus.open(w.bus.name, trust_other_owner=x).close(),
    "create mode": lambda w, x: bus1py.Bus.create(mode=x, max_peers=1).__exit__(None, None, None),
}


def _tx_step(w, step, x):
    tx = Transaction(w.a, [w.h], b"step")
    try:
        getattr(tx, step)(x)
    finally:
        tx.abort() if not tx.timestamp else None


@pytest.mark.parametrize("call", sorted(CALLS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=junk)
def test_junk_arguments_fail_cleanly(world, call, x):
    if call == "recv timeout":  # a valid time (None: for ever) would wait for it
        assume(x is not None and not (type(x) in (int, float) and (x > 0.01 or math.isnan(x))))
    result = check(world, lambda: CALLS[call](world, x))
    if result is not None and call == "peer quota_messages":
        assert "quota_messages" in str(result)


@pytest.mark.parametrize("limit", [f for f in bus1py.Limits.__dataclass_fields__ if f != "inject"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=bad_limit)
def test_bad_limits_fail_cleanly(world, limit, x):
    before = our_segments()
    e = check(world, lambda: bus1py.Bus.create(**{limit: x}))
    assert isinstance(e, (TypeError, ValueError)), e
    assert limit in str(e)
    assert our_segments() == before, "a refused bus left a segment"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=junk)
def test_bad_bus_names_fail_cleanly(world, name):
    made = []
    check(world, lambda: made.append(bus1py.Bus.create(name, max_peers=1)))
    for bus in made:  # junk that is a valid name (None: a fresh one)
        bus.__exit__(None, None, None)


@pytest.mark.parametrize("name", ["/\x00\x00", "bus\x00x", "/\ud800", "a\udfffb"])
@pytest.mark.parametrize("call", ["create", "open", "attach"])
def test_names_posix_ipc_cannot_take(world, call, name):
    # posix_ipc crashes the interpreter on these instead of raising: they never reach it
    e = check(world, lambda: getattr(bus1py.Bus, call)(name))
    assert isinstance(e, ValueError) and "bus name" in str(e), e


def test_stale_ids_and_gone_peers(world):
    w = world
    for call in (lambda: w.a.send(w.stale_handle, b"x"), lambda: w.a.release(w.stale_handle),
                 lambda: w.a.transfer(w.stale_handle, w.b), lambda: w.a.send(w.h, b"x", [w.stale_handle]),
                 lambda: w.b.destroy(w.stale_handle), lambda: Transaction(w.a, [w.stale_handle], b"x")):
        e = check(w, call)
        assert isinstance(e, OSError) and e.errno == errno.ENXIO, e
    g = w.gone
    for call in (lambda: g.send(w.h, b"x"), lambda: g.recv(timeout=0), g.create_node, g.query,
                 g.disconnect, lambda: g.transfer(w.h, w.a), lambda: g.release(w.h),
                 lambda: g.destroy(w.h), lambda: w.b.transfer(w.node, g),
                 lambda: Transaction(g, [w.h], b"x")):
        e = check(w, call)
        assert isinstance(e, OSError) and e.errno == errno.ESHUTDOWN, e


def test_a_closed_bus_refuses_every_call():
    bus = bus1py.Bus.create(max_peers=4)
    try:
        a = bus.peer()
        n = a.create_node()
        bus.close()
        calls = [bus.info, bus.gc, bus.peers, bus.peer, bus.scratch, a.create_node, a.query,
                 a.disconnect, lambda: a.send(n, b"x"), lambda: a.recv(timeout=0),
                 lambda: a.release(n), lambda: a.destroy(n), lambda: a.transfer(n, a),
                 lambda: Transaction(a, [n], b"x")]
        for call in calls:
            with pytest.raises(ValueError, match="closed"):
                call()
        bus.close()  # twice is fine
    finally:
        bus.unlink()
