"""Well-known names (csrc/bus/names.c, Peer.publish/lookup/unpublish, Bus.names).

Invariants checked:
  - a name finds its node from any peer, in any process of the user, including one that
    shares no ancestry with the server (two separate `python -c` processes);
  - lookup counts a reference as transfer does; the name goes with its node (destroy,
    disconnect) and with unpublish; bad input raises the documented errno and changes
    nothing;
  - the table stays sound (Bus.check) through churn, against a model (Hypothesis) that
    also resets peers (Peer.reset).
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import bus1py
from bus1py import MessageType
from bus1py._b1 import ffi, lib


@pytest.fixture
def bus(make_bus):
    return make_bus(max_names=8, max_nodes=64, max_handles=256, pool_size=1 << 20)


def _errno(fn, *a):
    with pytest.raises(OSError) as e:
        fn(*a)
    return e.value.errno


def test_publish_lookup_send(bus):
    srv, cli = bus.peer(), bus.peer()
    node = srv.create_node()
    srv.publish("echo", node)
    assert bus.names() == {"echo": srv.id}
    h = cli.lookup("echo")
    assert h != node
    cli.send([h], b"hi")
    msg = srv.recv(0)
    assert (msg.payload, msg.destination) == (b"hi", node)
    # a second lookup is the same handle, one more reference (as transfer counts)
    assert cli.lookup("echo") == h
    cli.release(h)
    with pytest.raises(BlockingIOError):
        srv.recv(0)  # one reference left: no NODE_RELEASE yet
    cli.release(h)
    assert srv.recv(0).type == MessageType.NODE_RELEASE
    assert bus.check() == []


def test_errors_change_nothing(bus):
    srv, cli = bus.peer(), bus.peer()
    node = srv.create_node()
    srv.publish("svc", node)
    for bad in ("", "x" * 256, "a\0b", "\udc80", b"svc", None):
        assert _errno(srv.publish, bad, node) == errno.EINVAL
        assert _errno(cli.lookup, bad) == errno.EINVAL
    assert _errno(srv.publish, "é" * 128, node) == errno.EINVAL  # 256 UTF-8 bytes
    srv.publish("é" * 127, node)  # 254 bytes
    assert _errno(srv.publish, "svc", node) == errno.EEXIST
    h = cli.lookup("svc")
    assert _errno(cli.publish, "other", h) == errno.EREMOTE
    assert _errno(cli.unpublish, "svc") == errno.EREMOTE
    assert _errno(cli.lookup, "nothing") == errno.ENOENT
    assert _errno(srv.unpublish, "nothing") == errno.ENOENT
    assert bus.names() == {"svc": srv.id, "é" * 127: srv.id}
    # the C helper refuses a NUL or an overlong name itself
    r = lib.b1_name_publish(bus.base(), srv._slot, srv.id, node, b"a\0b", 3)
    assert r == -errno.EINVAL
    r = lib.b1_name_lookup(bus.base(), cli._slot, cli.id, b"x" * 256, 256, ffi.new("uint64_t *"))
    assert r == -errno.EINVAL
    assert bus.check() == []


def test_name_goes_with_its_node_and_its_owner(bus):
    srv, cli = bus.peer(), bus.peer()
    a, b = srv.create_node(), srv.create_node()
    srv.publish("a", a)
    srv.publish("b", b)
    srv.publish("b2", b)  # two names for one node
    srv.destroy(a)
    assert bus.names() == {"b": srv.id, "b2": srv.id}
    assert _errno(cli.lookup, "a") == errno.ENOENT
    assert _errno(srv.publish, "c", a) in (errno.ESTALE, errno.ENXIO)
    # the name of a destroyed node is free to take
    c = cli.create_node()
    cli.publish("a", c)
    assert bus.names()["a"] == cli.id
    srv.disconnect()
    assert bus.names() == {"a": cli.id}
    assert _errno(cli.lookup, "b") == errno.ENOENT
    assert cli.lookup("a") == c  # the owner looking up its own node gets its own handle
    cli.release(c)
    srv2 = bus.peer()
    srv2.publish("b", srv2.create_node())  # taken over from the gone owner
    assert bus.names() == {"a": cli.id, "b": srv2.id}
    assert bus.check() == []


def test_limit_and_churn(bus):
    p = bus.peer()
    node = p.create_node()
    for i in range(8):
        p.publish(f"n{i}", node)
    assert _errno(p.publish, "one-more", node) == errno.ENOSPC
    assert len(bus.names()) == 8
    # churn: removed names leave tombstones; the table stays sound and usable
    for round_ in range(50):
        p.unpublish(f"n{round_ % 8}")
        p.publish(f"m{round_}", node)
        p.unpublish(f"m{round_}")
        p.publish(f"n{round_ % 8}", node)
    assert sorted(bus.names()) == sorted(f"n{i}" for i in range(8))
    assert bus.check() == []
    # dead names hold room until something sweeps them: publish sweeps when full
    other = bus.peer()
    p.destroy(node)
    n2 = other.create_node()
    other.publish("fresh", n2)
    assert bus.names() == {"fresh": other.id}
    assert bus.check() == []


def test_gc_sweeps_dead_names(bus):
    p = bus.peer()
    node = p.create_node()
    p.publish("x", node)
    p.destroy(node)
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    assert info.names_used == 1
    bus.gc()
    lib.b1_bus_info(bus.base(), info)
    assert info.names_used == 0


def test_fsck_sees_a_scribbled_name(bus):
    p = bus.peer()
    p.publish("victim", p.create_node())
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    raw = bus._mmap
    for i in range(info.names_slots):
        off = info.names_offset + i * info.name_slot_size
        if int.from_bytes(raw[off:off + 4], "little") == 1:  # B1_NAME_USED: state, then hash
            raw[off + 4:off + 8] = (int.from_bytes(raw[off + 4:off + 8], "little") ^ 1).to_bytes(4, "little")
            break
    else:
        pytest.fail("the published name is in no slot")
    problems = bus.check()
    assert any("name slot" in line for line in problems), problems


def test_limits_bound_max_names():
    with pytest.raises(ValueError, match="max_names"):
        bus1py.Bus.create(max_names=(1 << 16) + 1)
    b = bus1py.Bus.create(max_names=0, pool_size=1 << 16)
    try:
        p = b.peer()
        assert _errno(p.publish, "x", p.create_node()) == errno.ENOSPC
        assert _errno(p.lookup, "x") == errno.ENOENT
        assert b.names() == {}
    finally:
        b.close()
        b.unlink()


SERVER = textwrap.dedent("""
    import sys, bus1py
    bus = bus1py.Bus.create(sys.argv[1])
    peer = bus.peer()
    peer.publish("echo", peer.create_node())
    print("ready", flush=True)
    while True:
        msg = peer.recv()
        if msg.type == bus1py.MessageType.DATA:
            peer.send(list(msg.handles), b"echo:" + msg.payload)
            if msg.payload == b"bye":
                break
""")

CLIENT = textwrap.dedent("""
    import sys, bus1py
    peer = bus1py.Bus.open(sys.argv[1]).peer()
    echo = peer.lookup("echo")
    reply = peer.create_node()
    for word in (b"one", b"two", b"bye"):
        peer.send([echo], word, [reply])
        msg = peer.recv(timeout=10)
        print(msg.payload.decode(), flush=True)
""")


@pytest.mark.timeout(60)
def test_unrelated_processes_find_each_other_by_name():
    name = f"bus1py-names-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(bus1py.__file__))}
    server = subprocess.Popen([sys.executable, "-c", SERVER, name], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.run([sys.executable, "-c", CLIENT, name], capture_output=True, text=True,
                                timeout=30, env=env)
        assert client.returncode == 0, client.stderr
        assert client.stdout.split() == ["echo:one", "echo:two", "echo:bye"]
        assert server.wait(timeout=10) == 0
    finally:
        server.kill()
        server.wait()
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass


# ---- the model ----

NAMES = ["a", "b", "c", "dd"]


class NamesModel(RuleBasedStateMachine):
    """Peers publish, look up, unpublish, destroy and reset; the bus's names match the
    model: name -> (owner index, node)."""

    def __init__(self):
        super().__init__()
        self.bus = bus1py.Bus.create(max_names=3, max_nodes=32, max_handles=256, pool_size=1 << 16)
        self.peers = [self.bus.peer() for _ in range(3)]
        self.nodes = [[] for _ in self.peers]  # live nodes each peer owns
        self.names = {}

    def teardown(self):
        self.bus.close()
        self.bus.unlink()

    @rule(p=st.integers(0, 2))
    def create(self, p):
        if len(self.nodes[p]) < 4:
            self.nodes[p].append(self.peers[p].create_node())

    @rule(p=st.integers(0, 2), k=st.integers(0, 3), name=st.sampled_from(NAMES))
    def publish(self, p, k, name):
        if not self.nodes[p]:
            return
        node = self.nodes[p][k % len(self.nodes[p])]
        if name in self.names:
            expect = errno.EEXIST
        elif len(self.names) >= 3:
            expect = errno.ENOSPC
        else:
            expect = 0
        try:
            self.peers[p].publish(name, node)
            got = 0
        except OSError as e:
            got = e.errno
        assert got == expect
        if not got:
            self.names[name] = (p, node)

    @rule(p=st.integers(0, 2), name=st.sampled_from(NAMES))
    def unpublish(self, p, name):
        expect = errno.ENOENT if name not in self.names else 0 if self.names[name][0] == p else errno.EREMOTE
        try:
            self.peers[p].unpublish(name)
            got = 0
        except OSError as e:
            got = e.errno
        assert got == expect
        if not got:
            del self.names[name]

    @rule(p=st.integers(0, 2), name=st.sampled_from(NAMES))
    def lookup(self, p, name):
        try:
            h = self.peers[p].lookup(name)
        except FileNotFoundError:
            assert name not in self.names
            return
        owner, node = self.names[name]
        assert (h == node) == (owner == p)  # the owner gets its own handle back
        self.peers[p].release(h)
        self.drain()

    @rule(p=st.integers(0, 2), k=st.integers(0, 3))
    def destroy(self, p, k):
        if not self.nodes[p]:
            return
        node = self.nodes[p].pop(k % len(self.nodes[p]))
        self.peers[p].destroy(node, release=True)
        self.names = {n: v for n, v in self.names.items() if v != (p, node)}
        self.drain()

    @rule(p=st.integers(0, 2), queued=st.booleans())
    def reset(self, p, queued):
        # bus1's PEER_RESET: p's nodes destroyed (their names with them), its queue
        # flushed (a message queued just before is gone), the peer usable after
        if queued and self.nodes[p]:
            self.peers[p].send([self.nodes[p][0]], b"flushed")
        self.peers[p].reset()
        with pytest.raises(BlockingIOError):
            self.peers[p].recv(0)
        self.nodes[p] = []
        self.names = {n: v for n, v in self.names.items() if v[0] != p}
        self.drain()

    def drain(self):
        # notices read, so destroyed nodes are freed and the tables do not fill
        for peer in self.peers:
            while True:
                try:
                    peer.recv(0)
                except BlockingIOError:
                    break

    @invariant()
    def names_match(self):
        assert self.bus.names() == {n: self.peers[p].id for n, (p, _) in self.names.items()}

    @invariant()
    def sound(self):
        assert self.bus.check() == []


NamesModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, derandomize=True,
                                        deadline=None, suppress_health_check=list(HealthCheck))
test_names_model = NamesModel.TestCase


def test_ls_shows_names(bus):
    from types import SimpleNamespace

    from rich.console import Console

    from bus1py.cli import admin

    p = bus.peer()
    p.publish("echo", p.create_node())
    console = Console(record=True, width=200)
    assert admin.cmd_ls(SimpleNamespace(names=[bus.name], all=False, json=None, command="ls"), console) == 0
    assert f"names: echo (peer {p.id})" in console.export_text()
    # and in `ls --json`, with the bus's info
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "bus1py"), "ls", "--json", "-", bus.name],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["buses"][0]["names"] == {"echo": p.id}


@pytest.mark.timeout(30)
def test_a_holder_killed_with_the_table_lock_is_taken_over(bus):
    """A process SIGKILLed while it holds the name table's lock, its count half changed:
    the next locker takes the lock over and recounts; nothing is lost or misread."""
    import ctypes
    import signal

    p = bus.peer()
    node = p.create_node()
    p.publish("kept", node)
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    head = int(ffi.cast("uintptr_t", bus.base())) + info.names_offset - info.names_head_size
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        libc = ctypes.CDLL(None)
        libc.pthread_mutex_lock(ctypes.c_void_p(head))
        # `used` follows the mutex (struct b1_names_head): a change cut short
        used_at = info.names_offset - info.names_head_size + 40
        bus._mmap[used_at:used_at + 4] = (7).to_bytes(4, "little")
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status)
    assert bus.names() == {"kept": p.id}  # the takeover ran here
    lib.b1_bus_info(bus.base(), info)
    assert info.names_used == 1
    p.publish("more", node)
    assert bus.names() == {"kept": p.id, "more": p.id}
    assert bus.check() == []


def test_churn_keeps_removed_slots_bounded():
    """Removed slots (tombstones) are cleared or compacted away: after any churn at most a
    quarter of the slots are removed ones, and every probe stays within its cluster."""
    import random

    b = bus1py.Bus.create(max_names=64, pool_size=1 << 16)
    try:
        p = b.peer()
        node = p.create_node()
        rng = random.Random(26)
        live = set()
        info = ffi.new("struct b1_bus_info *")
        worst = 0
        for _ in range(3000):
            name = f"svc-{rng.randrange(400)}"
            if name in live:
                p.unpublish(name)
                live.discard(name)
            elif len(live) < 64:
                p.publish(name, node)
                live.add(name)
            lib.b1_bus_info(b.base(), info)
            worst = max(worst, info.names_tombs)
        assert worst <= info.names_slots // 4 + 1
        assert set(b.names()) == live
        assert b.check() == []
    finally:
        b.close()
        b.unlink()


@pytest.mark.timeout(30)
def test_a_move_cut_short_is_undone_by_the_takeover(bus):
    """A compaction killed between its copy and the original's removal leaves a name twice:
    the next locker keeps the first on its probe path, and the counts come right."""
    import ctypes
    import signal

    p = bus.peer()
    p.publish("moved", p.create_node())
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    size, slots = info.name_slot_size, info.names_slots
    at = lambda i: info.names_offset + (i % slots) * size  # noqa: E731
    raw = bus._mmap
    used = next(i for i in range(slots) if raw[at(i)] == 1)
    if raw[at(used + 1)] != 0:
        pytest.skip("the slot after the name is taken")
    head = int(ffi.cast("uintptr_t", bus.base())) + info.names_offset - info.names_head_size
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        ctypes.CDLL(None).pthread_mutex_lock(ctypes.c_void_p(head))
        raw[at(used + 1):at(used + 1) + size] = raw[at(used):at(used) + size]
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(child, 0)
    assert bus.names() == {"moved": p.id}
    lib.b1_bus_info(bus.base(), info)
    assert (info.names_used, info.names_tombs) == (1, 1)
    assert bus.check() == []
    p.unpublish("moved")
    assert bus.names() == {}
    assert bus.check() == []


def _contender(name, start, results):
    bus = bus1py.Bus.open(name)
    peer = bus.peer()
    node = peer.create_node()
    start.wait()
    try:
        peer.publish("leader", node)
        results.put(("won", peer.id))
        time.sleep(1)  # stay the holder while the others look
    except OSError as e:
        results.put(("lost", e.errno))


@pytest.mark.timeout(60)
def test_processes_racing_for_one_name_elect_one():
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    b = bus1py.Bus.create(pool_size=1 << 16)
    try:
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_contender, args=(b.name, start, results)) for _ in range(6)]
        for pr in procs:
            pr.start()
        start.set()
        got = [results.get(timeout=30) for _ in procs]
        winners = [who for kind, who in got if kind == "won"]
        assert len(winners) == 1, got
        assert sorted(who for kind, who in got if kind == "lost") == [errno.EEXIST] * 5
        assert b.names() == {"leader": winners[0]}
        for pr in procs:
            pr.join(timeout=30)
        b.gc()  # the winner exited: its peer is disconnected, and with it the name
        assert b.names() == {}
        assert b.check() == []
    finally:
        b.close()
        b.unlink()
