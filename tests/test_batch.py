"""The batch calls (Peer.send_many, Peer.recv_many) and zero-copy receive (copy=False) in
one process: what they return, where they stop, what they leave charged, and that bad
input changes nothing.  Ordering against the model is tests/test_ordering_model.py; across
processes, tests/test_multiprocess.py and test_zero_copy_across_processes below."""
from __future__ import annotations

import errno
import gc
import multiprocessing as mp
import os
import pickle

import pytest

import bus1py
from bus1py._b1 import lib


@pytest.fixture
def pair(make_bus):
    """(bus, sender, receiver, the sender's handle to the receiver's node)."""
    bus = make_bus(spin_ns=0, max_payload=1 << 16, pool_size=4 << 20)
    a, b = bus.peer(), bus.peer()
    return bus, a, b, b.transfer(b.create_node(), a)


def test_send_many_is_a_loop_of_sends(pair):
    bus, a, b, h = pair
    before = a.send(h, b"first")
    assert a.send_many([h], [b"m%d" % i for i in range(50)]) == 50
    after = a.send(h, b"last")
    msgs = b.recv_many(100, timeout=0)
    assert [m.payload for m in msgs] == [b"first"] + [b"m%d" % i for i in range(50)] + [b"last"]
    stamps = [m.stamp for m in msgs]
    assert stamps[0] == before and stamps[-1] == after
    assert all(x[0] < y[0] for x, y in zip(stamps, stamps[1:])), "each its own, rising stamp"
    assert [s[2] for s in stamps] == list(range(before[2], after[2] + 1)), "one transaction each"
    assert a.query().sent == 52 and b.query().received == 52


def test_send_many_multicast_with_handles_and_any_buffers(pair):
    bus, a, b, h = pair
    c = bus.peer()
    hc = c.transfer(c.create_node(), a)
    carried = a.create_node()
    payloads = [b"x", bytearray(b"yy"), memoryview(b"zzz"), memoryview(b"\1\0\2\0").cast("H")]
    assert a.send_many((h, hc), payloads, handles=[carried]) == 4
    for p in (b, c):
        msgs = p.recv_many(10, timeout=0)
        assert [m.payload for m in msgs] == [b"x", b"yy", b"zzz", b"\1\0\2\0"]
        assert len({m.handles for m in msgs}) == 1 and msgs[0].handles[0] != bus1py.HANDLE_INVALID


def test_send_many_stops_at_the_first_failure(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer(quota_messages=9)  # a sender alone: 5 of 9 (fair shares)
    h = b.transfer(b.create_node(), a)
    assert a.send_many(h, [b"%d" % i for i in range(8)]) == 5  # the sixth meets EDQUOT
    with pytest.raises(OSError) as e:  # none fits: the failure itself
        a.send_many(h, [b"more"])
    assert e.value.errno == errno.EDQUOT
    assert [m.payload for m in b.recv_many(10, timeout=0)] == [b"0", b"1", b"2", b"3", b"4"]
    assert a.send_many(h, [b"x" * 10, b"y" * (bus.limits.max_payload + 1), b"z"]) == 1
    with pytest.raises(OSError) as e:
        a.send_many(h, [b"y" * (bus.limits.max_payload + 1)])
    assert e.value.errno == errno.EMSGSIZE


def test_unicast_batches_longer_than_one_lock_hold(make_bus):
    """Unicasts go through C 32 at a time, each step one lock hold for the 32: across the
    boundary they stay one transaction each, in order, and a quota met in the second
    hold keeps exactly the messages before it."""
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer(quota_messages=89)  # a sender alone: 45 of 89 (fair shares)
    h = b.transfer(b.create_node(), a)
    first = a.send(h, b"first")
    assert a.send_many(h, [b"%d" % i for i in range(70)]) == 44
    msgs = b.recv_many(100, timeout=0)
    assert [m.payload for m in msgs] == [b"first"] + [b"%d" % i for i in range(44)]
    stamps = [m.stamp for m in msgs]
    assert all(x[0] < y[0] for x, y in zip(stamps, stamps[1:]))
    assert [s[2] for s in stamps] == list(range(first[2], first[2] + 45))
    assert a.query().sent == 45 and bus.info()["entries_in_use"] == 0


def test_unicast_batch_to_a_gone_peer_is_a_loop_of_sends(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    b.disconnect()
    before = bus.info()
    assert a.send_many(h, [b"x"] * 40) == 40  # dropped as send drops them: not an error
    assert a.query().sent == 40
    after = bus.info()
    assert (after["entries_in_use"], after["pool_used"]) == (before["entries_in_use"], before["pool_used"])


@pytest.mark.parametrize("call,exc", [
    (lambda a, h: a.send_many(h, b"one payload"), TypeError),
    (lambda a, h: a.send_many(h, ["text"]), TypeError),
    (lambda a, h: a.send_many(h, [b"ok", 3]), TypeError),
    (lambda a, h: a.send_many([h, "x"], [b"ok"]), TypeError),
    (lambda a, h: a.send_many([], [b"ok"]), OSError),
    (lambda a, h: a.send_many([h + 1000], [b"ok"]), OSError),
    (lambda a, h: a.recv_many(0), ValueError),
    (lambda a, h: a.recv_many(2.0), ValueError),
    (lambda a, h: a.recv_many(1, timeout=-1), ValueError),
    (lambda a, h: a.recv_many(1, timeout="1"), TypeError),
])
def test_bad_batch_arguments_change_nothing(pair, call, exc):
    bus, a, b, h = pair
    a.send(h, b"queued")
    before = (a.query(), b.query(), bus.info()["pool_used"])
    with pytest.raises(exc):
        call(a, h)
    assert (a.query(), b.query(), bus.info()["pool_used"]) == before
    assert a.send_many(h, []) == 0


def test_recv_many_waits_only_for_the_first(pair):
    bus, a, b, h = pair
    with pytest.raises(BlockingIOError):
        b.recv_many(5, timeout=0)
    with pytest.raises(TimeoutError):
        b.recv_many(5, timeout=0.05)
    a.send(h, b"one")
    assert [m.payload for m in b.recv_many(5)] == [b"one"]  # does not wait for five


def test_recv_many_stops_where_copies_would_overflow_the_buffer(pair):
    bus, a, b, h = pair
    big = bus.limits.max_payload // 3 + 1
    a.send_many(h, [bytes([i]) * big for i in range(5)])
    sizes = [len(b.recv_many(5, timeout=0)) for _ in range(3)]
    assert sizes == [2, 2, 1]
    a.send_many(h, [bytes([i]) * big for i in range(5)])
    assert len(b.recv_many(5, timeout=0, copy=False)) == 5  # slices take no buffer


def test_recv_many_skips_messages_to_destroyed_nodes(pair):
    bus, a, b, h = pair
    n2 = b.create_node()
    h2 = b.transfer(n2, a)
    a.send_many(h2, [b"before1", b"before2"])
    b.destroy(n2)
    a.send_many(h2, [b"after1", b"after2"])  # ordered after the destruction: dropped
    a.send(h, b"kept")
    got = [(m.type, m.payload) for m in b.recv_many(10, timeout=0)]
    data, destroy = bus1py.MessageType.DATA, bus1py.MessageType.NODE_DESTROY
    assert got == [(data, b"before1"), (data, b"before2"), (destroy, b""), (data, b"kept")]
    assert b.query().queued_entries == 0


# ---- zero-copy ----

def test_zero_copy_view_until_release(pair):
    bus, a, b, h = pair
    a.send(h, b"hello pool")
    m = b.recv(copy=False)
    view = m.payload
    assert isinstance(view, memoryview) and view.readonly and bytes(view) == b"hello pool"
    with pytest.raises(TypeError):
        view[0] = 0
    q = b.query()
    assert (q.queued_messages, q.queued_bytes) == (1, 10), "charged until released"
    used = bus.info()["pool_used"]
    m.release()
    m.release()  # idempotent
    with pytest.raises(ValueError, match="released"):
        bytes(view)
    with pytest.raises(ValueError):
        view[0]
    q = b.query()
    assert (q.queued_messages, q.queued_bytes) == (0, 0)
    assert bus.info()["pool_used"] < used
    # the second zero-copy recv takes the short path the first set up: same errors, same views
    with pytest.raises(BlockingIOError):
        b.recv(0, copy=False)
    with pytest.raises(TimeoutError):
        b.recv(0.01, copy=False)
    a.send(h, b"again")
    m = b.recv(1.0, copy=False)
    assert bytes(m.payload) == b"again" and b.query().queued_messages == 1
    m.release()
    assert b.query().queued_messages == 0


def test_zero_copy_quota_blocks_senders_until_release(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer(quota_messages=3)  # a sender alone: 2 of 3 (fair shares)
    h = b.transfer(b.create_node(), a)
    assert a.send_many(h, [b"1", b"2"]) == 2
    held = b.recv_many(2, copy=False)
    with pytest.raises(OSError) as e:
        a.send(h, b"3")
    assert e.value.errno == errno.EDQUOT
    held[0].release()
    a.send(h, b"3")
    del held
    gc.collect()
    a.send(h, b"4")
    assert [m.payload for m in b.recv_many(5, timeout=0)] == [b"3", b"4"]


def test_garbage_collection_releases(pair):
    bus, a, b, h = pair
    base = bus.info()["pool_used"]
    a.send_many(h, [b"a" * 100] * 10)
    views = [m.payload for m in b.recv_many(10, copy=False)]  # the messages themselves are dropped
    gc.collect()
    assert bus.info()["pool_used"] == base and b.query().queued_messages == 0
    with pytest.raises(ValueError):
        bytes(views[0])


def test_exported_view_refuses_release_and_keeps_its_bytes(pair):
    bus, a, b, h = pair
    a.send(h, b"exported")
    m = b.recv(copy=False)
    export = pickle.PickleBuffer(m.payload)  # holds a buffer of the view, as numpy.frombuffer would
    with pytest.raises(BufferError, match="exported"):
        m.release()
    assert b.query().queued_messages == 1 and bytes(m.payload) == b"exported"
    export.release()
    m.release()
    assert b.query().queued_messages == 0


def test_disconnect_frees_the_slices_still_held(pair):
    bus, a, b, h = pair
    base = bus.info()
    a.send_many(h, [b"s" * 1000] * 5)
    held = b.recv_many(5, copy=False)
    assert bus.info()["pool_used"] > base["pool_used"]
    b.disconnect()  # as the reaper does when the holding processes died
    assert a.recv(timeout=0).type == bus1py.MessageType.NODE_DESTROY
    info = bus.info()
    assert (info["pool_used"], info["entries_in_use"]) == (base["pool_used"], base["entries_in_use"])
    for m in held:
        m.release()  # nothing left to give back: harmless
    assert bus.info()["pool_used"] == base["pool_used"]


def test_a_token_that_is_no_held_slice_is_refused(pair):
    bus, a, b, h = pair
    a.send(h, b"x")
    m = b.recv(copy=False)
    token = m._slice.token
    before = (b.query(), bus.info())
    for bad in (token + 1, 0, 1 << 40):
        assert lib.b1_slice_release(bus.base(), b._slot, b._id, bad) == -errno.EINVAL
    assert (b.query(), bus.info()) == before
    m.release()
    assert lib.b1_slice_release(bus.base(), b._slot, b._id, token) == -errno.EINVAL  # twice: no


@pytest.mark.timeout(30)
def test_a_forked_child_does_not_give_back_the_parents_slice(pair):
    bus, a, b, h = pair
    a.send(h, b"parent's")
    m = b.recv(copy=False)
    pid = os.fork()
    if pid == 0:  # the child drops its copy of the message and leaves
        try:
            del m
            gc.collect()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert b.query().queued_messages == 1 and bytes(m.payload) == b"parent's"
    m.release()
    assert b.query().queued_messages == 0


def test_a_4k_payload_fits_a_4k_record(pair):
    bus, a, b, h = pair
    base = bus.info()["pool_used"]
    a.send(h, b"\0" * 4096)
    assert bus.info()["pool_used"] - base == 4096 + 64
    b.recv()
    a.send(h, b"\0" * 4200)  # past the room of the class: header 32 B + payload
    assert bus.info()["pool_used"] - base == 8192 + 64
    b.recv()


def test_closing_the_bus_with_views_alive_does_not_unmap_them(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    a.send(h, b"still mapped")
    m = b.recv(copy=False)
    piece = m.payload[6:]
    bus.close()
    assert bytes(piece) == b"mapped"  # no fault: every view keeps the mapping
    with pytest.raises(BufferError):  # the slice still reads the record
        m.release()
    del piece
    m.release()  # the bus is gone here: only the view goes
    with pytest.raises(ValueError):
        bytes(m.payload)


def _zero_copy_child(peer, n, size):
    total, held_max = 0, 0
    got = 0
    while got < n:
        msgs = peer.recv_many(8, timeout=30, copy=False)
        held_max = max(held_max, peer.query().queued_messages)
        for m in msgs:
            assert bytes(m.payload[:4]) == got.to_bytes(4, "little") and len(m.payload) == size
            total += m.payload[-1]
            got += 1
            m.release()
    return total, held_max


@pytest.mark.timeout(60)
def test_zero_copy_across_processes(make_bus):
    bus = make_bus(max_payload=1 << 16, pool_size=8 << 20)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    n, size = 400, 1 << 16
    payloads = [i.to_bytes(4, "little") + bytes(size - 5) + bytes([i & 255]) for i in range(n)]
    with mp.get_context("fork").Pool(1) as pool:
        res = pool.apply_async(_zero_copy_child, (b, n, size))
        sent = 0
        while sent < n:
            try:
                sent += a.send_many(h, payloads[sent:sent + 16])
            except OSError as e:
                if e.errno not in (errno.EXFULL, errno.EDQUOT):
                    raise
                os.sched_yield()
        total, held_max = res.get(timeout=45)
    assert total == sum(i & 255 for i in range(n)) and held_max >= 1
    assert b.query().queued_messages == 0 and bus.info()["pool_used"] == 0


def test_a_message_collected_while_its_view_is_exported_keeps_the_record(pair):
    bus, a, b, h = pair
    a.send(h, b"still read")
    m = b.recv(copy=False)
    export = pickle.PickleBuffer(m.payload)
    with pytest.warns(ResourceWarning, match="still exported"):
        del m
        gc.collect()
    assert b.query().queued_messages == 1 and bytes(memoryview(export)) == b"still read"
    export.release()


def test_release_after_the_bus_is_closed_only_drops_the_view(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    a.send(h, b"x")
    m = b.recv(copy=False)
    bus.close()
    m.release()
    with pytest.raises(ValueError):
        bytes(m.payload)


def test_an_array_or_slice_of_the_payload_holds_the_record(pair):
    np = pytest.importorskip("numpy")
    bus, a, b, h = pair
    a.send(h, b"0123456789abcdef")
    m = b.recv(copy=False)
    for reader in (lambda: np.frombuffer(m.payload, dtype=np.uint8), lambda: np.asarray(m.payload),
                   lambda: m.payload[4:8], lambda: memoryview(m.payload)):
        kept = reader()
        with pytest.raises(BufferError, match="exported"):
            m.release()
        assert b.query().queued_messages == 1 and bytes(m.payload) == b"0123456789abcdef"
        assert bytes(kept[:1]) in (b"0", b"4")
        del kept
    m.release()
    assert b.query().queued_messages == 0


def _batch_sender(peer, dests, tag, rounds):
    for r in range(rounds):
        ds = dests[r % len(dests):] + dests[:r % len(dests)]  # a changing order and length
        ds = ds[:1 + r % len(ds)]
        done = 0
        payloads = [b"%d %d %d" % (tag, r, i) for i in range(1 + r % 70)]
        while done < len(payloads):
            try:
                done += peer.send_many(ds, payloads[done:])
            except OSError as e:
                if e.errno not in (errno.EXFULL, errno.EDQUOT):
                    raise
                os.sched_yield()


def test_multicast_batches_of_processes_sharing_a_sender_keep_every_queue_in_order(make_bus):
    """Batches whose commits hand each block its successor (tx.c) next to those that cannot:
    three processes send from one peer (their sequence numbers interleave), to nodes of
    which two share a peer, while another peer sends to the same queues.  Every queue stays
    a treap in key order, and every receiver gets each process's messages to each of its nodes in the order sent."""
    bus = make_bus(spin_ns=0, quota_messages=4096)
    a, c = bus.peer(), bus.peer()
    rx = [bus.peer() for _ in range(3)]
    ha = [r.transfer(r.create_node(), a) for r in rx] + [rx[0].transfer(rx[0].create_node(), a)]
    hc = [r.transfer(r.create_node(), c) for r in rx]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_batch_sender, args=(a, ha, tag, 60)) for tag in range(3)]
    procs.append(ctx.Process(target=_batch_sender, args=(c, hc, 3, 60)))
    for p in procs:
        p.start()
    got = {i: [] for i in range(len(rx))}

    def drain():
        for i, r in enumerate(rx):
            try:
                got[i] += [(m.destination, m.payload) for m in r.recv_many(64, timeout=0)]
            except BlockingIOError:
                pass
    while any(p.is_alive() for p in procs):
        drain()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    drain()
    assert bus.check() == []
    for copies in got.values():
        seen = {}
        for node, p in copies:
            tag, r, i = map(int, p.split())
            assert (r, i) > seen.get((tag, node), (-1, -1)), "a process's messages to a node in the order sent"
            seen[(tag, node)] = (r, i)
    assert sum(map(len, got.values())) > 0
