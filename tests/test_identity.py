"""Who holds a peer: an identity no later process shares, and exec as disconnection.

Invariants checked:
  - a dead process's pid given to a new process within the same clock tick (so pid and
    start time repeat) is not taken for the dead one, many times over: the peer it held
    alone is reaped by gc, and the block it staged when it was killed at the `stage`
    kill point is removed, so its receiver's queue is not pinned (run in a new pid
    namespace, where ns_last_pid hands the pid over without racing other processes);
  - a peer whose last holder process execs is disconnected within 1 s with nobody
    calling gc: its node's holders get NODE_DESTROY and its names are gone;
  - a process that calls keep_across_exec() before exec keeps its peers connected
    across it, until the new program exits.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import bus1py
from bus1py import MessageType

NOTICE = 1.0  # seconds: from an exec to NODE_DESTROY at a waiting client

# Runs as pid 1 of a new pid namespace (unshare --pid --fork --mount-proc), the bus given.
REUSE = textwrap.dedent("""
    import json, os, sys, time
    import bus1py
    from bus1py._lib import ffi, lib

    bus = bus1py.Bus.open(sys.argv[1])
    base = bus.base()
    receiver, sender = bus.peer(), bus.peer()
    to_receiver = receiver.transfer(receiver.create_node(), sender)
    stats = ffi.new("struct b1_gc_stats *")
    slot, pid_ = ffi.new("uint32_t *"), ffi.new("uint64_t *")

    def start(pid):
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])

    def same_tick_heir(victim):
        # the victim is a zombie: its start time, then its pid to a new process at once
        os.waitid(os.P_PID, victim, os.WEXITED | os.WNOWAIT)
        began = start(victim)
        os.waitpid(victim, 0)
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(victim - 1))
        r, w = os.pipe()
        heir = os.fork()
        if heir == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        return heir, w, heir == victim and start(heir) == began

    def holder(victim_slot, victim_id):
        # the victim holds a peer alone and exits
        os._exit(lib.b1_peer_attach(base, victim_slot, victim_id, os.getpid()) != 0)

    def stager():
        # the victim is killed with its block staged in the receiver's queue
        lib.b1_kill_at(lib.B1_KILL_STAGE, 0)
        sender.send([to_receiver], b"never")
        os._exit(3)

    out = {"holder": [0, 0], "stager": [0, 0]}  # same-tick reuses, and of those handled
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline and min(v[0] for v in out.values()) < int(sys.argv[3]):
        for kind in out:
            if kind == "holder":
                assert lib.b1_peer_new(base, 0, 0, 0, slot, pid_) == 0
                victim = os.fork()
                if victim == 0:
                    holder(slot[0], pid_[0])
            else:
                victim = os.fork()
                if victim == 0:
                    stager()
            heir, wake, same = same_tick_heir(victim)
            assert lib.b1_gc(base, stats) == 0
            if kind == "holder":
                handled = stats.peers_reaped == 1
            else:
                sender.send([to_receiver], b"after")
                try:
                    handled = receiver.recv(0).payload == b"after"
                except BlockingIOError:
                    handled = False
            os.close(wake)
            os.waitpid(heir, 0)
            assert lib.b1_gc(base, stats) == 0  # whatever the heir's life pinned goes now
            while True:
                try:
                    receiver.recv(0)
                except BlockingIOError:
                    break
            if same:
                out[kind][0] += 1
                out[kind][1] += handled
    print(json.dumps(out), flush=True)
""")


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_pid_reused_within_the_same_tick_is_another_process(make_bus, monkeypatch):
    # no watcher here or there: gc runs only when the script calls it (and pids of the
    # namespace mean other processes out here)
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(max_peers=64, pool_size=1 << 20)
    env = dict(os.environ)
    run = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE,
                          bus.name, "8", "10"], capture_output=True, text=True, timeout=45, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    print(f"\nsame-tick reuses, and of those told apart: {out}")
    for kind, (same, handled) in out.items():
        assert same >= 3, f"{kind}: only {same} same-tick reuses in 8 s"
        assert handled == same, f"{kind}: {same - handled} of {same} same-tick heirs taken for the dead"
    assert bus.check() == []


# A server that publishes "svc", says "ready", then execs `sleep` (handing its peers
# across when argv[2] is "keep").
EXECS = textwrap.dedent("""
    import os, sys, bus1py
    peer = bus1py.Bus.open(sys.argv[1]).peer()
    peer.publish("svc", peer.create_node())
    if sys.argv[2] == "keep":
        bus1py.keep_across_exec()
    print("ready", flush=True)
    sys.stdin.readline()
    os.execv("/bin/sleep", ["sleep", "30"])
""")


@contextlib.contextmanager
def _execs(bus, how, settle=0.0):
    """A server of EXECS told to exec once a client here looked "svc" up and `settle`
    seconds passed: yields (client, its handle, when the server was told)."""
    server = subprocess.Popen([sys.executable, "-c", EXECS, bus.name, how], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        client = bus.peer()
        h = client.lookup("svc")
        time.sleep(settle)
        told = time.monotonic()
        server.stdin.write("go\n")
        server.stdin.flush()
        yield server, client, h, told
    finally:
        server.kill()
        server.wait()


@pytest.mark.timeout(60)
def test_exec_disconnects_the_peers_of_its_last_holder(make_bus):
    bus = make_bus(max_peers=16, pool_size=1 << 20)
    with _execs(bus, "drop", settle=0.6) as (server, client, h, execd):  # 0.6: watched by now
        msg = client.recv(timeout=5)
        noticed = time.monotonic() - execd
        assert (msg.type, msg.destination) == (MessageType.NODE_DESTROY, h)
        assert noticed < NOTICE, f"noticed after {noticed:.3f} s"
        assert bus.names() == {}
        assert server.poll() is None  # the process lives on: exec alone ended its peers
    assert bus.check() == []


@pytest.mark.timeout(60)
def test_keep_across_exec_hands_the_peers_to_the_new_program(make_bus):
    bus = make_bus(max_peers=16, pool_size=1 << 20)
    with _execs(bus, "keep") as (server, client, h, _):
        time.sleep(0.6)  # the exec done, and a watcher round after it
        bus.gc()
        with pytest.raises(BlockingIOError):
            client.recv(0)
        assert "svc" in bus.names()
        server.send_signal(signal.SIGKILL)
        msg = client.recv(timeout=5)
        assert (msg.type, msg.destination) == (MessageType.NODE_DESTROY, h)
    assert bus.check() == []
