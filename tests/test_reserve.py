"""Zero-copy send (`Peer.reserve`, bus1py/reserve.py): what a reservation delivers, what it
holds until it ends, that it ends once, and that nothing outlives it -- an abort, a failed
commit, a collected reservation and a process that died holding one all give the record
back.  Ordering against the model: tests/test_ordering_model.py (reserve, end_reserved)."""
from __future__ import annotations

import errno
import gc
import io
import os
import pickle

import pytest

import bus1py


@pytest.fixture
def pair(make_bus):
    bus = make_bus(spin_ns=0, max_payload=1 << 16, pool_size=4 << 20)
    a, b = bus.peer(), bus.peer()
    return bus, a, b, b.transfer(b.create_node(), a)


def _held(bus, *peers):
    info = bus.info()
    return (info["pool_used"], info["entries_in_use"], info["handles"]) + tuple(
        (p.query().queued_messages, p.query().held_handles) for p in peers)


def test_commit_delivers_what_was_written_in_place(pair):
    bus, a, b, h = pair
    data = os.urandom(5000)
    r = a.reserve(h, len(data))
    assert r.payload.readonly is False and len(r.payload) == len(data)
    assert io.BytesIO(data).readinto(r.payload) == len(data)  # a producer filling it in place
    with pytest.raises(BlockingIOError):
        b.recv(0)  # nothing is visible before the commit
    stamp = r.commit()
    assert stamp == r.stamp and stamp[1] == a.id
    m = b.recv(0)
    assert m.payload == data and m.stamp == stamp and m.handles == ()


def test_a_multicast_with_handles_reaches_every_destination(make_bus):
    bus = make_bus(spin_ns=0)
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    hb, hc = b.transfer(b.create_node(), a), c.transfer(c.create_node(), a)
    carried = a.create_node()
    with a.reserve([hb, hc], 3, [carried]) as r:
        r.payload[:] = b"abc"
    got = [b.recv(0), c.recv(0)]
    assert [m.payload for m in got] == [b"abc", b"abc"] and all(len(m.handles) == 1 for m in got)
    assert got[0].stamp == got[1].stamp == r.stamp


def test_the_order_is_taken_at_the_commit(pair):
    bus, a, b, h = pair
    r = a.reserve(h, 1)
    a.send(h, b"sent meanwhile")
    r.payload[:] = b"R"
    r.commit()
    assert [m.payload for m in b.recv_many(5, 0)] == [b"sent meanwhile", b"R"]


def test_abort_gives_everything_back(pair):
    bus, a, b, h = pair
    carried = a.create_node()
    before = _held(bus, a, b)
    r = a.reserve(h, 1000)
    assert _held(bus, a, b) != before
    r.abort()
    assert _held(bus, a, b) == before
    # the receiver's handle made for the carried one goes again: its owner hears of it, as
    # after an aborted Transaction
    r = a.reserve(h, 1000, [carried])
    r.abort()
    assert a.recv(0).type == bus1py.MessageType.NODE_RELEASE
    assert _held(bus, a, b) == before
    with pytest.raises(BlockingIOError):
        b.recv(0)


def test_a_reservation_ends_once_and_its_view_with_it(pair):
    bus, a, b, h = pair
    r = a.reserve(h, 4)
    view = r.payload
    r.payload[:] = b"once"
    r.commit()
    for use in (lambda: bytes(view), lambda: view.__setitem__(0, 1), lambda: r.payload[0]):
        with pytest.raises(ValueError):
            use()
    for end in (r.commit, r.abort):
        with pytest.raises(ValueError, match="already committed"):
            end()
    r2 = a.reserve(h, 4)
    r2.abort()
    with pytest.raises(ValueError, match="already aborted"):
        r2.commit()
    assert [m.payload for m in b.recv_many(5, 0)] == [b"once"]


def test_a_block_that_raises_aborts(pair):
    bus, a, b, h = pair
    before = _held(bus, a, b)
    with pytest.raises(RuntimeError):
        with a.reserve(h, 10) as r:
            r.payload[:5] = b"half "
            raise RuntimeError("the producer failed")
    assert _held(bus, a, b) == before
    with pytest.raises(BlockingIOError):
        b.recv(0)


def test_an_exported_view_refuses_the_commit_and_changes_nothing(pair):
    bus, a, b, h = pair
    r = a.reserve(h, 8)
    export = pickle.PickleBuffer(r.payload)  # as numpy.frombuffer would hold it
    with pytest.raises(BufferError, match="exported"):
        r.commit()
    with pytest.raises(BlockingIOError):
        b.recv(0)
    memoryview(export)[:] = b"exported"
    export.release()
    r.commit()
    assert b.recv(0).payload == b"exported"


def test_a_collected_reservation_is_aborted(pair):
    bus, a, b, h = pair
    before = _held(bus, a, b)
    a.reserve(h, 2000)
    gc.collect()
    assert _held(bus, a, b) == before


def test_refusals_take_nothing(make_bus):
    bus = make_bus(spin_ns=0, max_payload=1024, quota_messages=1)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    before = _held(bus, a, b)
    for call, code in ((lambda: a.reserve(h, 1025), errno.EMSGSIZE), (lambda: a.reserve(h + 99, 1), errno.ENXIO)):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == code
    for bad in (lambda: a.reserve(-1, 1), lambda: a.reserve(h, -1), lambda: a.reserve(h, 1.0)):
        with pytest.raises((TypeError, ValueError)):
            bad()
    assert _held(bus, a, b) == before
    # a commit refused by the receiver's quota sends nothing, ends the reservation, holds nothing
    a.send(h, b"fills the quota")
    before = _held(bus, a, b)
    r = a.reserve(h, 3)
    r.payload[:] = b"new"
    with pytest.raises(OSError) as e:
        r.commit()
    assert e.value.errno == errno.EDQUOT and _held(bus, a, b) == before
    with pytest.raises(ValueError, match="already aborted"):
        r.abort()


@pytest.mark.timeout(30)
def test_a_forked_child_neither_ends_nor_drops_the_parents_reservation(pair):
    bus, a, b, h = pair
    r = a.reserve(h, 6)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for end in (r.commit, r.abort):
                try:
                    end()
                except ValueError:
                    continue
                os._exit(2)
            del r
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    r.payload[:] = b"parent"
    r.commit()
    assert b.recv(0).payload == b"parent"


@pytest.mark.timeout(60)
def test_across_processes_and_a_holder_that_dies(make_bus):
    bus = make_bus(spin_ns=0, max_payload=1 << 16, pool_size=16 << 20)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    before = _held(bus, b)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for i in range(50):
                with a.reserve(h, 1 << 16) as r:
                    r.payload[:] = bytes([i]) * (1 << 16)
            a.reserve(h, 1 << 16)  # held when the process dies: the reaper's to free
            code = 0
        finally:
            os.kill(os.getpid(), 9) if code == 0 else os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    got = b.recv_many(100, 5, copy=False)
    assert [bytes(m.payload) for m in got] == [bytes([i]) * (1 << 16) for i in range(50)]
    for m in got:
        m.release()
    bus.gc()
    assert _held(bus, b) == before


def test_an_array_of_the_payload_refuses_the_commit_until_dropped(pair):
    np = pytest.importorskip("numpy")
    bus, a, b, h = pair
    r = a.reserve(h, 8)
    arr = np.frombuffer(r.payload, dtype=np.uint8)
    arr[:] = np.frombuffer(b"numpy wr", dtype=np.uint8)
    with pytest.raises(BufferError, match="exported"):
        r.commit()
    with pytest.raises(BlockingIOError):
        b.recv(0)
    del arr
    r.commit()
    assert b.recv(0).payload == b"numpy wr"
