"""bus1's PEER_RESET (Peer.reset, csrc/bus/reset.c) and destroy(release=True) dropping one
reference (bus1's NODES_DESTROY_FLAG_RELEASE_HANDLES).

Invariants checked:
  - a reset destroys the peer's nodes (their holders get exactly one NODE_DESTROY each,
    the peer none), drops its committed messages, releases every reference it holds
    (owners get NODE_RELEASE), removes its names, and leaves it connected and usable;
  - a reset whose process is SIGKILLed mid-way (before or after the destruction's stamp)
    is finished by gc: the same outcome, the bus sound (Bus.check);
  - a data message in flight at the reset (staged before it, stamped before or after it,
    committed after it, or its sender SIGKILLed between stamp and commit and rolled
    forward by gc) is dropped, as bus1 drops it: never received, its descriptors closed
    (the pipe's reader sees end-of-file), its carried handle released (its owner gets
    NODE_RELEASE), its quota charge given back; one staged after the reset arrives;
  - against a model (Hypothesis), in any interleaving of two senders' transaction steps
    (prepare, stage, stamp, commit), the receiver's resets and receives: a message is
    received iff no reset came between its prepare and its receive, exactly once, in key
    order, with its own descriptor; once all is drained nothing is charged (n_fds 0) and
    every descriptor of a dropped message is closed;
  - destroy(release=True) drops one reference of the owner's handle, not all.
"""
from __future__ import annotations

import errno
import os
import select

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

import bus1py
from bus1py import MessageType
from bus1py._b1 import ffi, lib


@pytest.fixture
def bus(make_bus):
    return make_bus(max_peers=8, max_nodes=64, max_handles=256, pool_size=1 << 20)


def drain(peer):
    got = []
    while True:
        try:
            got.append(peer.recv(0))
        except BlockingIOError:
            return got


def _setup(bus):
    """a owns two nodes, one held by c; c owns one, held by a; c has sent a data message
    to a, and a has it queued."""
    a, c = bus.peer(), bus.peer()
    held, lone = a.create_node(), a.create_node()
    mine = c.create_node()
    c_to_held = a.transfer(held, c)
    a_to_mine = c.transfer(mine, a)
    c.send([c_to_held], b"queued before the reset")
    a.publish("svc", held)
    return a, c, held, lone, mine, c_to_held, a_to_mine


def _check_reset(bus, a, c, mine, c_to_held, a_to_mine):
    assert drain(a) == []  # flushed, and no NODE_DESTROY of its own nodes
    got = sorted((m.type, m.destination) for m in drain(c))
    assert got == [(MessageType.NODE_DESTROY, c_to_held), (MessageType.NODE_RELEASE, mine)]
    assert bus.names() == {}
    with pytest.raises(OSError) as e:
        a.send([a_to_mine], b"x")
    assert e.value.errno == errno.ENXIO  # its handles are released
    # still connected and usable, same id
    node = a.create_node()
    h = a.transfer(node, c)
    c.send([h], b"after")
    assert a.recv(0).payload == b"after"
    assert a.query().queued_entries == 0
    assert bus.check() == []


def test_reset_destroys_flushes_releases_and_keeps_the_peer(bus):
    a, c, held, lone, mine, c_to_held, a_to_mine = _setup(bus)
    ident = a.id
    a.reset()
    assert a.id == ident
    _check_reset(bus, a, c, mine, c_to_held, a_to_mine)
    a.reset()  # again, with a node and nothing queued
    assert [m.type for m in drain(c)] == [MessageType.NODE_DESTROY]
    c.disconnect()
    a.disconnect()
    info = bus.info()
    assert (info["peers"], info["nodes"], info["handles"], info["entries_in_use"], info["pool_used"]) == (0,) * 5


def test_reset_of_an_empty_peer_and_of_a_gone_one(bus):
    a = bus.peer()
    a.reset()
    assert drain(a) == []
    a.disconnect()
    with pytest.raises(BrokenPipeError):
        a.reset()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point", ["destroy", "stamp"])
def test_reset_killed_midway_is_finished_by_gc(point, monkeypatch):
    monkeypatch.setenv("BUS1PY_WATCH", "0")  # the gc below is the one that finishes it
    bus = bus1py.Bus.create(max_peers=8, max_nodes=64, max_handles=256, pool_size=1 << 20)
    try:
        a, c, held, lone, mine, c_to_held, a_to_mine = _setup(bus)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child dies inside the reset
            lib.b1_kill_at(getattr(lib, f"B1_KILL_{point.upper()}"), 0)
            a.reset()
            os._exit(3)  # the point was not reached
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status), status
        assert any("resetter" in line for line in bus.check())
        bus.gc()
        _check_reset(bus, a, c, mine, c_to_held, a_to_mine)
    finally:
        bus.close()
        bus.unlink()


# ---- messages in flight at the reset ----

def _staged(bus, s, h, payload, fds=(), handles=()):
    """s's send of payload to h, prepared and staged (a block at the receiver), no further."""
    tx = ffi.new("struct b1_tx *")
    tx.dests = dests = ffi.new("struct b1_dest[]", 1)
    assert lib.b1_send_fds(ffi.new("int32_t[]", list(fds)), len(fds)) == 0
    hs = ffi.new("uint64_t[]", list(handles))
    assert lib.b1_tx_prepare(bus.base(), tx, s._slot, s._id, ffi.new("uint64_t[]", [h]), 1,
                             payload, len(payload), hs, len(handles), 0) == 0
    assert lib.b1_tx_stage(bus.base(), tx, 0) == 0
    return tx, dests, fds


def _finish(bus, tx, step):
    fds = tx[2]
    if step in ("stamp", "all"):
        assert lib.b1_send_fds(ffi.new("int32_t[]", list(fds)), len(fds)) == 0
        assert lib.b1_tx_stamp(bus.base(), tx[0]) == 0
        lib.b1_send_fds(ffi.NULL, 0)
    if step in ("commit", "all"):
        assert lib.b1_tx_commit(bus.base(), tx[0], 0) == 0


def _eof(rd, timeout=5.0):
    ready, _, _ = select.select([rd], [], [], timeout)
    return bool(ready) and os.read(rd, 8) == b""


@pytest.mark.parametrize("stamped", [False, True], ids=["stamped-after", "stamped-before"])
def test_a_message_in_flight_at_the_reset_is_dropped(bus, stamped):
    a, c = bus.peer(), bus.peer()
    to_a = a.transfer(a.create_node(), c)
    carried = c.create_node()
    rd, wr = os.pipe()
    tx = _staged(bus, c, to_a, b"in flight", fds=(wr,), handles=(carried,))
    os.close(wr)
    if stamped:
        _finish(bus, tx, "stamp")
    assert a.query().queued_messages == 1 and a.query().n_fds == 1
    a.reset()
    assert a.query().queued_messages == 0 and a.query().n_fds == 0
    _finish(bus, tx, "commit" if stamped else "all")
    assert drain(a) == []
    # a's node destroyed; the handle the message carried released with it
    assert sorted((m.type, m.destination) for m in drain(c)) == [(MessageType.NODE_DESTROY, to_a),
                                                                (MessageType.NODE_RELEASE, carried)]
    to_a2 = a.transfer(a.create_node(), c)
    c.send([to_a2], b"after the reset")  # and the peer receives what is sent after it
    assert [m.payload for m in drain(a)] == [b"after the reset"]
    lib.b1_fds_sweep(bus.base(), a._slot, a._id)
    assert _eof(rd)
    os.close(rd)
    assert bus.check() == []


def test_a_message_staged_after_the_reset_arrives(bus):
    a, c = bus.peer(), bus.peer()
    to_a = a.transfer(a.create_node(), c)
    before = _staged(bus, c, to_a, b"before")
    a.reset()
    to_a = a.transfer(a.create_node(), c)
    after = _staged(bus, c, to_a, b"after")
    _finish(bus, after, "all")
    _finish(bus, before, "all")
    assert [m.payload for m in drain(a)] == [b"after"]
    assert bus.check() == []


@pytest.mark.timeout(60)
def test_a_sender_killed_between_stamp_and_commit_then_a_reset(monkeypatch):
    """The sender dies after its stamp (the kill point `stamp`); the receiver resets; gc
    would roll the message forward, but it was in flight at the reset: dropped, its
    descriptor closed."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")  # the gc below reaps the sender
    bus = bus1py.Bus.create(max_peers=8, max_nodes=64, max_handles=256, pool_size=1 << 20)
    try:
        a, c = bus.peer(), bus.peer()
        to_a = a.transfer(a.create_node(), c)
        rd, wr = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child dies between its stamp and its commit
            lib.b1_kill_at(lib.B1_KILL_STAMP, 0)
            c.send([to_a], b"stamped, never committed", fds=(wr,))
            os._exit(3)
        os.close(wr)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status), status
        assert a.query().queued_entries == 1  # its block
        a.reset()
        bus.gc()
        assert drain(a) == [] and a.query().queued_entries == 0 and a.query().n_fds == 0
        lib.b1_fds_sweep(bus.base(), a._slot, a._id)
        assert _eof(rd)
        os.close(rd)
        assert bus.check() == []
    finally:
        bus.close()
        bus.unlink()


class ResetInFlight(RuleBasedStateMachine):
    """Senders 0 and 1 send to r step by step, r resets and receives at any point."""

    def __init__(self):
        super().__init__()
        self.bus = bus1py.Bus.create(max_peers=4, max_nodes=64, max_handles=256, pool_size=1 << 20,
                                     spin_ns=0, quota_fds=64)
        self.r, self.senders = self.bus.peer(), [self.bus.peer(), self.bus.peer()]
        self.resets = 0
        self._node()
        self.txs = []  # [mid, sender, epoch, step, tx, (rd, wr)]
        self.got, self.last_key, self.mids = {}, None, 0

    def _node(self):
        node = self.r.create_node()
        self.to_r = [self.r.transfer(node, s) for s in self.senders]

    def teardown(self):
        try:
            self.finish()
        finally:
            for t in self.txs:
                for fd in t[5]:
                    if fd is not None:
                        os.close(fd)
            self.bus.close()
            self.bus.unlink()

    def _stamp(self, t):
        assert lib.b1_send_fds(ffi.new("int32_t[]", [t[5][1]]), 1) == 0
        assert lib.b1_tx_stamp(self.bus.base(), t[4][0]) == 0
        lib.b1_send_fds(ffi.NULL, 0)
        os.close(t[5][1])  # in flight now: the store holds it
        t[5][1] = None
        t[3] = "stamped"

    def _pick(self, choice, step):
        open_ = [t for t in self.txs if t[3] == step]
        return open_[choice % len(open_)] if open_ else None

    @rule(sender=st.integers(0, 1))
    def prepare(self, sender):
        if sum(t[3] != "done" for t in self.txs) >= 6:
            return
        self.mids += 1
        rd, wr = os.pipe()
        tx = ffi.new("struct b1_tx *")
        dests = ffi.new("struct b1_dest[]", 1)
        tx.dests = dests
        assert lib.b1_send_fds(ffi.new("int32_t[]", [wr]), 1) == 0
        payload = b"%d" % self.mids
        assert lib.b1_tx_prepare(self.bus.base(), tx, self.senders[sender]._slot, self.senders[sender].id,
                                 ffi.new("uint64_t[]", [self.to_r[sender]]), 1, payload, len(payload),
                                 ffi.NULL, 0, 0) == 0
        lib.b1_send_fds(ffi.NULL, 0)
        self.txs.append([self.mids, sender, self.resets, "prepared", (tx, dests), [rd, wr]])

    @rule(choice=st.integers(0, 99))
    def stage(self, choice):
        t = self._pick(choice, "prepared")
        if t:
            assert lib.b1_tx_stage(self.bus.base(), t[4][0], 0) == 0
            t[3] = "staged"

    @rule(choice=st.integers(0, 99))
    def stamp(self, choice):
        t = self._pick(choice, "staged")
        if t:
            self._stamp(t)

    @rule(choice=st.integers(0, 99))
    def commit(self, choice):
        t = self._pick(choice, "stamped")
        if t:
            assert lib.b1_tx_commit(self.bus.base(), t[4][0], 0) == 0
            t[3] = "done"

    @rule()
    def reset(self):
        self.r.reset()
        self.resets += 1
        self.last_key = None
        self._node()

    @rule()
    def recv(self):
        try:
            m = self.r.recv(0)
        except BlockingIOError:
            return
        mid = int(m.payload)
        t = next(t for t in self.txs if t[0] == mid)
        assert t[2] == self.resets, f"message {mid} of before reset {t[2]} received after reset {self.resets}"
        assert mid not in self.got and t[3] == "done"
        assert len(m.fds) == 1 and os.fstat(m.fds[0]).st_ino == os.fstat(t[5][0]).st_ino
        os.close(m.fds[0])
        assert self.last_key is None or m.stamp > self.last_key
        self.got[mid], self.last_key = self.resets, m.stamp

    def finish(self):
        for step in ("prepared", "staged", "stamped"):
            for t in [t for t in self.txs if t[3] == step]:
                if t[3] == "prepared":
                    assert lib.b1_tx_stage(self.bus.base(), t[4][0], 0) == 0
                    t[3] = "staged"
                if t[3] == "staged":
                    self._stamp(t)
                assert lib.b1_tx_commit(self.bus.base(), t[4][0], 0) == 0
                t[3] = "done"
        while True:
            try:
                self.recv_one_more()
            except BlockingIOError:
                break
        live = {t[0] for t in self.txs if t[2] == self.resets}
        assert set(self.got) >= live and all(self.got[m] == self.resets for m in live)
        assert self.r.query().n_fds == 0 and self.r.query().queued_messages == 0
        lib.b1_fds_sweep(self.bus.base(), self.r._slot, self.r._id)
        for t in self.txs:  # every descriptor received and closed, or dropped and closed
            assert _eof(t[5][0], timeout=1), f"message {t[0]}'s descriptor is still in flight"
            os.close(t[5][0])
            t[5][0] = None
        assert self.bus.check() == []

    def recv_one_more(self):
        before = len(self.got)
        self.recv()
        if len(self.got) == before:
            raise BlockingIOError


ResetInFlight.TestCase.settings = settings(max_examples=60, stateful_step_count=30, derandomize=True,
                                           deadline=None, suppress_health_check=list(HealthCheck))
test_reset_in_flight_model = ResetInFlight.TestCase


def test_destroy_release_drops_one_reference(bus):
    a = bus.peer()
    node = a.create_node()
    assert a.transfer(node, a) == node  # the owner's handle, carried back twice
    assert a.transfer(node, a) == node
    a.destroy(node, release=True)  # three references, one dropped
    a.release(node)
    a.release(node)
    with pytest.raises(OSError) as e:
        a.release(node)
    assert e.value.errno == errno.ENXIO
    assert [m.type for m in drain(a)] == [MessageType.NODE_DESTROY]
    assert bus.check() == []
