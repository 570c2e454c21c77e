"""Restarts without gc: Bus.create over a named bus whose holders are all dead.

Invariants checked:
  - a bus whose creating server was killed (SIGTERM or SIGKILL) is created again at once,
    by a call that would have raised FileExistsError before, and serves calls;
  - a live bus is never taken over: FileExistsError says live processes use it, exist_ok opens
    that very segment;
  - processes that restart a dead bus at the same moment end with one bus: exactly one
    of them creates it (one compare-and-swap claims the dead one), the others get
    FileExistsError, or with exist_ok the winner's bus.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import posix_ipc
import pytest

import bus1py
import service
from bus1py.segment import reclaim

@pytest.fixture
def name(shm_name):
    n = shm_name("restart")
    yield n
    # the test's processes are gone: the name goes with its peers' store directories
    if reclaim("/" + n, 0o600) is not None:
        try:
            posix_ipc.unlink_shared_memory("/" + n)
        except posix_ipc.ExistentialError:
            pass


def _server(name):
    return service.start(name, "create")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_servers_bus_is_created_again_at_once(name, sig):
    server = _server(name)
    try:
        with pytest.raises(FileExistsError, match="live processes use it"):
            bus1py.Bus.create(name)
        server.send_signal(sig)
        server.wait(10)
        bus = bus1py.Bus.create(name)  # no gc, no wait
        try:
            assert bus.info()["creator_pid"] == os.getpid() and bus.names() == {}
        finally:
            bus.close()
            bus.unlink()
    finally:
        server.kill()
        server.wait()


@pytest.mark.timeout(60)
def test_exist_ok_opens_the_live_bus_and_a_call_is_served(name):
    server = _server(name)
    try:
        bus = bus1py.Bus.create(name, exist_ok=True)
        with bus.peer() as peer:
            assert bus.info()["creator_pid"] == server.pid
            assert peer.call(peer.lookup("svc"), b"?", timeout=10).payload == b"re:?"
        bus.close()
    finally:
        server.kill()
        server.wait()


CLAIMANT = textwrap.dedent("""
    import os, signal, sys, bus1py
    from bus1py._lib import lib
    bus = bus1py.Bus.open(sys.argv[1], watch=False)
    assert lib.b1_bus_reclaim(bus.base()) == 0
    os.kill(os.getpid(), signal.SIGKILL)  # the claim made, the name never unlinked
""")


@pytest.mark.timeout(60)
def test_a_claimant_killed_before_the_unlink_is_taken_over(name):
    server = _server(name)
    server.kill()
    server.wait()
    claimant = subprocess.run([sys.executable, "-c", CLAIMANT, name], timeout=60)
    assert claimant.returncode == -signal.SIGKILL
    bus = bus1py.Bus.create(name)
    bus.close()
    bus.unlink()


RACER = textwrap.dedent("""
    import sys, bus1py
    name, exist_ok = sys.argv[1], sys.argv[2] == "1"
    print("ready", flush=True)
    sys.stdin.readline()  # every racer is started: go
    try:
        bus = bus1py.Bus.create(name, exist_ok=exist_ok)
    except FileExistsError:
        print("exists", flush=True)
    else:
        print("bus", bus.info()["creator_pid"], flush=True)
    sys.stdin.read()  # held until every racer has answered
""")


@pytest.mark.timeout(90)
def test_racing_restarts_make_one_bus(name):
    """Two racers without exist_ok and two with: one bus, created by one of them; the
    other plain one gets FileExistsError, the exist_ok ones that bus."""
    server = _server(name)
    server.kill()
    server.wait()
    modes = ["0", "0", "1", "1"]
    racers = [subprocess.Popen([sys.executable, "-c", RACER, name, m], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for m in modes]
    try:
        for r in racers:
            assert r.stdout.readline().strip() == "ready"
        for r in racers:
            r.stdin.write("go\n")
            r.stdin.flush()
        said = [r.stdout.readline().split() for r in racers]
        winners = [r.pid for r, w in zip(racers, said) if w == ["bus", str(r.pid)]]
        assert len(winners) == 1, said
        for r, m, w in zip(racers, modes, said):
            if r.pid != winners[0]:
                assert w == (["bus", str(winners[0])] if m == "1" else ["exists"]), said
    finally:
        for r in racers:
            r.kill()
            r.wait()
