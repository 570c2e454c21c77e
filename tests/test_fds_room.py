"""A peer's descriptor store holds its whole quota in three descriptors per holder
(csrc/bus/fds.c, bus1py/fds.py; docs/SPEC.md, "File descriptors").

Invariants checked:
  - a holder process holds three descriptors for a peer's store, and its directory one
    path, whatever quota_fds (64 or 2000);
  - a sender's share of quota_fds (half of it) in messages with descriptors, from another
    process to a receiver whose process is busy and never receives, all succeed, then all
    arrive in order, each with its own descriptor: the receiver's death watcher moves the
    inbox when a sender finds it full;
  - a peer sends itself its share of quota_fds in messages with descriptors and receives
    none: no deadlock (its own process moves), and then all arrive;
  - a process that joins a store (pidfd_getfd) takes the pair with what was moved into it;
  - a move request (anyone may send one) moves only what a store this process holds has;
  - with no watcher in the receiver's process (BUS1PY_WATCH=0) a sender of another
    process that finds the inbox full waits B1_FDS_WAIT_MS and fails with EDQUOT, nothing
    sent, unless a receive of the peer makes room meanwhile.
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import socket
import struct
import threading
import time

import pytest

from bus1py import fds as _fds
from bus1py._lib import lib
from fdhelp import open_fds as _open_fds

FORK = mp.get_context("fork")
with open("/proc/sys/net/unix/max_dgram_qlen") as _f:
    INBOX_ROOM = int(_f.read()) + 1  # what the inbox alone queues (11 by default)


def _pair_room() -> int:
    """Datagrams the store's pair queues, at least: a's send buffer (2 * net.core.wmem_max)
    over a one-descriptor datagram's ~768 bytes of kernel memory, with a margin."""
    with open("/proc/sys/net/core/wmem_max") as f:
        return 2 * int(f.read()) // 1024


def _within_room(n: int) -> None:
    if n > _pair_room():
        pytest.skip(f"{n} datagrams exceed what this kernel's net.core.wmem_max lets the pair queue")


def _carrier(i: int) -> int:
    """A pipe's read end with b"<i>" in it: a descriptor that says which message it came with."""
    rd, wr = os.pipe()
    os.write(wr, b"%d" % i)
    os.close(wr)
    return rd


def _send_carriers(s, h, first: int, n: int) -> None:
    for i in range(first, first + n):
        rd = _carrier(i)
        try:
            s.send([h], b"%d" % i, fds=(rd,))
        finally:
            os.close(rd)


def _sender(s, h, n, errors):
    try:
        _send_carriers(s, h, 0, n)
    except OSError as e:
        errors.put(e.errno)
        errors.close()
        errors.join_thread()  # flushed before the exit
        os._exit(1)
    os._exit(0)


def _receive_in_order(r, n: int) -> None:
    """n messages, in order, each with the one descriptor it was sent with."""
    for i in range(n):
        m = r.recv(timeout=5)
        assert m.payload == b"%d" % i and len(m.fds) == 1
        assert os.read(m.fds[0], 16) == b"%d" % i
        os.close(m.fds[0])
    assert r.query().n_fds == 0


@pytest.mark.parametrize("quota", [64, 2000])
def test_a_holder_holds_three_descriptors_per_peer_whatever_the_quota(make_bus, quota):
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0, quota_fds=quota)
    bus.peer()  # the process's own descriptors for the bus (watcher, marker) come with the first
    before = _open_fds()
    r = bus.peer()
    assert r.query().quota_fds == quota
    assert len(_open_fds() - before) == 3
    inbox = _fds._stores[(bus.name, r.id)].path
    assert os.listdir(os.path.dirname(inbox)) == ["inbox"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [64, 500, 1000])
def test_a_quota_of_messages_from_another_process_all_arrive(make_bus, monkeypatch, n):
    """The receiver's process is busy, never receiving, while a child sends n messages with a
    descriptor each (far past the inbox's room; a sender's share is half the receiver's
    quota, so the quota is 2n): every send succeeds, moved by this process's watcher; then
    all arrive in order with their own."""
    _within_room(n)
    monkeypatch.setenv("BUS1PY_WATCH", "1")
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=4 << 20, spin_ns=0,
                   quota_fds=2 * n, quota_messages=2 * n)
    r, s = bus.peer(), bus.peer()
    h = r.transfer(r.create_node(), s)
    errors = FORK.Queue()
    child = FORK.Process(target=_sender, args=(s, h, n, errors))
    child.start()
    deadline = time.monotonic() + 100
    while child.is_alive() and time.monotonic() < deadline:
        sum(range(10000))  # busy in Python, never receiving: the watcher thread moves
    child.join(1)
    assert child.exitcode == 0, errors.get(timeout=1)
    assert r.query().n_fds == n
    _receive_in_order(r, n)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("watch, n", [("0", 32), ("1", 32), ("0", 1000)])
def test_a_peer_sends_itself_its_quota_without_receiving(make_bus, monkeypatch, watch, n):
    """n is the peer's share of its own quota (half of it)."""
    _within_room(n)
    monkeypatch.setenv("BUS1PY_WATCH", watch)
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=4 << 20, spin_ns=0,
                   quota_fds=2 * n, quota_messages=2 * n)
    r = bus.peer()
    h = r.transfer(r.create_node(), r)
    start = time.monotonic()
    _send_carriers(r, h, 0, n)
    assert time.monotonic() - start < 20  # moved at once by the sender itself, no wait
    _receive_in_order(r, n)


@pytest.mark.timeout(60)
def test_without_a_watcher_a_full_inbox_waits_for_a_receive_then_fails(make_bus, monkeypatch):
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0, quota_fds=64)
    r, s = bus.peer(), bus.peer()
    h = r.transfer(r.create_node(), s)
    errors = FORK.Queue()
    child = FORK.Process(target=_sender, args=(s, h, INBOX_ROOM + 1, errors))
    start = time.monotonic()
    child.start()
    child.join(30)
    assert child.exitcode == 1 and errors.get(timeout=1) == errno.EDQUOT
    assert time.monotonic() - start >= 1.5  # B1_FDS_WAIT_MS, 2 s: it waited for room
    assert r.query().n_fds == INBOX_ROOM  # the failed one is not queued

    # a receive meanwhile moves the filling inbox: the next inbox's worth goes through
    child = FORK.Process(target=_sender, args=(s, h, INBOX_ROOM, errors))
    child.start()
    got = []
    receiver = threading.Thread(target=lambda: (time.sleep(0.3), got.append(r.recv(timeout=5))))
    receiver.start()
    child.join(30)
    receiver.join(10)
    assert child.exitcode == 0
    assert len(got) == 1 and len(got[0].fds) == 1
    os.close(got[0].fds[0])
    for _ in range(2 * INBOX_ROOM - 1):
        m = r.recv(timeout=5)
        assert len(m.fds) == 1
        os.close(m.fds[0])
    assert r.query().n_fds == 0


def _receive_all(r, n, errors):
    try:
        _receive_in_order(r, n)
    except BaseException as e:  # noqa: BLE001 -- reported to the test
        errors.put(repr(e))
        errors.close()
        errors.join_thread()
        os._exit(1)
    os._exit(0)


@pytest.mark.timeout(60)
def test_a_joining_holder_takes_the_pair_with_what_was_moved_into_it(make_bus):
    """This process holds r's store and moved its inbox into the pair (20 sends, past the
    inbox's room); a fork child, which takes the store from this process (pidfd_getfd:
    the pair found by the inodes r's record names), receives all 20 with their own."""
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0, quota_fds=64)
    r, s = bus.peer(), bus.peer()
    h = r.transfer(r.create_node(), s)
    _send_carriers(s, h, 0, 20)
    errors = FORK.Queue()
    child = FORK.Process(target=_receive_all, args=(r, 20, errors))
    child.start()
    child.join(30)
    assert child.exitcode == 0, errors.get(timeout=1)
    assert r.query().n_fds == 0


def test_a_move_request_moves_only_what_a_held_store_holds(make_bus, monkeypatch):
    """What a mover socket receives: junk, a request naming no store of this process, one
    without credentials and one from a user the bus does not allow (uid 65534) move
    nothing; a request naming r's store moves its inbox (5 datagrams) into the pair, and
    the messages still arrive whole, in order."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0, quota_fds=64)
    r, s = bus.peer(), bus.peer()
    h = r.transfer(r.create_node(), s)
    _send_carriers(s, h, 0, 5)
    nonce = os.path.basename(os.path.dirname(_fds._stores[(bus.name, r.id)].path))[-32:]
    request = struct.pack("=QQ", int(nonce[:16], 16), int(nonce[16:], 16))
    mover, asker = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with mover, asker:
        asker.send(request)  # no credentials: the mover has no SO_PASSCRED yet
        assert lib.b1_fds_wakeup(mover.fileno()) == 0
        mover.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        asker.send(b"junk")
        asker.send(bytes(16))  # no store of this process
        assert lib.b1_fds_wakeup(mover.fileno()) == 0
        if os.geteuid() == 0:  # an outsider's request, from a child that dropped to nobody
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    asker.send(request)
                finally:
                    os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
            assert lib.b1_fds_wakeup(mover.fileno()) == 0
        asker.send(request)
        assert lib.b1_fds_wakeup(mover.fileno()) == 5
        asker.send(request)
        assert lib.b1_fds_wakeup(mover.fileno()) == 0  # the inbox is empty now
    _receive_in_order(r, 5)
