"""File descriptors in messages (Peer.send(..., fds=...), Message.fds; bus1py/fds.py,
csrc/bus/fds.c).

Invariants checked:
  - a pipe's write end sent through the bus by a process that then exits is received and
    written by another process: the descriptor outlives its sender;
  - each receiver of a multicast gets its own new descriptors, installed at its receive;
  - bad input (257 descriptors, a closed one, a non-int) fails with its one error and
    nothing sent, by send, send_many and reserve alike;
  - a message dropped unreceived (its node destroyed, its queue reset, its receiver
    disconnected) closes its descriptors: the pipe's reader sees end-of-file, and no
    descriptor was installed in the receiver (/proc/self/fd);
  - the receiver's quota bounds the descriptors in flight to it (EDQUOT, nothing sent, no
    descriptor left behind), and 160 messages in flight to one receiver, far past one
    datagram socket's queue, all arrive with their own;
  - a receiver out of descriptor numbers (RLIMIT_NOFILE) cannot take a message whose
    descriptors it cannot all install: recv raises EMFILE with none installed and the
    message stays queued, recv_many returns the messages before it; once descriptors are
    closed the message arrives with all of them working;
  - a sender and a receiver SIGKILLed at each step (the named kill points around the post
    and the take): no descriptor left open in any surviving process or in the store
    (end-of-file), none delivered twice, a message stamped before the kill delivered
    with its descriptors.
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import resource

import pytest

from bus1py import MessageType
from bus1py._lib import ffi, lib
from fdhelp import eof as _eof, fill_table

import killpoints as kp

FORK = mp.get_context("fork")


@pytest.fixture
def bus(make_bus):
    return make_bus(max_peers=16, max_nodes=64, max_handles=256, pool_size=1 << 20, spin_ns=0, quota_fds=256)


@pytest.fixture(autouse=True)
def _gc_only_when_called(monkeypatch):
    """The kill tests reap their victims with gc themselves: no death watcher may be first."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")


def _pair(bus):
    """receiver r owning a node, sender s holding a handle to it"""
    r, s = bus.peer(), bus.peer()
    node = r.create_node()
    return r, s, node, r.transfer(node, s)


def _open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def _close_all(msgs):
    for m in msgs:
        for fd in m.fds:
            os.close(fd)


def _pipe():
    rd, wr = os.pipe()
    return rd, wr


# ---- the descriptor outlives its sender ----

def _send_and_exit(s, h, wr):
    s.send([h], b"a pipe", fds=(wr,))
    os._exit(0)


def _receive_and_write(r, out):
    m = r.recv(timeout=10)
    os.write(m.fds[0], b"written by the receiver")
    os.close(m.fds[0])
    out.put((m.payload, len(m.fds)))


@pytest.mark.timeout(60)
def test_a_pipe_sent_by_an_exited_process_is_written_by_the_receiver(bus):
    r, s, _, h = _pair(bus)
    rd, wr = _pipe()
    sender = FORK.Process(target=_send_and_exit, args=(s, h, wr))
    sender.start()
    os.close(wr)  # only the sender, then the message, holds the write end
    sender.join(30)
    assert sender.exitcode == 0
    out = FORK.SimpleQueue()
    receiver = FORK.Process(target=_receive_and_write, args=(r, out))
    receiver.start()
    receiver.join(30)
    assert receiver.exitcode == 0
    assert out.get() == (b"a pipe", 1)
    assert os.read(rd, 64) == b"written by the receiver"
    assert _eof(rd)  # and nobody else holds it: not the store, not the sender
    os.close(rd)


def test_each_receiver_of_a_multicast_gets_its_own(bus):
    r1, s, _, h1 = _pair(bus)
    r2 = bus.peer()
    h2 = r2.transfer(r2.create_node(), s)
    rd, wr = _pipe()
    s.send([h1, h2], b"both", fds=(wr, wr))
    os.close(wr)
    m1, m2 = r1.recv(timeout=1), r2.recv(timeout=1)
    assert len(m1.fds) == len(m2.fds) == 2 and len(set(m1.fds) | set(m2.fds)) == 4
    assert {os.fstat(fd).st_ino for fd in m1.fds + m2.fds} == {os.fstat(rd).st_ino}
    _close_all([m1])
    os.write(m2.fds[1], b"x")  # the other receiver's are untouched
    _close_all([m2])
    assert os.read(rd, 8) == b"x" and _eof(rd)
    os.close(rd)


def test_send_many_and_reserve_carry_them_too(bus):
    r, s, _, h = _pair(bus)
    rd, wr = _pipe()
    assert s.send_many([h], [b"1", b"2"], fds=(wr,)) == 2
    with s.reserve([h], 1, fds=(wr,)) as res:
        res.payload[:] = b"3"
    os.close(wr)
    got = r.recv_many(8, timeout=1)
    assert [(m.payload, len(m.fds)) for m in got] == [(b"1", 1), (b"2", 1), (b"3", 1)]
    _close_all(got)
    assert _eof(rd)
    os.close(rd)


def test_at_most_256_and_as_many_as_that(bus):
    r, s, _, h = _pair(bus)
    rd, wr = _pipe()
    s.send([h], b"full", fds=[wr] * 256)  # more than one datagram carries (253)
    os.close(wr)
    m = r.recv(timeout=1)
    assert len(m.fds) == 256 and len(set(m.fds)) == 256
    _close_all([m])
    assert _eof(rd)
    os.close(rd)


# ---- bad input: one clear error, nothing sent ----

@pytest.mark.parametrize("how", ["send", "send_many", "reserve"])
@pytest.mark.parametrize("fds, error", [([0] * 257, errno.EMSGSIZE), ("closed", errno.EBADF),
                                        (["0"], TypeError), (0, TypeError)])
def test_bad_descriptors_send_nothing(bus, how, fds, error):
    r, s, _, h = _pair(bus)
    if fds == "closed":
        rd, wr = _pipe()
        os.close(rd)
        os.close(wr)
        fds = [0, wr]
    send = {"send": lambda: s.send([h], b"x", fds=fds),
            "send_many": lambda: s.send_many([h], [b"x", b"y"], fds=fds),
            "reserve": lambda: s.reserve([h], 1, fds=fds).commit()}[how]
    with pytest.raises(TypeError if error is TypeError else OSError) as e:
        send()
    if error is TypeError:
        assert "fds must be" in str(e.value)
    else:
        assert e.value.errno == error and ("descriptor" in str(e.value))
    assert r.query().queued_messages == 0 and s.query().sent == 0
    s.send([h], b"after")  # the thread names no descriptors any more
    assert r.recv(timeout=1).fds == ()


# ---- dropped unreceived: closed ----

@pytest.mark.parametrize("drop", ["destroyed node", "reset", "disconnect"])
def test_a_dropped_message_closes_its_descriptors(bus, drop):
    r, s, node, h = _pair(bus)
    rd, wr = _pipe()
    if drop == "destroyed node":
        r.destroy(node)  # the message is ordered after the destruction: dropped at the front
    s.send([h], b"never read", fds=(wr,))
    os.close(wr)
    before = _open_fds()
    if drop == "destroyed node":
        m = r.recv(timeout=1)
        assert (m.type, m.fds) == (MessageType.NODE_DESTROY, ())
        with pytest.raises(BlockingIOError):
            r.recv(timeout=0)
    elif drop == "reset":
        r.reset()
    else:
        r.disconnect()
    assert _eof(rd)
    assert _open_fds() <= before  # nothing installed here on the way
    os.close(rd)


def test_the_quota_bounds_what_is_in_flight(make_bus):
    """The receiver pays for descriptors in flight to it (quota_fds), shared among its
    senders (fair shares): past its share a send fails with EDQUOT and nothing is sent, a
    newcomer still gets through, and a receive gives the room back."""
    bus = make_bus(max_peers=4, max_nodes=8, max_handles=32, pool_size=1 << 20, spin_ns=0, quota_fds=16)
    r, s, _, h = _pair(bus)
    s2 = bus.peer()
    h2 = r.transfer(r.create_node(), s2)
    for i in range(4):
        s.send([h], b"%d" % i, fds=(0, 1))
    assert (r.query().n_fds, r.query().quota_fds) == (8, 16)
    before = _open_fds()
    with pytest.raises(OSError) as e:  # alone, s may hold 8: 16 - 8 < 8 + 1
        s.send([h], b"one too many", fds=(0,))
    assert e.value.errno == errno.EDQUOT
    assert r.query().queued_messages == 4 and r.query().n_fds == 8 and _open_fds() == before
    s.send([h], b"without descriptors is not refused")
    s2.send([h2], b"a newcomer's share", fds=(0, 1, 2))  # 16 - 8 >= 2 * 3
    with pytest.raises(OSError) as e:  # 16 - 11 < 2 * (3 + 1)
        s2.send([h2], b"past it", fds=(0,))
    assert e.value.errno == errno.EDQUOT and r.query().n_fds == 11
    got = r.recv_many(16, timeout=1)
    assert [len(m.fds) for m in got] == [2, 2, 2, 2, 0, 3] and r.query().n_fds == 0
    _close_all(got)
    s.send([h], b"room again", fds=(0, 1))
    _close_all([r.recv(timeout=1)])


@pytest.mark.timeout(60)
def test_a_hundred_and_more_in_flight_all_arrive_with_their_own(bus):
    """Far past a datagram socket's queue (net.unix.max_dgram_qlen + 1 = 11 by default):
    two senders, 60 messages each (within each one's share of 256), each carrying its own
    pipe's write end; the receiver takes them afterwards, each with the descriptor that was
    sent with it."""
    r, s1, _, h1 = _pair(bus)
    s2 = bus.peer()
    h2 = r.transfer(r.create_node(), s2)
    pipes = {}
    for i in range(120):
        rd, wr = pipes[i] = _pipe()
        (s1 if i % 2 else s2).send([h1 if i % 2 else h2], b"%d" % i, fds=(wr,))
        os.close(wr)
    assert r.query().n_fds == 120
    got = r.recv_many(200, timeout=1)
    assert sorted(int(m.payload) for m in got) == list(range(120))
    for m in got:
        rd = pipes[int(m.payload)][0]
        assert len(m.fds) == 1 and os.fstat(m.fds[0]).st_ino == os.fstat(rd).st_ino
    _close_all(got)
    for rd, _ in pipes.values():
        assert _eof(rd)
        os.close(rd)
    assert r.query().n_fds == 0


# ---- a receiver out of descriptors ----

def _free_numbers() -> int:
    """How many more descriptors this process can open (each probe closed again)."""
    probes = fill_table()
    for fd in probes:
        os.close(fd)
    return len(probes)


def _receive_out_of_descriptors(r, out):
    """Fill the table but 2 numbers: the 3-descriptor message cannot be installed."""
    top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (top + 32, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    r._attach()  # a fork child holds no store until it uses the peer: taken before the numbers run out
    fillers = fill_table()
    os.close(fillers.pop())
    os.close(fillers.pop())
    report = {"first": [(m.payload, len(m.fds)) for m in r.recv_many(8, timeout=0)]}
    try:
        r.recv(timeout=0)
    except OSError as e:
        report["error"] = (e.errno, str(e))
    report["free after"] = _free_numbers()  # the 2 copies it did install were closed
    try:
        r.recv_many(8, timeout=0)
    except OSError as e:
        report["again"] = e.errno  # still queued, still too many
    for fd in fillers[:8]:
        os.close(fd)
    m = r.recv(timeout=0)
    for i, fd in enumerate(m.fds):
        os.write(fd, b"%d" % i)
        os.close(fd)
    report["then"] = (m.payload, len(m.fds))
    for fd in fillers[8:]:
        os.close(fd)
    out.put(report)


@pytest.mark.timeout(60)
def test_a_receiver_out_of_descriptors_leaves_the_message_queued(bus):
    r, s, _, h = _pair(bus)
    rd, wr = _pipe()
    s.send([h], b"before it")
    s.send([h], b"three", fds=(wr, wr, wr))
    os.close(wr)
    out = FORK.SimpleQueue()
    receiver = FORK.Process(target=_receive_out_of_descriptors, args=(r, out))
    receiver.start()
    receiver.join(30)
    assert receiver.exitcode == 0
    report = out.get()
    assert report["first"] == [(b"before it", 0)]  # the batch stops before the message
    code, text = report["error"]
    assert code == errno.EMFILE and "the message stays queued" in text
    assert report["free after"] == 2
    assert report["again"] == errno.EMFILE
    assert report["then"] == (b"three", 3)
    assert os.read(rd, 8) == b"012"
    # the child took it: nothing is left for this process
    with pytest.raises(BlockingIOError):
        r.recv(timeout=0)
    lib.b1_fds_sweep(bus.base(), r._slot, r._id)
    assert _eof(rd)  # its datagrams popped: no copy left in the store
    assert r.query().n_fds == 0
    os.close(rd)


# ---- kills at each step ----

def _die_at(point, call):
    def child():
        lib.b1_kill_at(kp.POINTS[point], 0)
        call()
        os._exit(3)
    p = FORK.Process(target=child)
    p.start()
    p.join(timeout=30)
    assert p.exitcode == -9, p.exitcode


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point, delivered", [("fds_sent", False), ("stamp", True), ("commit", True)])
def test_a_sender_killed_at_each_step(bus, point, delivered):
    r, s, _, h = _pair(bus)
    kp.let_go(bus, s)  # the child is the sender's only holder
    rd, wr = _pipe()
    before = _open_fds()
    _die_at(point, lambda: s.send([h], b"in flight", fds=(wr,)))
    os.close(wr)
    bus.gc()
    got = []
    try:
        while True:
            got.append(r.recv(timeout=0))
    except BlockingIOError:
        pass
    data = [m for m in got if m.type == MessageType.DATA]
    assert [(m.payload, len(m.fds)) for m in data] == ([(b"in flight", 1)] if delivered else [])
    _close_all(got)
    assert _eof(rd)  # not in the store, not in this process
    assert _open_fds() <= before | {str(rd)}
    # the store still serves the next message
    rd2, wr2 = _pipe()
    s2 = bus.peer()
    s2.send([r.transfer(r.create_node(), s2)], b"next", fds=(wr2,))
    os.close(wr2)
    m = r.recv(timeout=1)
    assert len(m.fds) == 1
    _close_all([m])
    assert _eof(rd2)
    os.close(rd)
    os.close(rd2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point", ["fds_taken", "recv"])
def test_a_receiver_killed_at_each_step(bus, point):
    r, s, _, h = _pair(bus)  # this process holds r too, and receives after the kill
    rd, wr = _pipe()
    s.send([h], b"taken by the victim", fds=(wr,))
    s.send([h], b"left for the survivor", fds=(wr,))
    os.close(wr)
    before = _open_fds()
    _die_at(point, lambda: r.recv(timeout=5))
    bus.gc()
    got = []
    try:
        while True:
            got.append(r.recv(timeout=0))
    except BlockingIOError:
        pass
    # the victim's message is gone with it (never twice), the next one is whole
    assert [(m.payload, len(m.fds)) for m in got] == [(b"left for the survivor", 1)]
    _close_all(got)
    assert _eof(rd)
    assert _open_fds() <= before
    os.close(rd)


def test_a_store_out_of_receive_order_is_matched(bus):
    """Datagrams reach a store in post order, not in the queue's order: here B is posted
    before A but A is received first (the same stamp, the lower sender id), so A's take
    peeks past B's datagram, which B's take then finds."""
    r, s1, _, h1 = _pair(bus)
    s2 = bus.peer()
    h2 = r.transfer(r.create_node(), s2)
    base = bus.base()
    pipes = {name: _pipe() for name in "AB"}
    txs = {}
    for name, s, h in (("A", s1, h1), ("B", s2, h2)):
        tx = txs[name] = ffi.new("struct b1_tx *")
        tx.dests = dests = ffi.new("struct b1_dest[]", 1)
        txs[name + "dests"] = dests
        assert lib.b1_send_fds(ffi.new("int32_t[]", [pipes[name][1]]), 1) == 0
        assert lib.b1_tx_prepare(base, tx, s._slot, s._id, ffi.new("uint64_t[]", [h]), 1,
                                 name.encode(), 1, ffi.NULL, 0, 0) == 0
        assert lib.b1_tx_stage(base, tx, 0) == 0
    for name in "BA":
        assert lib.b1_send_fds(ffi.new("int32_t[]", [pipes[name][1]]), 1) == 0
        assert lib.b1_tx_stamp(base, txs[name]) == 0
    lib.b1_send_fds(ffi.NULL, 0)
    for name in "AB":
        assert lib.b1_tx_commit(base, txs[name], 0) == 0
    assert (txs["A"].ts, s1.id) < (txs["B"].ts, s2.id)
    for name in "AB":
        os.close(pipes[name][1])
    got = [r.recv(timeout=1), r.recv(timeout=1)]
    assert [m.payload for m in got] == [b"A", b"B"]
    for m in got:
        assert len(m.fds) == 1 and os.fstat(m.fds[0]).st_ino == os.fstat(pipes[m.payload.decode()][0]).st_ino
    _close_all(got)
    for rd, _ in pipes.values():
        assert _eof(rd)
        os.close(rd)


def _spawned_receiver(r, out):
    m = r.recv(timeout=10)
    os.write(m.fds[0], b"from a spawned holder")
    os.close(m.fds[0])
    out.put(len(m.fds))


@pytest.mark.timeout(60)
def test_a_process_that_joins_by_spawn_takes_the_store_from_a_holder(bus):
    """Not forked, the child has no store of its own: attaching the peer, it takes a copy
    from this process (pidfd_getfd), and receives through it."""
    r, s, _, h = _pair(bus)
    rd, wr = _pipe()
    s.send([h], b"to whoever holds r", fds=(wr,))
    os.close(wr)
    spawn = mp.get_context("spawn")
    out = spawn.SimpleQueue()
    p = spawn.Process(target=_spawned_receiver, args=(r, out))
    p.start()
    p.join(40)
    assert p.exitcode == 0 and out.get() == 1
    assert os.read(rd, 64) == b"from a spawned holder" and _eof(rd)
    os.close(rd)


def _hold_and_die(r, ready):
    r._attach()  # this process holds r (recorded in the segment)
    ready.set()
    os.kill(os.getpid(), 9)


@pytest.mark.timeout(60)
def test_descriptors_in_flight_to_a_dead_receiver_close_without_gc(make_bus, monkeypatch):
    """The README's pattern: the parent makes a peer and hands it to a child, which dies
    with descriptors queued to it.  The parent's death watcher reaps the peer and closes
    the parent's copy of its store: the pipe's reader sees end-of-file, nobody calling gc."""
    monkeypatch.delenv("BUS1PY_WATCH")
    bus = make_bus(max_peers=16, max_nodes=64, max_handles=256, pool_size=1 << 20, spin_ns=0)
    r, s, _, h = _pair(bus)
    kp.let_go(bus, r)  # the child becomes its only holder
    rd, wr = _pipe()
    ready = FORK.Event()
    child = FORK.Process(target=_hold_and_die, args=(r, ready))
    child.start()
    assert ready.wait(30)
    s.send([h], b"to a receiver about to die", fds=(wr,))
    os.close(wr)
    child.join(30)
    assert child.exitcode == -9
    assert _eof(rd, timeout=10)
    os.close(rd)
