"""Crash consistency beyond the named kill points: each test builds the state a kill, a
reused pid, a process out of file descriptors or a scribbler leaves, and checks that the
bus recovers without losing, corrupting or duplicating a message, and that `Bus.check()`
(csrc/bus/fsck.c) is clean afterwards.

The segment is reached through /dev/shm and the offsets csrc/bus/layout.h fixes; each helper
below checks its offset against a value it knows before it writes, so a layout change
fails here loudly instead of scribbling the wrong word.
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap

import pytest

from bus1py import MessageType
from bus1py._b1 import lib

from segment import (B1_MSG_CARVED, ENTRY_MSG, HANDLE_PENDING, HANDLE_REFS, MSG_CARVED, MSG_NEXT_FREE, MSG_REFS,
                     MSG_STAGER, MSG_TS, PEER_FRONT, PEER_ROOT, Segment)

FORK = mp.get_context("fork")
LIMITS = dict(max_peers=8, max_nodes=64, max_handles=256, max_entries=1024, max_dests=4,
              max_msg_handles=2, pool_size=1 << 20, max_payload=4096, spin_ns=0)


@pytest.fixture(autouse=True)
def _gc_only_when_called(monkeypatch):
    """These tests look at what a kill left before they call gc: no death watcher
    (bus1py/watch.py) may collect it first."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")


def _sender_and_receiver(bus):
    """(a, b, node, h): b owns node, a holds h to it, so a's sends queue at b."""
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    return a, b, node, b.transfer(node, a)


def _forked(target, timeout=30):
    p = FORK.Process(target=target)
    p.start()
    p.join(timeout=timeout)
    if p.exitcode is None:
        p.kill()
    return p.exitcode


def _usage(bus):
    info = bus.info()
    return {k: info[k] for k in ("peers", "nodes", "handles", "entries_in_use", "pool_used")}


@pytest.mark.timeout(60)
def test_a_put_on_a_free_record_is_refused_and_the_free_list_survives(make_bus):
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)
    a.send([h], b"one")
    a.send([h], b"two")
    seg = Segment(bus)
    try:
        front = seg.u32(seg.peer(b, PEER_FRONT))
        first = seg.u32(seg.entry(front, ENTRY_MSG))
        assert b.recv(timeout=1).payload == b"one"  # its record is free now
        front = seg.u32(seg.peer(b, PEER_FRONT))
        second = seg.u32(seg.entry(front, ENTRY_MSG))
        assert second != first and seg.u32(seg.record(first, MSG_REFS)) == 0
        # the state a double put needs: a queued entry naming a record already given back
        seg.u32(seg.entry(front, ENTRY_MSG), first)
        with pytest.raises(OSError) as e:
            b.recv(timeout=0)
        assert e.value.errno == errno.EBADMSG
        assert seg.u32(seg.record(first, MSG_REFS)) == 0
        seg.u32(seg.entry(front, ENTRY_MSG), second)
    finally:
        seg.close()
    assert b.recv(timeout=1).payload == b"two"
    for i in range(50):  # the pool's free lists still hand out sound records
        a.send([h], b"%d" % i * 8)
    assert [bytes(b.recv(timeout=1).payload) for _ in range(50)] == [b"%d" % i * 8 for i in range(50)]
    assert bus.check() == []


@pytest.mark.timeout(60)
def test_gc_out_of_file_descriptors_reaps_no_live_process(make_bus):
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)
    a.send([h], b"attached")  # both peers now name this (live) process
    assert b.recv(timeout=1).payload == b"attached"

    def child():
        fds = []
        try:
            while True:
                fds.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
        stats = bus.gc()
        os._exit(10 + stats["peers_reaped"])

    assert _forked(child) == 10  # nobody reaped: /proc unreadable is no proof of death
    a.send([h], b"still here")
    assert b.recv(timeout=1).payload == b"still here"


@pytest.mark.timeout(60)
def test_a_dead_senders_block_is_reaped_though_its_pid_was_reused(make_bus):
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)

    def sender():
        lib.b1_kill_at(lib.B1_KILL_STAGE, 0)
        a.send([h], b"never stamped")

    assert _forked(sender) == -9
    seg = Segment(bus)
    try:
        front = seg.u32(seg.peer(b, PEER_FRONT))
        unit = seg.u32(seg.entry(front, ENTRY_MSG))
        stager = seg.u64(seg.record(unit, MSG_STAGER))
        assert stager & 0xFFFFFFFF not in (0, os.getpid())
        # the dead sender's pid now names a live process (ours) that started at another time
        seg.u64(seg.record(unit, MSG_STAGER), ((stager >> 32) ^ 0x5A5A) << 32 | os.getpid())
    finally:
        seg.close()
    a.send([h], b"after")
    assert b.recv(timeout=5).payload == b"after"
    assert bus.check() == []


@pytest.mark.timeout(60)
def test_a_disconnect_killed_midway_is_finished_by_gc(make_bus):
    bus = make_bus(**LIMITS)
    server, client = bus.peer(), bus.peer()
    node = server.create_node()
    h = server.transfer(node, client)

    def departing():
        lib.b1_kill_at(lib.B1_KILL_DESTROY, 0)
        server.disconnect()

    assert _forked(departing) == -9
    assert bus.check() != []  # a disconnect owned by a dead process, in words
    bus.gc()
    m = client.recv(timeout=5)
    assert m.type == MessageType.NODE_DESTROY and m.destination == h
    client.disconnect()
    bus.gc()
    assert not any(_usage(bus).values()), _usage(bus)
    assert bus.check() == []


@pytest.mark.timeout(60)
def test_a_tree_left_damaged_under_a_dead_holders_lock_is_rebuilt(make_bus):
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)
    for i in range(6):
        a.send([h], b"m%d" % i)

    def sender():
        lib.b1_kill_at(lib.B1_KILL_LOCKED, 0)  # dies holding b's lock, its block inserted
        a.send([h], b"never stamped")

    assert _forked(sender) == -9
    seg = Segment(bus)
    try:
        seg.u32(seg.peer(b, PEER_ROOT), 0)  # a split cut short: the subtree is unreachable
    finally:
        seg.close()
    got = [bytes(b.recv(timeout=5).payload) for _ in range(6)]
    assert got == [b"m%d" % i for i in range(6)]
    assert b.query().lock_recoveries == 1
    bus.gc()  # the dead sender's block
    assert bus.check() == []


SCRIBBLER = textwrap.dedent("""
    import errno, mmap, struct, sys, threading
    import bus1py
    from bus1py._b1 import ffi, lib
    bus = bus1py.Bus.open(sys.argv[1])
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    pool = info.table_offsets[4]
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    f = open("/dev/shm" + bus.name, "r+b")
    mm = mmap.mmap(f.fileno(), 0)
    stop = False
    def scribble():
        # every record's length, over and over: after a receive checked one, before it copies
        while not stop:
            for unit in range(1, 64, 2):
                mm[pool + unit * 64 + 4:pool + unit * 64 + 8] = struct.pack("<I", 0x7FFFFFF0)
    t = threading.Thread(target=scribble)
    t.start()
    bad = 0
    for i in range(3000):
        try:
            a.send([h], b"x" * 64)
        except OSError:
            pass
        try:
            m = b.recv(timeout=0)
            assert len(m.payload) <= 4096
        except BlockingIOError:
            pass
        except OSError as e:
            bad += e.errno == errno.EBADMSG
    stop = True
    t.join()
    print("ok", bad)
""")


@pytest.mark.timeout(120)
def test_a_length_scribbled_after_its_check_is_never_used(make_bus):
    bus = make_bus(**LIMITS)
    run = subprocess.run([sys.executable, "-c", SCRIBBLER, bus.name], capture_output=True,
                         text=True, timeout=100)
    assert run.returncode == 0, run.stderr[-2000:]  # never SIGSEGV, never a huge copy
    assert run.stdout.startswith("ok")


@pytest.mark.timeout(60)
def test_fsck_names_a_double_free_and_exits_1(make_bus):
    bus = make_bus(**LIMITS)
    a, b, _, h = _sender_and_receiver(bus)
    a.send([h], b"to be freed")
    seg = Segment(bus)
    try:
        unit = seg.u32(seg.entry(seg.u32(seg.peer(b, PEER_FRONT)), ENTRY_MSG))
        assert b.recv(timeout=1).payload == b"to be freed"
        clean = subprocess.run([sys.executable, "-m", "bus1py.cli", "fsck", bus.name],
                               capture_output=True, text=True, timeout=60)
        assert clean.returncode == 0 and "clean" in clean.stdout, clean.stdout + clean.stderr
        seg.u32(seg.record(unit, MSG_NEXT_FREE), unit)  # the record is its own successor
    finally:
        seg.close()
    problems = bus.check()
    assert any("listed twice" in p for p in problems), problems
    run = subprocess.run([sys.executable, "-m", "bus1py.cli", "fsck", bus.name],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "listed twice" in run.stdout, run.stdout + run.stderr


@pytest.mark.timeout(60)
def test_gc_of_a_bus_held_alone_gives_back_a_reference_leaked_in_hand(make_bus):
    bus = make_bus(**LIMITS)
    a, b, _, h = _sender_and_receiver(bus)
    a.send([h], b"kept")
    seg = Segment(bus)
    try:
        unit = seg.u32(seg.entry(seg.u32(seg.peer(b, PEER_FRONT)), ENTRY_MSG))
        # a holder killed between its exchange of the reference and its put: one too many
        seg.u32(seg.record(unit, MSG_REFS), 2)
    finally:
        seg.close()
    assert any("leaked references" in p for p in bus.check()), bus.check()
    bus.gc(sole=True)
    assert bus.check() == []
    assert b.recv(timeout=1).payload == b"kept"
    a.disconnect()
    b.disconnect()
    bus.gc(sole=True)
    assert not any(_usage(bus).values()), _usage(bus)


@pytest.mark.timeout(60)
def test_gc_as_the_sole_user_is_refused_while_another_process_holds_a_peer(make_bus):
    bus = make_bus(**LIMITS)
    a = bus.peer()
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()

    def holder():
        a.create_node()  # the child is now one of the peer's processes
        os.write(ready_w, b"1")
        os.read(done_r, 1)

    p = FORK.Process(target=holder)
    p.start()
    try:
        assert os.read(ready_r, 1) == b"1"
        with pytest.raises(OSError) as e:
            bus.gc(sole=True)
        assert e.value.errno == errno.EBUSY
    finally:
        os.write(done_w, b"1")
        p.join(timeout=30)
        for fd in (ready_r, ready_w, done_r, done_w):
            os.close(fd)


@pytest.mark.timeout(60)
def test_gc_of_a_bus_held_alone_undoes_a_registration_leaked_in_hand(make_bus):
    bus = make_bus(**LIMITS)
    a, b = bus.peer(), bus.peer()
    node = a.create_node()
    hb = a.transfer(node, b)
    seg = Segment(bus)
    try:
        # a receiver killed after it exchanged a carried id away, before it undid it
        seg.u32(seg.handle(hb, HANDLE_PENDING), 1)
    finally:
        seg.close()
    assert any("pending 1 but 0" in p for p in bus.check()), bus.check()
    bus.gc(sole=True)
    assert bus.check() == []
    b.release(hb)  # the last holder goes: the owner hears of it, as it would have
    m = a.recv(timeout=1)
    assert m.type == MessageType.NODE_RELEASE and m.destination == node


@pytest.mark.timeout(60)
def test_a_drop_cut_under_a_dead_holder_of_the_owners_lock_is_carried_out(make_bus):
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)
    other = b.create_node()
    h2 = b.transfer(other, a)
    seg = Segment(bus)
    try:
        # a's release of h cut inside b's lock: its count 0, the handle still on the node's list
        seg.u32(seg.handle(h, HANDLE_REFS), 0)
    finally:
        seg.close()

    def sender():
        lib.b1_kill_at(lib.B1_KILL_LOCKED, 0)  # dies holding b's lock: the takeover is owed
        a.send([h2], b"never stamped")

    assert _forked(sender) == -9
    bus.gc()  # takes b's lock first: the drop is carried out, its NODE_RELEASE queued
    assert bus.check() == []
    m = b.recv(timeout=1)
    assert m.type == MessageType.NODE_RELEASE and m.destination == node
    a.disconnect()
    b.disconnect()
    bus.gc()
    assert not any(_usage(bus).values()), _usage(bus)


def test_a_stamp_with_every_copy_dropped_leaves_the_record_alone(make_bus):
    """A transaction whose every destination was gone at its stage put its record with
    its copies; its stamp must not write the timestamp into it, which by then is free or
    another sender's (whose reaping reads a stamp there as "stamped": roll forward)."""
    from bus1py import Transaction
    bus = make_bus(**LIMITS)
    a, b, node, h = _sender_and_receiver(bus)
    x, y = bus.peer(), bus.peer()
    hy = y.transfer(y.create_node(), x)
    first = Transaction(a, [h], b"to a peer that leaves")
    unit = first._tx.msg
    b.disconnect()
    first.stage(0)
    assert first.states == ("dropped",)
    second = Transaction(x, [hy], b"another sender's")
    assert second._tx.msg == unit  # the freed record, taken again (the pool's free stack)
    first.stamp()
    with Segment(bus) as seg:
        assert seg.u64(seg.record(unit, MSG_TS)) == 0  # still unstamped: the second's
    second.stage(0)
    second.stamp()
    second.commit(0)
    assert bytes(y.recv(timeout=0).payload) == b"another sender's"


@pytest.mark.timeout(60)
def test_a_destruction_whose_every_notice_was_dropped_leaves_its_record_alone(make_bus):
    """A departing owner's destruction of a node held only by a peer that is itself
    departing (its disconnect killed midway): the one NODE_DESTROY copy is dropped at its
    stage, putting the record, so the stamp must write nothing into it (free by then, or
    another sender's); gc then finishes the dead disconnect."""
    bus = make_bus(**LIMITS)
    owner, holder = bus.peer(), bus.peer()
    owner.transfer(owner.create_node(), holder)
    holder.create_node()  # its disconnect destroys it: the kill point, with no record made

    def departing():
        lib.b1_kill_at(lib.B1_KILL_DESTROY, 0)  # holder DISCONNECTING, its handle still listed
        holder.disconnect()

    assert _forked(departing) == -9
    owner.disconnect()  # its node's only holder is gone: the copy is dropped at the stage
    with Segment(bus) as seg:  # the destruction's record, the first one this bus carved
        assert seg.u32(seg.record(1, MSG_CARVED)) == B1_MSG_CARVED ^ 1
        assert (seg.u32(seg.record(1, MSG_REFS)), seg.u64(seg.record(1, MSG_TS))) == (0, 0)
    bus.gc()
    assert not any(_usage(bus).values()), _usage(bus)
    assert bus.check() == []
