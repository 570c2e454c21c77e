"""Nodes and peers across real processes: concurrent disconnects, destruction racing with
senders, quotas against a stopped receiver, processes killed with SIGKILL, admin commands.
Every test has a timeout and kills its children if it fails."""
from __future__ import annotations

import contextlib
import errno
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

import bus1py
from bus1py import HANDLE_INVALID, MessageType

DESTROY, DATA = MessageType.NODE_DESTROY, MessageType.DATA
FORK = mp.get_context("fork")
BUS1PY = [sys.executable, "-m", "bus1py.cli"]


@contextlib.contextmanager
def children(*procs):
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)


def drain(peer, timeout=0.0):
    out = []
    while True:
        try:
            out.append(peer.recv(timeout=timeout))
        except (BlockingIOError, TimeoutError):
            return out


# ---- the hive ----

def _hive_child(peer, go):
    go.wait(60)
    peer.disconnect()


@pytest.mark.timeout(180)
def test_hive_500_children_disconnect_concurrently():
    n = 500
    with bus1py.Bus.create(max_peers=n + 8, spin_ns=0) as bus:
        parent = bus.peer()
        kids = [bus.peer() for _ in range(n)]
        handles = {k.transfer(k.create_node(), parent) for k in kids}
        go = FORK.Event()
        with children(*[FORK.Process(target=_hive_child, args=(k, go)) for k in kids]) as procs:
            go.set()
            got = [parent.recv(timeout=60) for _ in range(n)]
            for p in procs:
                p.join(timeout=60)
            assert all(p.exitcode == 0 for p in procs)
        assert all(m.type == DESTROY for m in got)
        assert {m.destination for m in got} == handles  # exactly one per node, own ids
        assert drain(parent, 0.2) == []


# ---- destruction racing with senders ----

def _racing_sender(peer, h_owner, h_watcher, h_node_for_watcher, index, started, stop):
    started.release()
    k = 0
    while not stop.is_set() and k < 20000:
        peer.send([h_owner], index.to_bytes(2, "little") + k.to_bytes(4, "little"))
        # pass our handle to the node along to a watcher, racing with its destruction
        peer.send([h_watcher], b"h", handles=[h_node_for_watcher])
        k += 1


@pytest.mark.timeout(120)
def test_destroy_racing_with_senders():
    """Every message to the node is delivered before the owner's NODE_DESTROY or dropped,
    never after; handles passed meanwhile are valid exactly when ordered before the
    destruction, and a valid one is always followed by NODE_DESTROY."""
    with bus1py.Bus.create(spin_ns=0, max_entries=1 << 20, pool_size=256 << 20,
                           quota_messages=1 << 20, quota_bytes=1 << 28) as bus:
        owner, watcher = bus.peer(), bus.peer()
        node = owner.create_node()
        w_node = watcher.create_node()
        senders = [bus.peer() for _ in range(4)]
        args = [(s, owner.transfer(node, s), watcher.transfer(w_node, s), owner.transfer(node, s))
                for s in senders]
        started, stop = FORK.Semaphore(0), FORK.Event()
        procs = [FORK.Process(target=_racing_sender, args=(*a, i, started, stop))
                 for i, a in enumerate(args)]
        with children(*procs):
            for _ in procs:
                assert started.acquire(timeout=30)
            time.sleep(0.2)
            owner.destroy(node)
            time.sleep(0.2)
            stop.set()
            for p in procs:
                p.join(timeout=30)
        got = drain(owner)
        kinds = [m.type for m in got]
        assert kinds.count(DESTROY) == 1
        after = kinds[kinds.index(DESTROY) + 1:]
        assert DATA not in after, "a message to the node was delivered after its NODE_DESTROY"
        per_sender = {}
        for m in got[:kinds.index(DESTROY)]:
            per_sender.setdefault(int.from_bytes(m.payload[:2], "little"), []).append(
                int.from_bytes(m.payload[2:], "little"))
        for seqs in per_sender.values():  # what was delivered is a gap-free prefix
            assert seqs == list(range(len(seqs)))
        # the watcher: valid handles only before its NODE_DESTROY, invalid only after
        seen_destroy, valid, invalid_before = False, 0, 0
        for m in drain(watcher):
            if m.type == DESTROY:
                assert not seen_destroy
                seen_destroy = True
            elif m.handles[0] == HANDLE_INVALID:
                invalid_before += not seen_destroy
            else:
                assert not seen_destroy, "a valid handle arrived after NODE_DESTROY"
                valid += 1
        assert valid == 0 or seen_destroy, "a valid handle was never followed by NODE_DESTROY"
        assert invalid_before == 0, "a handle ordered before the destruction arrived invalid"


# ---- quotas against a stopped receiver ----

def _stopped_receiver(peer, count_out, go):
    go.wait(60)
    got = [int.from_bytes(peer.recv(timeout=30).payload, "little") for _ in range(count_out.value)]
    count_out.value = len(got) if got == list(range(len(got))) else -1


@pytest.mark.timeout(60)
def test_stopped_receiver_makes_senders_fail_fast_while_others_work():
    with bus1py.Bus.create(spin_ns=0) as bus:
        # a sender alone holds 50 of 99 (fair shares)
        sender, slow, other = bus.peer(), bus.peer(quota_messages=99), bus.peer()
        h_slow = slow.transfer(slow.create_node(), sender)
        h_other = other.transfer(other.create_node(), sender)
        count, go = FORK.Value("i", 0), FORK.Event()
        with children(FORK.Process(target=_stopped_receiver, args=(slow, count, go))) as (proc,):
            os.kill(proc.pid, signal.SIGSTOP)
            ok, refused, started = 0, 0, time.monotonic()
            for i in range(200):
                try:
                    sender.send([h_slow], ok.to_bytes(4, "little"))
                    ok += 1
                except OSError as e:
                    assert e.errno == errno.EDQUOT
                    refused += 1
                sender.send([h_other], b"still fine")
            assert time.monotonic() - started < 5, "sends must fail fast, not block"
            assert (ok, refused) == (50, 150)
            assert len(drain(other)) == 200
            count.value = ok
            os.kill(proc.pid, signal.SIGCONT)
            go.set()
            proc.join(timeout=30)
            assert proc.exitcode == 0
        assert count.value == 50, "after SIGCONT everything queued arrives exactly once, in order"


# ---- SIGKILL ----

def _killed_owner(bus_name, parent, conn):
    bus = bus1py.Bus.attach(bus_name)
    me = bus.peer()  # this process is the peer's only holder
    nodes = [me.create_node() for _ in range(3)]
    conn.send([me.transfer(n, parent) for n in nodes])
    h = me.transfer(nodes[0], me)
    conn.send("ready")
    while True:
        me.send([h], b"")
        me.recv()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reap", ["gc command", "Bus.gc"])
def test_sigkill_while_holding_nodes_is_reaped(reap, monkeypatch):
    monkeypatch.setenv("BUS1PY_WATCH", "0")  # reaped by gc alone (tests/test_deaths.py: without)
    with bus1py.Bus.create(spin_ns=0) as bus:
        parent = bus.peer()
        mine, theirs = FORK.Pipe()
        with children(FORK.Process(target=_killed_owner, args=(bus.name, parent, theirs))) as (proc,):
            handles = set(mine.recv())
            assert mine.recv() == "ready"
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=10)
        with pytest.raises(BlockingIOError):
            parent.recv(timeout=0)  # nothing noticed yet
        if reap == "gc command":
            out = subprocess.run(BUS1PY + ["gc", bus.name], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
        else:
            assert bus.gc()["peers_reaped"] == 1
        got = drain(parent, 1.0)
        assert sorted(m.destination for m in got) == sorted(handles)
        assert all(m.type == DESTROY for m in got)


@pytest.mark.timeout(60)
def test_sigkill_mid_operation_leaves_no_lock_held():
    """Kill a process while it hammers the parent's queue (so it often holds that lock):
    the robust lock is taken over, the queue stays sound, and the bus keeps working."""
    with bus1py.Bus.create(spin_ns=0, quota_messages=1 << 20, max_entries=1 << 20,
                           pool_size=128 << 20) as bus:
        parent = bus.peer()
        node = parent.create_node()
        for attempt in range(5):
            mine, theirs = FORK.Pipe()
            with children(FORK.Process(target=_spammer, args=(bus.name, parent, node, theirs))) as (proc,):
                assert mine.recv() == "go"
                time.sleep(0.05 + 0.01 * attempt)
                os.kill(proc.pid, signal.SIGKILL)
                proc.join(timeout=10)
            bus.gc()
            drain(parent)  # would hang if the kill had left the lock held
            parent.send([node], b"alive")
            assert parent.recv(timeout=5).payload == b"alive"
            assert queue_check(bus, parent) >= 0  # a count; negative: the tree is corrupt


def _spammer(bus_name, parent, node, conn):
    bus = bus1py.Bus.attach(bus_name)
    me = bus.peer()
    h = parent.transfer(node, me)
    conn.send("go")
    while True:
        me.send([h], b"spam")


def queue_check(bus, peer):
    from bus1py._b1 import lib
    return lib.b1_queue_check(bus.base(), peer._slot)


def _half_sender(dests, conn, stamped):
    sender = conn.recv()
    tx = bus1py.Transaction(sender, dests, b"half")
    tx.stage(0), tx.stage(1)
    if stamped:
        tx.stamp()
        tx.sync(0), tx.sync(1)
        tx.commit(0)
    conn.send("staged")
    time.sleep(60)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stamped", [False, True])
def test_dead_senders_blocks_are_noticed_by_a_waiting_recv(stamped):
    """A sender killed mid-transaction leaves blocks.  A receiver waiting behind one notices
    the dead sender: an unstamped message is removed, a stamped one is committed at its
    stamp (so both receivers agree)."""
    with bus1py.Bus.create(spin_ns=0) as bus:
        p, q, sender, other = bus.peer(), bus.peer(), bus.peer(), bus.peer()
        np_, nq = p.create_node(), q.create_node()
        dests = [p.transfer(np_, sender), q.transfer(nq, sender)]
        hp_other = p.transfer(np_, other)
        mine, theirs = FORK.Pipe()
        with children(FORK.Process(target=_half_sender, args=(dests, theirs, stamped))) as (proc,):
            mine.send(sender)
            assert mine.recv() == "staged"
            other.send([hp_other], b"behind the block")
            if not stamped:
                with pytest.raises(BlockingIOError):
                    p.recv(timeout=0)
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=10)
        got_p = [m.payload for m in drain(p, 1.0)]
        got_q = [m.payload for m in drain(q, 1.0)]
        if stamped:
            assert got_p == [b"half", b"behind the block"] and got_q == [b"half"]
        else:
            assert got_p == [b"behind the block"] and got_q == []


def _killed_receiver(bus_name, sender, conn):
    me = bus1py.Bus.attach(bus_name).peer(quota_messages=10)
    conn.send(me.transfer(me.create_node(), sender))
    time.sleep(60)


@pytest.mark.timeout(60)
def test_sender_to_a_killed_receiver_notices_at_its_quota():
    """No gc needed: the send that finds a dead receiver's queue full reaps it, and from
    then on its messages are dropped like any message to a destroyed node."""
    with bus1py.Bus.create(spin_ns=0) as bus:
        sender = bus.peer()
        mine, theirs = FORK.Pipe()
        with children(FORK.Process(target=_killed_receiver, args=(bus.name, sender, theirs))) as (proc,):
            h = mine.recv()
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=10)
        for i in range(50):  # far past the dead receiver's quota of 10: never EDQUOT
            sender.send([h], b"to the dead")
        assert sender.recv(timeout=1).type == DESTROY


# ---- exit ----

def _exiting_owner(bus_name, parent, conn):
    me = bus1py.Bus.attach(bus_name).peer()
    conn.send(me.transfer(me.create_node(), parent))


@pytest.mark.timeout(60)
def test_last_process_exiting_disconnects_its_peer():
    with bus1py.Bus.create(spin_ns=0) as bus:
        parent = bus.peer()
        mine, theirs = FORK.Pipe()
        with children(FORK.Process(target=_exiting_owner, args=(bus.name, parent, theirs))) as (proc,):
            h = mine.recv()
            proc.join(timeout=10)
            assert proc.exitcode == 0
        msg = parent.recv(timeout=5)
        assert (msg.type, msg.destination) == (DESTROY, h)


SCRIPT = """
import bus1py, sys
bus = bus1py.Bus.create(persistent={persistent})
a = bus.peer(); n = a.create_node(); a.send([n], b"x")
print(bus.name, flush=True)
"""


@pytest.mark.timeout(60)
def test_no_segment_left_after_a_normal_exit():
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(persistent=False)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert not os.path.exists("/dev/shm" + out.stdout.strip())


@pytest.mark.timeout(60)
def test_admin_ls_gc_rm():
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(persistent=True)],
                         capture_output=True, text=True, timeout=30)
    name = out.stdout.strip()
    assert os.path.exists("/dev/shm" + name)
    try:
        ls = subprocess.run(BUS1PY + ["ls", name], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "200"})
        assert ls.returncode == 0 and name in ls.stdout and "disconnected" not in ls.stdout
        ls_all = subprocess.run(BUS1PY + ["ls", "--all", name], capture_output=True, text=True,
                                timeout=60, env={**os.environ, "COLUMNS": "200"})
        # its process exited: the peer was disconnected and, named by nothing, its slot freed
        assert "free" in ls_all.stdout
        gc = subprocess.run(BUS1PY + ["gc", name], capture_output=True, text=True, timeout=60)
        assert gc.returncode == 0
        assert not os.path.exists("/dev/shm" + name), "a bus whose processes are all gone is removed"
    finally:
        if os.path.exists("/dev/shm" + name):
            os.unlink("/dev/shm" + name)
    with bus1py.Bus.create(persistent=True) as bus:
        # this process created it and lives: rm refuses, naming it, unless --force
        rm = subprocess.run(BUS1PY + ["rm", bus.name], capture_output=True, text=True, timeout=60)
        assert rm.returncode == 1 and str(os.getpid()) in rm.stderr
        assert os.path.exists("/dev/shm" + bus.name)
        rm = subprocess.run(BUS1PY + ["rm", "--force", bus.name], capture_output=True, text=True,
                            timeout=60)
        assert rm.returncode == 0 and not os.path.exists("/dev/shm" + bus.name)
    bad = subprocess.run(BUS1PY + ["rm", "no-such-bus"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no-such-bus" in bad.stderr
