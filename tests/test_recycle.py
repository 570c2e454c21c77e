"""Slots are recycled: a bus that runs for ever.

Invariants checked:
  - A peer slot is reused once its peer is disconnected and nothing names the slot; a node
    slot once the node is destroyed and its last handle gone.  A bus with `max_peers=16`
    serves any number of short-lived peers, from several processes at once, and a bus
    with a small node table any number of node lifecycles.
  - Ids are never reused: a stale peer reads ESHUTDOWN (BrokenPipeError), a stale handle
    ENXIO, never the object that took its slot, and the new object is unaffected.
  - When everything is gone, `bus.info()` counts zero peers, nodes, handles, entries and
    pool bytes in use.

The counts here are scaled to keep `make test` fast; the full counts run
with BUS1PY_LONG=1 (marked slow; commands and figures in docs/RELIABILITY.md).
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import pickle
import time

import pytest

import bus1py
from bus1py import HANDLE_INVALID, MessageType

pytestmark = pytest.mark.usefixtures("no_leaks")

FORK = mp.get_context("fork")
DATA, DESTROY, RELEASE = MessageType.DATA, MessageType.NODE_DESTROY, MessageType.NODE_RELEASE
long_run = pytest.mark.skipif(os.environ.get("BUS1PY_LONG") != "1",
                              reason="full-count run: set BUS1PY_LONG=1 (docs/RELIABILITY.md)")


def zero_use(info, peers=0, nodes=0, handles=0):
    return ({k: info[k] for k in ("peers", "nodes", "handles", "entries_in_use", "pool_used")} ==
            {"peers": peers, "nodes": nodes, "handles": handles, "entries_in_use": 0, "pool_used": 0})


def retrying(call, *codes, deadline=60.0):
    """call(), retried while it fails with one of `codes` (a full table or quota that the
    other side is draining); gives up after `deadline` seconds."""
    end = time.monotonic() + deadline
    while True:
        try:
            return call()
        except OSError as e:
            if e.errno not in codes or time.monotonic() > end:
                raise
            time.sleep(0.0005)


# ---- short-lived peers from several processes ----

def _worker(bus_name, srv, node, me, count, out):
    """`count` short-lived peers, one after the other: each is handed the server's node,
    sends it one message carrying a node of its own, and disconnects."""
    bus = bus1py.Bus.attach(bus_name)
    ids = set()
    try:
        for i in range(count):
            c = retrying(bus.peer, errno.ENOSPC)
            ids.add(c.id)
            h = retrying(lambda: srv.transfer(node, c), errno.EDQUOT)
            mine = c.create_node()
            retrying(lambda: c.send(h, b"%d:%d" % (me, i), [mine]), errno.EDQUOT, errno.EXFULL)
            c.disconnect()
            try:
                c.send(h, b"stale")
                raise AssertionError("a disconnected peer could send")
            except BrokenPipeError:
                pass
        out.put(("ok", me, len(ids)))
    except BaseException as e:  # the parent reports it
        out.put(("error", me, repr(e)))


def run_short_lived_peers(procs, per_proc, max_peers=16):
    total = procs * per_proc
    with bus1py.Bus.create(max_peers=max_peers, spin_ns=0) as bus:
        srv = bus.peer()
        node = srv.create_node()
        out = FORK.Queue()
        kids = [FORK.Process(target=_worker, args=(bus.name, srv, node, k, per_proc, out))
                for k in range(procs)]
        t0 = time.monotonic()
        for k in kids:
            k.start()
        try:
            seen, destroyed, results = set(), 0, []
            deadline = time.monotonic() + 30 + total / 200
            while len(seen) < total or destroyed < total:
                assert time.monotonic() < deadline, f"stuck: {len(seen)} data, {destroyed} destroys"
                try:
                    msg = srv.recv(timeout=1)
                except TimeoutError:
                    assert all(k.is_alive() for k in kids) or not out.empty(), "a worker died"
                    continue
                if msg.type == DATA:
                    assert msg.payload not in seen, f"duplicate {msg.payload!r}"
                    seen.add(msg.payload)
                    (carried,) = msg.handles
                    assert carried != HANDLE_INVALID, "sent before its node's destruction"
                elif msg.type == DESTROY:
                    destroyed += 1
                    srv.release(msg.destination)  # the last name of the gone peer's node
            for k in kids:
                k.join(60)
            elapsed = time.monotonic() - t0
            while not out.empty():
                results.append(out.get())
        finally:
            for k in kids:
                if k.is_alive():
                    k.kill()
                k.join(10)
        assert sorted(r[0] for r in results) == ["ok"] * procs, results
        assert sum(r[2] for r in results) == total, "every peer got an id of its own"
        for msg in iter(lambda: _try_recv(srv), None):
            assert msg.type == RELEASE, msg  # the node's last holder is gone
        assert zero_use(bus.info(), peers=1, nodes=1, handles=1), bus.info()
        assert max(p["id"] for p in bus.peers()) <= total + 1
        assert len(bus.peers()) <= max_peers
        srv.destroy(node, release=True)
        assert srv.recv(timeout=0).type == DESTROY
        srv.disconnect()
        assert zero_use(bus.info()), bus.info()
        return elapsed


def _try_recv(peer):
    try:
        return peer.recv(timeout=0)
    except BlockingIOError:
        return None


@pytest.mark.timeout(120)
def test_short_lived_peers_reuse_sixteen_slots():
    run_short_lived_peers(procs=4, per_proc=500)


@pytest.mark.slow
@long_run
@pytest.mark.timeout(1800)
def test_100k_short_lived_peers():
    elapsed = run_short_lived_peers(procs=4, per_proc=25_000)
    print(f"\n100,000 short-lived peers, 4 processes, max_peers=16: {elapsed:.1f} s")


def test_a_full_peer_table_frees_a_slot_when_its_last_name_goes(make_bus):
    """A gone peer whose node another peer still holds keeps its slot (ENOSPC) until that
    holder lets go; then the slot serves a new peer."""
    bus = make_bus(max_peers=2)
    a, b = bus.peer(), bus.peer()
    kept = a.transfer(a.create_node(), b)
    a.disconnect()
    with pytest.raises(OSError) as e:
        bus.peer()
    assert e.value.errno == errno.ENOSPC
    assert b.recv(timeout=0).type == DESTROY
    b.release(kept)
    c = bus.peer()
    assert c.id not in (a.id, b.id)
    assert zero_use(bus.info(), peers=2)


# ---- node lifecycles ----

def node_lifecycles(bus, cycles):
    """Create, destroy and release nodes in every order the API allows, with a holder,
    handles in flight and NODE_RELEASE; returns the time taken."""
    owner, holder = bus.peer(), bus.peer()
    t0 = time.monotonic()
    for i in range(cycles):
        n = owner.create_node()
        kind = i % 4
        if kind == 0:    # destroy and release at once
            owner.destroy(n, release=True)
            assert owner.recv(timeout=0).type == DESTROY
        elif kind == 1:  # release after reading NODE_DESTROY
            owner.destroy(n)
            assert owner.recv(timeout=0).type == DESTROY
            owner.release(n)
        elif kind == 2:  # a holder, released before the destruction: NODE_RELEASE first
            h = owner.transfer(n, holder)
            holder.send(h, b"x")
            holder.release(h)
            assert [m.type for m in (owner.recv(timeout=0), owner.recv(timeout=0))] == [DATA, RELEASE]
            owner.destroy(n, release=True)
            assert owner.recv(timeout=0).type == DESTROY
        else:            # a handle in flight to the holder, which outlives the owner's handle
            carrier = holder.create_node()
            hc = holder.transfer(carrier, owner)
            owner.send(hc, b"y", [n])
            owner.destroy(n, release=True)
            got = holder.recv(timeout=0)
            assert got.type == DATA and got.handles != (HANDLE_INVALID,)
            assert holder.recv(timeout=0).type == DESTROY
            holder.release(got.handles[0])
            owner.release(hc)
            holder.destroy(carrier, release=True)
            # the carrier's NODE_RELEASE is withdrawn: the carrier was destroyed first
            assert (owner.recv(timeout=0).type, holder.recv(timeout=0).type) == (DESTROY, DESTROY)
    elapsed = time.monotonic() - t0
    assert zero_use(bus.info(), peers=2), bus.info()
    owner.disconnect()
    holder.disconnect()
    assert zero_use(bus.info()), bus.info()
    return elapsed


def test_node_lifecycles_reuse_a_small_table(make_bus):
    bus = make_bus(max_nodes=4, max_handles=8)
    node_lifecycles(bus, 20_000)


@pytest.mark.slow
@long_run
@pytest.mark.timeout(1800)
def test_1m_node_lifecycles(make_bus):
    elapsed = node_lifecycles(make_bus(), 1_000_000)
    print(f"\n1,000,000 node lifecycles, default bus: {elapsed:.1f} s")


# ---- stale ids ----

def _stale_child(blob, conn):
    peer = pickle.loads(blob)
    try:
        peer.recv(timeout=0)
        conn.send("received")
    except OSError as e:
        conn.send(e.errno)


def test_a_stale_peer_never_reaches_the_slots_new_peer(make_bus):
    bus = make_bus(max_peers=2)
    keeper = bus.peer()
    old = bus.peer()
    blob = pickle.dumps(old)
    node = keeper.create_node()
    h_old = keeper.transfer(node, old)
    old.disconnect()
    assert keeper.recv(timeout=0).type == RELEASE
    new = bus.peer()  # the only free slot: old's
    assert new._slot == old._slot and new.id != old.id
    h_new = keeper.transfer(node, new)
    new.send(h_new, b"to keeper")
    own = new.create_node()
    keeper.send(new.transfer(own, keeper), b"queued")  # old must not touch new's queue
    before = new.query()
    calls = {
        "recv": lambda: old.recv(timeout=0),
        "send": lambda: old.send(h_old, b"x"),
        "send new's handle": lambda: old.send(h_new, b"x"),
        "create_node": old.create_node,
        "transfer": lambda: old.transfer(h_new, keeper),
        "release": lambda: old.release(h_new),
        "destroy": lambda: old.destroy(h_new),
        "query": old.query,
        "disconnect": old.disconnect,
        "transaction": lambda: bus1py.Transaction(old, [h_new], b"x"),
    }
    for what, call in calls.items():
        with pytest.raises(BrokenPipeError) as e:
            call()
        assert e.value.errno == errno.ESHUTDOWN, what
    with pytest.raises(OSError) as e:
        keeper.transfer(node, old)
    assert e.value.errno == errno.ESHUTDOWN
    parent, child = FORK.Pipe()
    proc = FORK.Process(target=_stale_child, args=(blob, child))
    proc.start()
    try:
        assert parent.poll(30) and parent.recv() == errno.ESHUTDOWN
    finally:
        proc.join(10)
    assert new.query() == before
    assert keeper.recv(timeout=0).payload == b"to keeper"
    msg = new.recv(timeout=0)
    assert (msg.payload, msg.destination) == (b"queued", own)


def test_stale_handles_never_reach_the_slots_new_node(make_bus):
    bus = make_bus(max_nodes=1, max_handles=4)
    owner, holder = bus.peer(), bus.peer()
    n_old = owner.create_node()
    h_old = owner.transfer(n_old, holder)
    owner.destroy(n_old, release=True)
    assert owner.recv(timeout=0).type == DESTROY
    assert holder.recv(timeout=0).type == DESTROY
    holder.release(h_old)
    n_new = owner.create_node()  # the only node slot: n_old's
    h_new = owner.transfer(n_new, holder)
    assert n_new != n_old and h_new != h_old
    for stale, who in ((n_old, owner), (h_old, holder)):
        for call in (lambda: who.send(stale, b"x"), lambda: who.release(stale),
                     lambda: who.destroy(stale), lambda: who.transfer(stale, owner),
                     lambda: who.send(h_new if who is holder else n_new, b"x", [stale])):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.ENXIO, (stale, e.value)
    assert bus.info()["entries_in_use"] == 0
    holder.send(h_new, b"new")
    msg = owner.recv(timeout=0)
    assert (msg.payload, msg.destination) == (b"new", n_new)
    assert zero_use(bus.info(), peers=2, nodes=1, handles=2)
