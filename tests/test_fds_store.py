"""The descriptor store against outsiders, hostile datagrams, failed set-ups and leaks
(bus1py/fds.py, csrc/bus/fds.c; docs/RELIABILITY.md, "Trust model", row "any other local
user").

Invariants checked:
  - a process of another uid that never opens the segment, working only from
    /proc/net/unix and the filesystem, sends nothing into any store (no filling, no
    injection) and binds nothing at a store's name or in its directory (no theft); the
    peer's descriptor messages arrive whole afterwards;
  - a take is robust against any datagram in the store (any length, any header, missing
    or extra descriptors, a forged header with foreign credentials): every message gets
    exactly its own descriptors, no copy is left installed, and every such datagram is
    popped with its descriptors closed (a Hypothesis property over junk sequences);
  - a store that cannot be set up (EMFILE at attach) makes a send with descriptors fail
    with ENOLINK and send nothing; the peer's next call sets it up and delivery works; a
    message whose descriptors were lost with its store is dropped with ENOLINK, alone;
  - a group bus (0660) stays open to its members: a member of another uid posts;
  - a fork child that does not use the bus holds no store; a store of a peer disconnected
    by another process is closed in this holder within a watcher's rescan; 1,000
    open/close cycles of a bus leave threads, descriptors, mappings and mover paths as
    they were;
  - the mover sockets (where senders ask a holder process to move a full inbox) have no
    abstract name; an outsider can neither send to nor bind at or beside their paths; a
    dead process's path is unlinked by the next process that binds a mover on the bus.
"""
from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import bus1py
from bus1py import fdpaths
from bus1py import fds as _fds
from bus1py import watch as _watch
from bus1py._lib import ffi, lib
from fdhelp import arrives_with, eof as _eof, fill_table, open_fds as _open_fds

FORK = mp.get_context("fork")
NOBODY = 65534


@pytest.fixture
def bus(make_bus):
    return make_bus(max_peers=32, max_nodes=64, max_handles=256, pool_size=1 << 20, spin_ns=0, quota_fds=64)


def _pair(bus):
    r, s = bus.peer(), bus.peer()
    node = r.create_node()
    return r, s, node, r.transfer(node, s)


def _store(peer) -> list:
    """This process's sockets of `peer`'s store."""
    return _fds._stores[(peer.bus.name, peer.id)][1]


def _send_and_take(r, s, h, n=3):
    """n messages with a pipe's write end each: each arrives with its own, working."""
    pipes = [os.pipe() for _ in range(n)]
    for i, (_, wr) in enumerate(pipes):
        s.send([h], b"m%d" % i, fds=(wr,))
        os.close(wr)
    for i, (rd, _) in enumerate(pipes):
        arrives_with(r, b"m%d" % i, rd)


# ---- item 1: another local user reaches no store ----

def _outsider(inodes) -> dict:
    """What a process of another uid that never opened the segment achieves against the
    stores it finds in /proc/net/unix (those of `inodes`, the test's own: other tests'
    stores on the machine are left alone): datagrams sent (filling a store, or injecting
    a descriptor under a guessed header) and names bound (taking a store's name or making
    one in its directory)."""
    names = []
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and int(parts[6]) in inodes:
                names.append(parts[7])
    rd, wr = os.pipe()
    out = {"uid": os.getuid(), "found": len(names), "sent": 0, "bound": 0, "refused": []}
    for name in names:
        addr = "\0" + name[1:] if name.startswith("@") else name
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            for i in range(12):
                try:
                    s.sendmsg([b"\1" * (1 + i)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", wr))],
                              socket.MSG_DONTWAIT, addr)
                    out["sent"] += 1
                except OSError as e:
                    out["refused"].append(e.errno)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as t:
            try:
                t.bind(addr)
                out["bound"] += 1
            except OSError as e:
                out["refused"].append(e.errno)
        if not addr.startswith("\0"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as t:
                try:
                    t.bind(os.path.dirname(addr) + "/x")
                    out["bound"] += 1
                except OSError as e:
                    out["refused"].append(e.errno)
    return out


def _as_outsider(fn, *args) -> dict:
    """fn() in a fork child that drops to uid and gid 65534 (no groups) before anything
    else and never touches the bus; its result, as json through a pipe."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rd)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.write(wr, json.dumps(fn(*args)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wr)
    with os.fdopen(rd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data
    return json.loads(data)


@pytest.mark.timeout(60)
def test_another_user_cannot_fill_inject_into_or_take_a_store(bus):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another uid")
    r, s, _, h = _pair(bus)
    mine = _store_inodes(r) | _store_inodes(s)
    out = _as_outsider(_outsider, mine)
    assert out["uid"] == NOBODY
    assert out["found"] == 2  # every inbox is listed (the names are no secret), no pair has a name
    assert out["sent"] == 0 and out["bound"] == 0, out
    assert set(out["refused"]) <= {errno.EACCES, errno.EPERM}, out
    _send_and_take(r, s, h, n=12)  # more than a socket's queue: nothing of the outsider's in the way


def _mover_path(bus) -> str:
    """Where this process's mover socket on `bus` is (b1_fds_mover_address)."""
    out = ffi.new("char[]", 108)
    n = lib.b1_fds_mover_address(bus.base(), out, 108)
    assert n > 0
    return os.fsdecode(ffi.buffer(out, n)[:])


def _outsider_movers(inodes, ours) -> dict:
    """What a process of another uid that never opened the segment finds of the bus's
    mover sockets in /proc/net/unix (an abstract name has no permission check: there must
    be none of bus1py among `ours`, the test process's sockets) and achieves against the
    paths of `inodes` (the test's mover):
    requests sent (a flood that would drop real ones), names bound (taking a mover's
    name before its process binds it, or a stale one's place)."""
    abstract, paths = [], []
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[7].startswith("@") and "bus1py" in parts[7] and int(parts[6]) in ours:
                abstract.append(parts[7])
            elif len(parts) >= 8 and int(parts[6]) in inodes:
                paths.append(parts[7])
    out = {"uid": os.getuid(), "abstract": abstract, "found": len(paths), "sent": 0, "bound": 0,
           "refused": []}
    for path in paths:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            for attempt in (lambda: s.connect(path), lambda: s.sendto(bytes(16), path)):
                try:
                    attempt()
                    out["sent"] += 1
                except OSError as e:
                    out["refused"].append(e.errno)
        for name in (path, os.path.dirname(path) + "/1-1"):  # its name; a name of its own there
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as t:
                try:
                    t.bind(name)
                    out["bound"] += 1
                except OSError as e:
                    out["refused"].append(e.errno)
    return out


@pytest.mark.timeout(60)
def test_another_user_finds_no_mover_name_and_reaches_no_mover(make_bus, monkeypatch):
    """The mover socket (where senders ask this process to move a full inbox) is a path in
    a directory only the bus's users may enter: an outsider finds no abstract bus1py name
    to squat or flood, and cannot send to nor bind at or beside the path it sees."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another uid")
    monkeypatch.setenv("BUS1PY_WATCH", "1")
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0, quota_fds=64)
    r, s, _, h = _pair(bus)
    path = _mover_path(bus)
    ino = {os.fstat(_watch._watchers[bus.name].mover.fileno()).st_ino}
    out = _as_outsider(_outsider_movers, ino, _socket_inodes(os.getpid()))
    assert out["uid"] == NOBODY
    assert out["abstract"] == [], out
    assert out["found"] == 1 and out["sent"] == 0 and out["bound"] == 0, out
    assert set(out["refused"]) == {errno.EACCES}, out
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    _send_and_take(r, s, h, n=12)


@pytest.mark.timeout(60)
def test_a_dead_process_mover_path_is_removed_by_the_next_binder(make_bus, monkeypatch):
    """A process killed with the bus open leaves its mover path; the next process to bind
    a mover on the bus (here this one, reopening) unlinks it: the name carries the dead
    process's pid and pidfs inode, which no live process has."""
    monkeypatch.setenv("BUS1PY_WATCH", "1")
    bus = make_bus(max_peers=8, max_nodes=16, max_handles=64, pool_size=1 << 20, spin_ns=0)
    bus.peer()
    mine = _mover_path(bus)
    pid = os.fork()
    if pid == 0:
        try:
            bus.peer()  # a fork child's first use starts its watcher, which binds its mover
        finally:
            os._exit(0)  # no close: its path stays
    assert os.waitpid(pid, 0)[1] == 0
    names = os.listdir(os.path.dirname(mine))
    assert len(names) == 2 and os.path.basename(mine) in names
    dead = next(n for n in names if n != os.path.basename(mine))
    assert lib.b1_fds_mover_stale(dead.encode()) == 1
    assert lib.b1_fds_mover_stale(os.path.basename(mine).encode()) == 0  # alive
    pidfd = os.pidfd_open(os.getpid())
    if "%x" % os.fstat(pidfd).st_ino == os.path.basename(mine).split("-")[1]:  # a pidfs kernel
        assert lib.b1_fds_mover_stale(b"%d-1" % os.getpid()) == 1  # this pid, another process's name
    os.close(pidfd)
    assert lib.b1_fds_mover_stale(b"inbox") == lib.b1_fds_mover_stale(b"1-2x") == 0  # no mover's name
    bus.close()
    assert os.listdir(os.path.dirname(mine)) == [n for n in names if n != os.path.basename(mine)]
    with bus1py.Bus.open(bus.name) as again:
        assert os.listdir(os.path.dirname(mine)) == [os.path.basename(_mover_path(again))]
    assert os.listdir(os.path.dirname(mine)) == []
    bus.unlink()  # the directory lives as long as the bus's name
    assert not os.path.exists(os.path.dirname(mine))


# ---- item 2: the take against any datagram ----

_HDR = struct.Struct("=QQQIIII")  # csrc/bus/fdio.h struct b1_fd_dgram


def _post(path: str, data: bytes, fds=(), creds=None) -> bool:
    """One datagram into a store's socket as this (trusted) process would; False when full."""
    anc = []
    if creds is not None:
        anc.append((socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("iII", *creds)))
    if fds:
        anc.append((socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds)))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.sendmsg([data], anc, socket.MSG_DONTWAIT, path)
            return True
        except BlockingIOError:
            return False


@pytest.mark.timeout(60)
def test_forged_and_malformed_datagrams_are_never_taken_nor_leak(bus):
    """The message's post finds the inbox full of junk and moves it (the sender's process
    holds the store): the junk is popped, never forwarded.  Then the inbox gets a datagram
    with the message's exact header carrying an outsider's descriptor under foreign
    credentials, and one under ours whose header counts 1 descriptor but carries 2.  The
    take passes both and installs no copy of them; the sweep pops them all."""
    if os.geteuid() != 0:
        pytest.skip("needs root to send foreign SCM_CREDENTIALS")
    r, s, _, h = _pair(bus)
    inbox = _store(r)[0].getsockname()
    junk_rd, junk_wr = os.pipe()
    n = 0
    while _post(inbox, bytes(_HDR.size), (junk_wr,)):  # header-long, so a walk by offsets sees past it
        n += 1
    assert n >= 2
    rd, wr = os.pipe()
    ts, sender, seq = s.send([h], b"real", fds=(wr,))
    os.close(wr)
    forged_rd, forged_wr = os.pipe()
    header = _HDR.pack(sender, ts, seq, 0, 1, 0, 1)
    assert _post(inbox, header, (forged_wr,), creds=(os.getpid(), NOBODY, NOBODY))
    assert _post(inbox, header, (forged_wr, forged_wr))
    os.close(forged_wr)
    os.close(junk_wr)
    before = _open_fds()
    m = r.recv(timeout=1)
    assert m.payload == b"real" and len(m.fds) == 1
    assert os.fstat(m.fds[0]).st_ino == os.fstat(rd).st_ino
    assert _open_fds() - before == {m.fds[0]}  # no copy of a forgery left installed
    os.close(m.fds[0])
    lib.b1_fds_sweep(bus.base(), r._slot, r._id)
    for end in (rd, forged_rd, junk_rd):
        assert _eof(end)
        os.close(end)


_junk = st.one_of(
    st.binary(max_size=64),
    # headers of every shape, of a sender no peer has (a header matching a real message
    # under a holder's credentials is a holder's word: test_forged_... covers the others)
    st.builds(lambda *f: _HDR.pack(*f), st.sampled_from([0, 999]), st.integers(0, 8), st.integers(0, 4),
              st.integers(0, 2), st.integers(0, 300), st.integers(0, 300), st.integers(0, 300)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(plan=[(False, b"\1", 0, 0), (True, b"", 0, 0)])  # one byte ahead of a message
@example(plan=[(False, b"", 2, 0), (True, b"", 0, 0), (False, bytes(_HDR.size), 3, 0), (True, b"", 0, 0)])
@given(plan=st.lists(st.tuples(st.booleans(), _junk, st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=8))
def test_any_junk_in_the_store_leaves_every_message_its_own(make_bus, plan):
    """A plan interleaves real sends (True) with junk datagrams (False: bytes, n
    descriptors, into the store's inbox, k of them).  Every real message arrives with exactly its
    own descriptor, the receiver ends with no other new descriptor, and once swept every
    junk descriptor is closed."""
    bus = make_bus(max_peers=4, max_nodes=8, max_handles=32, pool_size=1 << 18, spin_ns=0, quota_fds=64)
    r, s, _, h = _pair(bus)
    inbox = _store(r)[0].getsockname()
    junk_rd, junk_wr = os.pipe()
    real = []
    for is_real, data, n_fds, k in plan:
        if is_real:
            rd, wr = os.pipe()
            s.send([h], b"%d" % len(real), fds=(wr,))
            os.close(wr)
            real.append(rd)
        else:
            for _ in range(k):
                _post(inbox, data, (junk_wr,) * n_fds)
    os.close(junk_wr)
    before = _open_fds()
    got = [r.recv(timeout=1) for _ in real]
    assert [m.payload for m in got] == [b"%d" % i for i in range(len(real))]
    assert _open_fds() - before == {m.fds[0] for m in got}
    for m, rd in zip(got, real):
        assert len(m.fds) == 1 and os.fstat(m.fds[0]).st_ino == os.fstat(rd).st_ino
        os.close(m.fds[0])
    lib.b1_fds_sweep(bus.base(), r._slot, r._id)
    for end in real + [junk_rd]:
        assert _eof(end, 1)
        os.close(end)
    bus.close()


# ---- item 3: no silent loss ----

def test_a_store_that_cannot_be_set_up_fails_the_send_and_is_retried(bus):
    """The receiver is made, and makes its node, with no descriptor number free: its store
    is not bound.  A send with descriptors to it fails with ENOLINK and queues nothing;
    the receiver's next call with descriptors free sets the store up, and the same send
    then arrives whole."""
    s = bus.peer()
    rd, wr = os.pipe()
    fillers = fill_table()
    try:
        r = bus.peer()
        h = r.transfer(r.create_node(), s)  # each call tries the store again, in vain
        assert _fds.missing(r)
        os.close(fillers.pop())  # the sender's one socket
        with pytest.raises(OSError) as e:
            s.send([h], b"lost?", fds=(wr,))
    finally:
        for fd in fillers:
            os.close(fd)
    assert e.value.errno == errno.ENOLINK and "nothing sent" in str(e.value)
    assert r.query().queued_messages == 0 and r.query().n_fds == 0
    with pytest.raises(BlockingIOError):
        r.recv(timeout=0)  # its next call: the store is set up
    assert not _fds.missing(r)
    s.send([h], b"whole", fds=(wr,))
    os.close(wr)
    arrives_with(r, b"whole", rd)


# ---- item 4: no leaks ----

def _store_inodes(peer) -> set:
    return {os.fstat(sock.fileno()).st_ino for sock in _store(peer)}


def _socket_inodes(pid) -> set:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def _idle(ready, done):
    ready.set()
    done.wait(30)


@pytest.mark.timeout(60)
def test_a_fork_child_that_does_not_use_the_bus_holds_no_store(bus):
    r, s, _, h = _pair(bus)
    ready, done = FORK.Event(), FORK.Event()
    child = FORK.Process(target=_idle, args=(ready, done))
    child.start()
    try:
        assert ready.wait(30)
        assert not _socket_inodes(child.pid) & (_store_inodes(r) | _store_inodes(s))
        rd, wr = os.pipe()
        s.send([h], b"dropped", fds=(wr,))
        os.close(wr)
        r.disconnect()  # the message is dropped: its descriptor closes though the child lives
        assert _eof(rd)
        os.close(rd)
    finally:
        done.set()
        child.join(30)


def _disconnect_all(peers):
    for p in peers:
        p.disconnect()
    os._exit(0)


@pytest.mark.timeout(60)
def test_stores_of_peers_disconnected_elsewhere_close_here(make_bus, monkeypatch):
    """20 peers made here are disconnected by a fork child: this process's watcher closes
    its copies of their stores within a rescan, and the descriptor in flight to one of them
    closes with it."""
    monkeypatch.setenv("BUS1PY_WATCH", "1")
    bus = make_bus(max_peers=32, max_nodes=64, max_handles=256, pool_size=1 << 20, spin_ns=0, quota_fds=64)
    s = bus.peer()
    before = _open_fds()  # a descriptor of an earlier test's garbage may close meanwhile
    baseline = len(before)
    peers = [bus.peer() for _ in range(20)]
    h = peers[0].transfer(peers[0].create_node(), s)
    rd, wr = os.pipe()
    s.send([h], b"in flight", fds=(wr,))
    os.close(wr)
    assert len(_open_fds()) > baseline + 20
    child = FORK.Process(target=_disconnect_all, args=(peers,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    child.close()  # its sentinel
    deadline = time.monotonic() + 3
    while _open_fds() - before - {rd} and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _open_fds() - before - {rd}
    assert not left, sorted(os.readlink(f"/proc/self/fd/{fd}") for fd in left)
    assert _eof(rd, 1)
    os.close(rd)


def _mappings(name: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(name.lstrip("/") in line for line in f)


@pytest.mark.timeout(120)
def test_a_thousand_open_close_cycles_leave_nothing_behind(make_bus, monkeypatch):
    monkeypatch.setenv("BUS1PY_WATCH", "1")
    bus = make_bus(max_peers=4, max_nodes=8, max_handles=32, pool_size=1 << 16, spin_ns=0)
    bus.peer()
    movers = os.path.dirname(_mover_path(bus))
    threads, fds, maps = threading.active_count(), len(_open_fds()), _mappings(bus.name)
    for _ in range(1000):
        other = bus1py.Bus.open(bus.name)
        other.close()
    assert (threading.active_count(), len(_open_fds()), _mappings(bus.name)) == (threads, fds, maps)
    other = bus1py.Bus.open(bus.name)
    bus.close()  # the watcher maps the closing one: it moves to the other, the mapping goes
    assert threading.active_count() == threads and _mappings(bus.name) == maps
    other.close()  # the last one: its watcher goes too
    assert threading.active_count() == threads - 1 and _mappings(bus.name) == 0
    closed = len(_open_fds())
    for _ in range(50):  # alone: each open starts a watcher, each close joins it
        bus1py.Bus.open(bus.name).close()
    assert (threading.active_count(), len(_open_fds()), _mappings(bus.name)) == (threads - 1, closed, 0)
    assert os.listdir(movers) == []  # each watcher unlinked its mover path
    bus.unlink()
    assert not os.path.exists(movers)  # and the bus's name took the directory with it


def test_a_message_whose_store_was_lost_is_dropped_and_said_so(bus):
    """The store closes with messages' descriptors in it while the receiver stays connected
    (its last holder let go of it): each such message is consumed with ENOLINK, never
    delivered without its descriptors, and the queue goes on."""
    r, s, _, h = _pair(bus)
    rd, wr = os.pipe()
    s.send([h], b"one", fds=(wr,))
    s.send([h], b"two", fds=(wr, wr))
    s.send([h], b"three")
    os.close(wr)
    _fds._close(bus.base(), (bus.name, r.id), drain=False)  # the only holder lets go
    assert _eof(rd)  # the kernel closed what was in it
    os.close(rd)
    for _ in range(2):
        with pytest.raises(OSError) as e:
            r.recv(timeout=0)  # sets a fresh store up, finds the descriptors gone
        assert e.value.errno == errno.ENOLINK and "was dropped" in str(e.value)
    m = r.recv(timeout=0)
    assert m.payload == b"three" and m.fds == ()
    assert r.query().n_fds == 0
    _send_and_take(r, s, h, n=2)  # the fresh store carries the next ones


def _group_sender(s, h, wr, gid):
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    s.send([h], b"from the group", fds=(wr,))
    os._exit(0)


@pytest.mark.timeout(60)
def test_a_group_bus_takes_descriptors_from_a_member_of_another_uid(make_bus):
    """A 0660 bus: its stores' directories are 0770 of the segment's group, so a member of
    another uid posts to them, and its credentials (the group) are accepted."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another uid")
    umask = os.umask(0o007)
    try:
        bus = make_bus(mode=0o660, max_peers=4, max_nodes=8, max_handles=32, pool_size=1 << 18, spin_ns=0)
    finally:
        os.umask(umask)
    st = os.stat("/dev/shm" + bus.name)
    assert st.st_mode & 0o777 == 0o660
    gid = st.st_gid
    r, s, _, h = _pair(bus)
    assert os.stat(os.path.dirname(_store(r)[0].getsockname())).st_mode & 0o777 == 0o770
    rd, wr = os.pipe()
    child = FORK.Process(target=_group_sender, args=(s, h, wr, gid))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    os.close(wr)
    arrives_with(r, b"from the group", rd)


def _touch_the_stores(q):
    _fds.retry("no-such-bus")  # takes the store tables' lock
    q.put("ok")


@pytest.mark.timeout(60)
def test_a_fork_while_another_thread_holds_the_stores_lock_gives_a_child_that_runs():
    """The watcher prunes the stores under their lock every rescan: a fork at that moment
    must not give the child a lock that no thread of it can release."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with _fds._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()  # the fork waits for the lock, then goes on
    q = FORK.Queue()
    child = FORK.Process(target=_touch_the_stores, args=(q,))
    child.start()
    try:
        assert q.get(timeout=20) == "ok"
    finally:
        child.join(20)
        if child.is_alive():
            child.kill()
        t.join(10)
    assert child.exitcode == 0


def _make_peer(bus, q, done):
    peer = bus.peer()  # this process holds the new peer's store until `done`
    q.put(peer)
    q.put(peer)
    done.wait(30)


def _ensure_in_child(q, out):
    peer = q.get(timeout=20)  # attached here: its store set up (ensure)
    out.put(peer.id)


@pytest.mark.timeout(90)
def test_a_fork_while_a_thread_binds_a_store_leaves_the_child_no_flock(make_bus, monkeypatch):
    """A thread of this process sets up a store (holding the flock of its directory) while
    another forks: the child's copy of the directory's descriptor must not keep the flock,
    or the child -- and every other binder -- waits for it for ever."""
    from bus1py import fdpaths
    bus = make_bus()
    slow, binding = fdpaths.bind, threading.Event()

    def bind_slowly(*a, **kw):
        binding.set()
        time.sleep(0.5)  # the flock is held meanwhile
        return slow(*a, **kw)

    monkeypatch.setattr(fdpaths, "bind", bind_slowly)
    q, out, done = FORK.Queue(), FORK.Queue(), FORK.Event()
    maker = FORK.Process(target=_make_peer, args=(bus, q, done))
    maker.start()
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=20)))  # attaches: ensure
    t.start()
    try:
        assert binding.wait(20)
        child = FORK.Process(target=_ensure_in_child, args=(q, out))
        child.start()
        try:
            assert out.get(timeout=20) > 0
        finally:
            child.join(20)
            if child.is_alive():
                child.kill()
        assert child.exitcode == 0
    finally:
        t.join(20)
        done.set()
        maker.join(20)
    assert got and fds_held(got[0])


def fds_held(peer) -> bool:
    return (peer._bus.name, peer._id) in _fds._stores


def _killed_user(name, out):
    """Makes bus `name`, two peers' stores and (its watcher's) mover directory, sends
    their paths, dies."""
    os.environ["BUS1PY_WATCH"] = "1"
    bus = bus1py.Bus.create(name)
    dirs = [os.path.dirname(fdpaths.path(bus.peer())[0]) for _ in range(2)]
    deadline = time.monotonic() + 10
    while fdpaths.mover_dir(bus.base()) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the watcher binds its mover socket
    out.send(dirs + [fdpaths.mover_dir(bus.base())])
    os.kill(os.getpid(), 9)


def _dirs_of_a_killed_user(name):
    """The directories a child made for bus `name` before it was killed (_killed_user)."""
    got, out = FORK.Pipe(duplex=False)
    child = FORK.Process(target=_killed_user, args=(name, out))
    child.start()
    assert got.poll(30), "the child's directories"
    dirs = got.recv()
    child.join(30)
    assert child.exitcode == -9 and None not in dirs and len(set(dirs)) == 3
    assert all(os.path.isdir(d) for d in dirs)
    return dirs


@pytest.mark.timeout(60)
def test_a_dead_bus_taken_over_leaves_none_of_its_store_directories(monkeypatch):
    """Every process of a bus killed, its name taken over by a new creator (the reclaim):
    the dead peers' store directories go with the old segment."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")  # no gc here: the reclaim alone must remove them
    name = f"/bus1py-test-reclaim-{os.getpid()}"
    dirs = _dirs_of_a_killed_user(name)
    with bus1py.Bus.create(name):
        assert not [d for d in dirs if os.path.exists(d)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["rm"], ["gc"]])
def test_removing_a_dead_bus_by_the_cli_leaves_none_of_its_directories(command):
    """`bus1py rm` or `gc` of a bus whose processes were all killed: its name, its peers'
    store directories and its mover directory all go."""
    name = f"/bus1py-test-rm-{os.getpid()}"
    dirs = _dirs_of_a_killed_user(name)
    try:
        cp = subprocess.run([sys.executable, "-m", "bus1py.cli", *command, name.lstrip("/")],
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert not os.path.exists("/dev/shm" + name)
        assert [d for d in dirs if os.path.exists(d)] == []
    finally:
        if os.path.exists("/dev/shm" + name):
            os.unlink("/dev/shm" + name)


def _receive_after(peer, go, conn):
    go.wait(10)
    try:
        peer.recv(timeout=20)
        conn.send(None)
    except OSError as e:
        conn.send(e.errno)


@pytest.mark.timeout(60)
def test_a_store_bound_after_its_peers_disconnect_goes_with_the_binder(make_bus, monkeypatch):
    """A fork child's first receive binds the store of a peer the parent disconnected just
    before (the disconnect found no path to unlink); the child exits before any watcher's
    rescan: the store's directory must not outlive it."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(max_peers=4, max_nodes=8, max_handles=16, pool_size=1 << 16)
    peer = bus.peer()
    where = os.path.dirname(fdpaths.path(peer)[0])
    go, (got, out) = FORK.Event(), FORK.Pipe(duplex=False)
    child = FORK.Process(target=_receive_after, args=(peer, go, out))
    child.start()
    peer.disconnect()
    go.set()
    assert got.poll(30) and got.recv() == errno.ESHUTDOWN
    child.join(30)
    assert child.exitcode == 0
    assert not os.path.exists(where)
