"""Deaths noticed without gc (bus1py/watch.py): nobody calls gc in these tests.

Invariants checked:
  - a server SIGKILLed while its client waits in recv is noticed within 1 s: the client
    gets NODE_DESTROY for the server's node, and the server's names are gone;
  - the same for a server killed right after it joined (before any watcher had it in its
    poll set), and for a client in a process unrelated to the server;
  - a live holder is never reaped, however long the watchers run;
  - `fileno()` of a disconnected peer reports POLLHUP, and recv raises BrokenPipeError;
  - Bus.close stops the watcher; BUS1PY_WATCH=0, or Bus.open(watch=False) as the admin
    commands that only look use it, starts none.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import bus1py
from bus1py import MessageType

SPAWN = mp.get_context("spawn")
NOTICE = 1.0  # seconds: the bound from a death to NODE_DESTROY at a waiting client


def _server(name, ready, hold, svc="svc"):
    bus = bus1py.Bus.open(name)
    peer = bus.peer()
    peer.publish(svc, peer.create_node())
    ready.put(os.getpid())
    time.sleep(hold)


@contextlib.contextmanager
def _running_server(bus, hold=60):
    """A spawned server that published "svc" and holds its peer for `hold` seconds."""
    q = SPAWN.Queue()
    server = SPAWN.Process(target=_server, args=(bus.name, q, hold), daemon=True)
    server.start()
    try:
        q.get(timeout=30)
        yield server
    finally:
        server.kill()
        server.join()


def _watchers():
    return [t for t in threading.enumerate() if t.name.startswith("bus1py-watch-")]


@pytest.fixture
def bus(make_bus):
    return make_bus(max_peers=16, pool_size=1 << 20)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("settle", [0.8, 0.0], ids=["watched", "just-joined"])
def test_sigkilled_server_is_noticed_by_a_waiting_client(bus, settle):
    with _running_server(bus) as server:
        client = bus.peer()
        h = client.lookup("svc")
        time.sleep(settle)  # "watched": the watcher has the server's pidfd by now
        killed = time.monotonic()
        os.kill(server.pid, signal.SIGKILL)
        msg = client.recv(timeout=5)
        noticed = time.monotonic() - killed
        assert (msg.type, msg.destination) == (MessageType.NODE_DESTROY, h)
        assert noticed < NOTICE, f"noticed after {noticed:.3f} s"
        assert bus.names() == {}
    assert bus.check() == []


CLIENT = textwrap.dedent("""
    import sys, time, bus1py
    peer = bus1py.Bus.open(sys.argv[1]).peer()
    h = peer.lookup("svc")
    print("ready", flush=True)
    msg = peer.recv(timeout=10)
    t = time.monotonic()
    print(msg.type.name, msg.destination == h, t, flush=True)
""")


@pytest.mark.timeout(60)
def test_unrelated_client_notices_a_sigkilled_server(bus):
    with _running_server(bus) as server:
        client = subprocess.Popen([sys.executable, "-c", CLIENT, bus.name], stdout=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "ready"
            time.sleep(0.8)
            killed = time.monotonic()
            os.kill(server.pid, signal.SIGKILL)
            kind, same, at = client.stdout.readline().split()
            assert (kind, same) == ("NODE_DESTROY", "True")
            assert float(at) - killed < NOTICE
            assert client.wait(timeout=10) == 0
        finally:
            client.kill()
            client.wait()


@pytest.mark.timeout(60)
def test_live_holders_are_never_reaped(bus):
    with _running_server(bus):
        client = bus.peer()
        h = client.lookup("svc")
        time.sleep(2.5)  # several watcher rounds, in this process and the server's
        with pytest.raises(BlockingIOError):
            client.recv(0)
        client.send([h], b"still there")
        assert list(bus.names()) == ["svc"]


def _disconnect(peer):
    peer.disconnect()


@pytest.mark.timeout(30)
def test_fileno_hangs_up_when_the_peer_is_disconnected(bus):
    peer = bus.peer()
    poller = select.poll()
    poller.register(peer.fileno(), select.POLLIN)
    assert poller.poll(0) == []
    other = SPAWN.Process(target=_disconnect, args=(peer,))  # by another process
    other.start()
    other.join(timeout=20)
    assert other.exitcode == 0
    events = poller.poll(NOTICE * 1000)
    assert events and events[0][1] & select.POLLHUP
    with pytest.raises(BrokenPipeError):
        peer.recv(0)
    assert poller.poll(0)[0][1] & select.POLLHUP  # for good
    r, _, _ = select.select([peer.fileno()], [], [], 0)
    assert r  # select and asyncio see it readable


def test_close_stops_the_watcher_and_the_switch_starts_none(monkeypatch):
    b = bus1py.Bus.create(pool_size=1 << 16)
    assert any(t.name == f"bus1py-watch-{b.name}" for t in _watchers())
    looker = bus1py.Bus.open(b.name, watch=False)  # as `bus1py ls` and `fsck` open it
    assert [t.name for t in _watchers()].count(f"bus1py-watch-{b.name}") == 1
    looker.close()
    b.close()
    b.unlink()
    assert not any(t.name == f"bus1py-watch-{b.name}" for t in _watchers())
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    b = bus1py.Bus.create(pool_size=1 << 16)
    try:
        assert not any(t.name == f"bus1py-watch-{b.name}" for t in _watchers())
    finally:
        b.close()
        b.unlink()


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.environ.get("BUS1PY_LONG") != "1", reason="60 s measurement: set BUS1PY_LONG=1")
def test_idle_cpu_of_an_attached_process():
    """The figure in docs/RELIABILITY.md ("Deaths noticed"): a process attached to a bus
    with peers of 4 other processes, idle for 60 s, uses at most 0.1% of a CPU."""
    psutil = pytest.importorskip("psutil")
    b = bus1py.Bus.create(pool_size=1 << 20)
    q = SPAWN.Queue()
    procs = [SPAWN.Process(target=_server, args=(b.name, q, 90, f"svc{i}"), daemon=True) for i in range(4)]
    try:
        for p in procs:
            p.start()
        pids = [q.get(timeout=30) for _ in procs]
        time.sleep(3)
        ps = [psutil.Process(pid) for pid in pids]
        before = [sum(p.cpu_times()[:2]) for p in ps]
        t0 = time.monotonic()
        time.sleep(60)
        spent = [sum(p.cpu_times()[:2]) - c for p, c in zip(ps, before)]
        elapsed = time.monotonic() - t0
        print(f"\nidle CPU of each attached process: {[f'{x / elapsed:.3%}' for x in spent]}")
        assert max(spent) / elapsed <= 0.001, spent
    finally:
        for p in procs:
            p.kill()
            p.join()
        b.close()
        b.unlink()


@pytest.mark.timeout(60)
def test_a_paused_watcher_collects_nothing_until_resumed(bus):
    """Bus.gc(sole=True) pauses this process's watcher: while paused, a death waits."""
    from bus1py import watch

    with _running_server(bus) as server:
        client = bus.peer()
        h = client.lookup("svc")
        time.sleep(0.8)
        with watch.paused(bus):
            os.kill(server.pid, signal.SIGKILL)
            time.sleep(1.0)
            with pytest.raises(BlockingIOError):
                client.recv(0)  # nobody collected it: the watcher waits for the pause
        msg = client.recv(timeout=NOTICE + 0.5)
        assert (msg.type, msg.destination) == (MessageType.NODE_DESTROY, h)
