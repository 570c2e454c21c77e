"""A kill at every step: a process SIGKILLed at any named point of the C
helper leaves a bus the survivors can reap and use on, losing, splitting and leaking
nothing.

The trial harness and what each trial asserts are in tests/killpoints.py.  Below: a few
trials per point in `make test`, hundreds with BUS1PY_LONG=1 (marked slow; command and
counts in docs/RELIABILITY.md), then one deterministic test per recovery the harness
found missing.
"""
from __future__ import annotations

import os
import random
from collections import Counter

import pytest

import bus1py
from bus1py import MessageType
from bus1py._b1 import lib

import killpoints as kp

FORK = kp.FORK
SHORT_TRIALS = 6
LONG_TRIALS = int(os.environ.get("BUS1PY_KILL_TRIALS", "300"))
long_run = pytest.mark.skipif(os.environ.get("BUS1PY_LONG") != "1",
                              reason="full-count run: set BUS1PY_LONG=1 (docs/RELIABILITY.md)")
# how many passes of each point a victim makes before it dies: up to a few workload rounds
MAX_AFTER = {"stage": 40, "locked": 40, "stamp": 40, "sync": 20, "commit": 40, "destroy": 8,
             "release": 8, "transfer": 8, "recv": 30, "fds_sent": 10, "fds_taken": 6}


@pytest.fixture(autouse=True)
def _gc_only_when_called(monkeypatch):
    """These tests reap their victims with gc themselves: no death watcher may be first."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")


def test_every_point_is_named():
    assert set(kp.POINTS) == set(MAX_AFTER)
    assert lib.b1_kill_at(lib.B1_KILL_POINTS, 0) < 0
    assert lib.b1_kill_at(lib.B1_KILL_NONE, 0) == 0


def run_point(point, trials, tmp_path, base_seed=0):
    """`trials` trials at one point: the outcomes (killed, op, rule) counted, and the
    trace rows and the reaper's work summed."""
    seen, totals = Counter(), Counter()
    for t in range(trials):
        seed = base_seed + t
        after = random.Random(f"{point}-{seed}").randrange(MAX_AFTER[point])
        r = kp.run_trial(point, seed, after, str(tmp_path))
        seen[(r["killed"], r["op"], r["rule"])] += 1
        totals.update(rows=r["rows"], **r["gc"])
    return seen, totals


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", sorted(MAX_AFTER))
def test_kill_at_point(point, tmp_path):
    seen, _ = run_point(point, SHORT_TRIALS, tmp_path)
    assert sum(n for (killed, _, _), n in seen.items() if killed) >= 1, seen


@pytest.mark.slow
@long_run
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("point", sorted(MAX_AFTER))
def test_kill_at_point_long(point, tmp_path):
    seen, totals = run_point(point, LONG_TRIALS, tmp_path, base_seed=1000)
    print(f"\nkill point {point}: {LONG_TRIALS} trials: " +
          ", ".join(f"{'killed' if k else 'not reached'} in {op} ({rule or '-'}): {n}"
                    for (k, op, rule), n in sorted(seen.items(), key=str)) +
          f"; totals {dict(totals)}", flush=True)  # flushed: forked children must not inherit it
    assert sum(n for (killed, _, _), n in seen.items() if killed) >= LONG_TRIALS * 9 // 10, seen


# ---- the recoveries, one by one ----

def _die_at(point, after, call):
    """In a forked child: arm the point, then call(); the child must die at the point."""
    def child():
        lib.b1_kill_at(kp.POINTS[point], after)
        call()
        os._exit(3)
    p = FORK.Process(target=child)
    p.start()
    p.join(timeout=30)
    assert p.exitcode == -9, p.exitcode


def _zero_use(bus):
    bus.gc()
    info = bus.info()
    return {k: info[k] for k in ("peers", "nodes", "handles", "entries_in_use", "pool_used")}


def _settled(bus, survivor):
    """Nothing more is queued for the survivor; once it leaves, the bus holds nothing."""
    with pytest.raises(BlockingIOError):
        survivor.recv(timeout=0)
    survivor.disconnect()
    assert not any(_zero_use(bus).values())


def _fresh_victim(bus):
    """A peer whose only holder will be the child that uses it."""
    v = bus.peer()
    kp.let_go(bus, v)
    return v


@pytest.mark.timeout(60)
def test_sender_killed_between_its_stages_leaks_nothing():
    # a multicast carrying a handle dies after staging 1 of 3 copies: the staged one is
    # removed, the two never staged are freed with their handle registrations
    with bus1py.Bus.create() as bus:
        s = bus.peer()
        nodes = [s.create_node() for _ in range(3)]
        v = _fresh_victim(bus)
        to = [s.transfer(n, v) for n in nodes]

        def send():
            v.send(to, b"x", handles=[v.create_node()])
        _die_at("stage", 0, send)
        stats = bus.gc()
        assert stats["peers_reaped"] == 1
        # the message is rolled back: s reads only its nodes coming back
        got = Counter()
        while True:
            try:
                got[s.recv(timeout=0).type] += 1
            except BlockingIOError:
                break
        assert got == {MessageType.NODE_RELEASE: 3}
        s.disconnect()
        assert not any(_zero_use(bus).values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point, after, delivered", [("stage", 0, 0), ("stage", 1, 0), ("sync", 0, 5),
                                                     ("commit", 0, 5), ("commit", 1, 5)])
def test_multicast_batch_killed_between_its_destinations_is_all_or_nothing(point, after, delivered):
    # send_many of 5 to 3 receivers stages all 5 at one receiver after another, stamps
    # them, then syncs and commits receiver by receiver: dead before the stamp, no
    # receiver gets any; dead after it, every receiver gets all 5, in order
    with bus1py.Bus.create() as bus:
        rs = [bus.peer() for _ in range(3)]
        v = _fresh_victim(bus)
        to = [r.transfer(r.create_node(), v) for r in rs]
        payloads = [b"m%d" % i for i in range(5)]

        def send():
            v.send_many(to, payloads)
        _die_at(point, after, send)
        assert bus.gc()["peers_reaped"] == 1
        for r in rs:
            got = []
            while True:
                try:
                    m = r.recv(timeout=0)
                except BlockingIOError:
                    break
                if m.type == MessageType.DATA:
                    got.append(m.payload)
            assert got == payloads[:delivered], (point, after)
            r.disconnect()
        assert not any(_zero_use(bus).values())


@pytest.mark.timeout(60)
def test_destroyer_killed_before_its_stamp_destroys_through_the_reaper():
    with bus1py.Bus.create() as bus:
        s, v = bus.peer(), bus.peer()
        node = v.create_node()
        held = v.transfer(node, s)
        kp.let_go(bus, v)
        _die_at("destroy", 0, lambda: v.destroy(node))
        bus.gc()
        m = s.recv(timeout=5)
        assert (m.type, m.destination) == (MessageType.NODE_DESTROY, held)
        _settled(bus, s)


@pytest.mark.timeout(60)
def test_releaser_killed_before_the_notice_is_owed_it_by_the_reaper():
    with bus1py.Bus.create() as bus:
        s = bus.peer()
        node = s.create_node()
        v = _fresh_victim(bus)
        held = s.transfer(node, v)
        _die_at("release", 0, lambda: v.release(held))
        with pytest.raises(BlockingIOError):
            s.recv(timeout=0)
        bus.gc()
        m = s.recv(timeout=5)
        assert (m.type, m.destination) == (MessageType.NODE_RELEASE, node)
        bus.gc()  # owed once: nothing more
        _settled(bus, s)


@pytest.mark.timeout(60)
def test_receiver_killed_mid_receive_leaks_nothing():
    with bus1py.Bus.create() as bus:
        s = bus.peer()
        v = _fresh_victim(bus)
        to_v = v.create_node()
        dest = v.transfer(to_v, s)
        kp.let_go(bus, v)
        carried = s.create_node()
        s.send(dest, b"y" * 100, handles=[carried])
        _die_at("recv", 0, lambda: v.recv(timeout=5))
        bus.gc()
        s.disconnect()
        assert not any(_zero_use(bus).values())


def test_destroyed_node_of_a_peer_that_leaves_unread_is_freed():
    # no kill: the owner leaves with its own NODE_DESTROY unread in its queue
    with bus1py.Bus.create() as bus:
        p = bus.peer()
        p.destroy(p.create_node())
        p.disconnect()
        assert not any(_zero_use(bus).values())
