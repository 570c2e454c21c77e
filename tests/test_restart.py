"""Restarts without gc: Bus.create over a named bus whose holders are all dead.

Invariants checked:
  - a bus whose creating server was killed (SIGTERM or SIGKILL) is created again at once,
    by a call that would have raised FileExistsError before, and serves calls;
  - a live bus is never taken over: FileExistsError says who holds it, exist_ok=True opens
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
import time

import posix_ipc
import pytest

import bus1py
import service

@pytest.fixture
def name(shm_name):
    n = shm_name("restart")
    yield n
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
    import sys, time, bus1py
    name, at, exist_ok = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
    time.sleep(max(0.0, at - time.time()))
    try:
        bus = bus1py.Bus.create(name, exist_ok=exist_ok)
    except FileExistsError:
        print("exists", flush=True)
    else:
        print("bus", bus.info()["creator_pid"], flush=True)
    sys.stdin.read()  # held until every racer has answered
""")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("exist_ok", [False, True])
def test_racing_restarts_make_one_bus(name, exist_ok):
    server = _server(name)
    server.kill()
    server.wait()
    at = time.time() + 1.0  # past every racer's start, so they meet at once
    racers = [subprocess.Popen([sys.executable, "-c", RACER, name, str(at), "1" if exist_ok else "0"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        said = [r.stdout.readline().split() for r in racers]
        created = [s for s in said if s[0] == "bus"]
        pids = {r.pid for r in racers}
        if exist_ok:
            assert len(created) == 4 and len({s[1] for s in created}) == 1, said
            assert int(created[0][1]) in pids
        else:
            assert len(created) == 1 and said.count(["exists"]) == 3, said
            assert int(created[0][1]) in pids
    finally:
        for r in racers:
            r.kill()
            r.wait()
