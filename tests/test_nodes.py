"""Nodes, handles and lifetimes within one process: bus1's own API and handle tests,
ported, plus the rules of SPEC section 4 that need no second process."""
from __future__ import annotations

import errno

import pytest

import bus1py
from bus1py import HANDLE_INVALID, MessageType

DESTROY, RELEASE, DATA = MessageType.NODE_DESTROY, MessageType.NODE_RELEASE, MessageType.DATA


@pytest.fixture
def bus():
    with bus1py.Bus.create(spin_ns=0) as b:
        yield b


def drain(peer):
    out = []
    while True:
        try:
            out.append(peer.recv(timeout=0))
        except BlockingIOError:
            return out


def errno_of(call):
    with pytest.raises(OSError) as e:
        call()
    return e.value.errno


# ---- bus1's API tests ----

def test_connect_disconnect_twice(bus):
    p = bus.peer()
    p.disconnect()
    assert errno_of(p.disconnect) == errno.ESHUTDOWN
    for call in (p.create_node, p.query, lambda: p.recv(timeout=0)):
        assert errno_of(call) == errno.ESHUTDOWN


def test_transfer_to_self_returns_the_same_id(bus):
    a = bus.peer()
    node = a.create_node()
    assert a.transfer(node, a) == node
    # one more reference: releasing twice leaves the owner's last reference, which is busy
    a.release(node)
    assert errno_of(lambda: a.release(node)) == errno.EBUSY


def test_notify_release_twice_in_a_row(bus):
    a, b = bus.peer(), bus.peer()
    node = a.create_node()
    for _ in range(2):
        h = a.transfer(node, b)
        b.release(h)
        msg = a.recv(timeout=0)
        assert (msg.type, msg.destination) == (RELEASE, node)
        assert drain(a) == []
        assert errno_of(lambda: b.release(h)) == errno.ENXIO  # ids are never reused


def test_notify_destroy_with_own_ids(bus):
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    node = a.create_node()
    hb, hc = a.transfer(node, b), a.transfer(node, c)
    a.destroy(node)
    got = {p: p.recv(timeout=0) for p in (a, b, c)}
    assert {p: (m.type, m.destination) for p, m in got.items()} == {
        a: (DESTROY, node), b: (DESTROY, hb), c: (DESTROY, hc)}
    assert len({m.stamp for m in got.values()}) == 1, "one transaction, one destruction timestamp"


def test_unicast(bus):
    a = bus.peer()
    node = a.create_node()
    a.send([node], b"to myself")
    msg = a.recv(timeout=0)
    assert (msg.type, msg.destination, msg.payload, msg.handles) == (DATA, node, b"to myself", ())


def test_remote_unicast_shows_the_receivers_own_node_id(bus):
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    h = b.transfer(node, a)
    a.send([h], b"hello")
    msg = b.recv(timeout=0)
    assert msg.destination == node and msg.destination != h


def test_multicast_to_two_own_nodes(bus):
    a = bus.peer()
    n1, n2 = a.create_node(), a.create_node()
    a.send([n1, n2], b"twice")
    m1, m2 = a.recv(timeout=0), a.recv(timeout=0)
    assert {m1.destination, m2.destination} == {n1, n2}
    assert m1.stamp == m2.stamp and m1.payload == m2.payload == b"twice"


def test_send_own_node_to_self_then_release(bus):
    a = bus.peer()
    node = a.create_node()
    a.send([node], b"", handles=[node])
    msg = a.recv(timeout=0)
    assert msg.handles == (node,)  # the same id: one handle per (peer, node)
    a.release(node)                # the reference the message carried
    assert errno_of(lambda: a.release(node)) == errno.EBUSY
    assert drain(a) == []          # the owner's own references never raise NODE_RELEASE


def test_multicast_carrying_handles_counts_references(bus):
    """A multicast carrying several handles (some to fresh nodes) to two peers: each
    receiver holds one reference per carried handle, checked by releasing until ENXIO."""
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    nb, nc = b.create_node(), c.create_node()
    hb, hc = b.transfer(nb, a), c.transfer(nc, a)
    old = a.create_node()
    held_b = a.transfer(old, b)  # b already holds a handle to `old`
    fresh1, fresh2 = a.create_node(), a.create_node()
    a.send([hb, hc], b"handles", handles=[old, fresh1, fresh2])
    mb, mc = b.recv(timeout=0), c.recv(timeout=0)
    assert mb.handles[0] == held_b  # an existing handle is reused ...
    assert len(set(mb.handles)) == len(set(mc.handles)) == 3
    for peer, msg, extra in ((b, mb, {held_b: 1}), (c, mc, {})):
        for h in msg.handles:
            for _ in range(1 + extra.get(h, 0)):  # ... and counts one more reference
                peer.release(h)
            assert errno_of(lambda: peer.release(h)) == errno.ENXIO
    # every non-owner reference is gone: one NODE_RELEASE per node
    assert sorted((m.type, m.destination) for m in drain(a)) == sorted(
        (RELEASE, n) for n in (old, fresh1, fresh2))


# ---- destruction ----

def test_destroy_errors_change_nothing(bus):
    a, b = bus.peer(), bus.peer()
    node, other = a.create_node(), b.create_node()
    h_other = b.transfer(other, a)
    before = a.query()
    assert errno_of(lambda: a.destroy(h_other)) == errno.EREMOTE
    assert errno_of(lambda: a.destroy(node, node)) == errno.ENOTUNIQ
    assert errno_of(lambda: a.destroy(12345)) == errno.ENXIO
    assert errno_of(lambda: a.destroy(node, h_other)) == errno.EREMOTE
    assert a.query() == before and drain(a) == [] and drain(b) == []
    a.destroy(node)
    assert errno_of(lambda: a.destroy(node)) == errno.ESTALE
    assert [m.type for m in drain(a)] == [DESTROY]


def test_destroy_several_nodes_in_one_transaction(bus):
    a, b = bus.peer(), bus.peer()
    nodes = [a.create_node() for _ in range(3)]
    hs = [a.transfer(n, b) for n in nodes]
    a.destroy(*nodes)
    ma, mb = drain(a), drain(b)
    assert sorted(m.destination for m in ma) == sorted(nodes)
    assert sorted(m.destination for m in mb) == sorted(hs)
    assert len({m.stamp[:2] for m in ma + mb}) == 1


def test_messages_before_the_destruction_are_delivered_after_dropped(bus):
    a, b = bus.peer(), bus.peer()
    node = a.create_node()
    h = a.transfer(node, b)
    b.send([h], b"before")
    a.destroy(node)
    b.send([h], b"after")          # bus1 gives the sender no error ...
    got = [(m.type, m.payload) for m in drain(a)]
    assert got == [(DATA, b"before"), (DESTROY, b"")]  # ... and drops it at recv
    assert b.recv(timeout=0).type == DESTROY
    # opt-in: a sender that has read NODE_DESTROY for every destination is told
    assert errno_of(lambda: b.send([h], b"x", unreachable_error=True)) == errno.EHOSTUNREACH
    assert drain(a) == []


def test_destroy_with_release_frees_the_owner_handle(bus):
    a = bus.peer()
    node = a.create_node()
    a.destroy(node, release=True)
    assert a.recv(timeout=0).type == DESTROY
    assert errno_of(lambda: a.release(node)) == errno.ENXIO


def test_transfer_of_destroyed_node_is_estale(bus):
    a, b = bus.peer(), bus.peer()
    node = a.create_node()
    a.destroy(node)
    assert errno_of(lambda: a.transfer(node, b)) == errno.ESTALE


# ---- handle passing and the destruction key ----

def test_handle_passed_after_destruction_arrives_invalid(bus):
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    node = a.create_node()
    hb = a.transfer(node, b)
    nc = c.create_node()
    to_c = c.transfer(nc, b)
    a.destroy(node)
    b.send([to_c], b"stale", handles=[hb])
    msg = c.recv(timeout=0)
    assert msg.handles == (HANDLE_INVALID,)
    assert drain(c) == []  # and no NODE_DESTROY for a handle it never got


def test_valid_handle_is_followed_by_its_destroy_notification(bus):
    """A handle carried by a message sent before the destruction arrives valid, and the
    receiver then gets NODE_DESTROY for it -- the gap bus1 leaves open is closed."""
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    node = a.create_node()
    hb = a.transfer(node, b)
    nc = c.create_node()
    to_c = c.transfer(nc, b)
    tx = bus1py.Transaction(b, [to_c], b"carrying", handles=[hb])  # registered at the send
    a.destroy(node)                                               # ... before the destruction
    tx.stage(0), tx.stamp(), tx.commit(0)
    got = drain(c)
    assert [m.type for m in got] == [DATA, DESTROY] or [m.type for m in got] == [DESTROY, DATA]
    data = next(m for m in got if m.type == DATA)
    destroy = next(m for m in got if m.type == DESTROY)
    if got[0] is data:       # the message is ordered before the destruction: valid handle
        assert data.handles == (destroy.destination,)
    else:                    # ordered after it: invalid, and the notification came first
        assert data.handles == (HANDLE_INVALID,)


def test_receiver_that_read_destroy_never_gets_a_valid_handle_again(bus):
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    node = a.create_node()
    hb, hc = a.transfer(node, b), a.transfer(node, c)
    nc = c.create_node()
    to_c = c.transfer(nc, b)
    a.destroy(node)
    assert c.recv(timeout=0).type == DESTROY
    b.send([to_c], b"late", handles=[hb])
    assert c.recv(timeout=0).handles == (HANDLE_INVALID,)
    c.release(hc)


def test_release_is_withdrawn_when_reacquired_before_it_is_read(bus):
    a, b = bus.peer(), bus.peer()
    node = a.create_node()
    h = a.transfer(node, b)
    b.release(h)          # NODE_RELEASE queued ...
    a.transfer(node, b)   # ... and the node re-acquired before the owner reads it
    assert drain(a) == []


def test_in_flight_handle_keeps_the_node_referenced(bus):
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    node = a.create_node()
    hb = a.transfer(node, b)
    nc = c.create_node()
    to_c = c.transfer(nc, b)
    b.send([to_c], b"carry", handles=[hb])
    b.release(hb)          # b's own reference goes; the one in flight to c remains
    assert drain(a) == []
    hc = c.recv(timeout=0).handles[0]
    c.release(hc)          # now the last one
    assert [(m.type, m.destination) for m in drain(a)] == [(RELEASE, node)]


def test_disconnect_destroys_nodes_and_releases_handles(bus):
    a, b, c = bus.peer(), bus.peer(), bus.peer()
    na, nb = a.create_node(), b.create_node()
    h_b_to_a = a.transfer(na, b)
    h_c_to_b = b.transfer(nb, c)
    a.send([a.transfer(na, a)], b"queued for a")  # flushed by the disconnect
    b.disconnect()
    assert [(m.type, m.destination) for m in drain(c)] == [(DESTROY, h_c_to_b)]
    # b held a handle to a's node: gone with b, so a learns its node is unreferenced
    assert [m.type for m in drain(a)] == [DATA, RELEASE]
    c.send([h_c_to_b], b"to the departed")  # dropped, no error
    assert errno_of(lambda: b.send([h_b_to_a], b"x")) == errno.ESHUTDOWN
    assert errno_of(lambda: b.release(h_b_to_a)) == errno.ESHUTDOWN


def test_owner_release_of_last_reference_to_live_node_is_ebusy(bus):
    a = bus.peer()
    node = a.create_node()
    assert errno_of(lambda: a.release(node)) == errno.EBUSY
    assert errno_of(lambda: a.release(node + 1)) == errno.ENXIO


# ---- quotas ----

def test_quotas_are_shown_and_enforced_with_nothing_staged(bus):
    a = bus.peer()
    b = bus.peer(quota_messages=3, quota_bytes=100)  # a alone: 2 of 3 (fair shares)
    c = bus.peer()
    hb = b.transfer(b.create_node(), a)
    hc = c.transfer(c.create_node(), a)
    q = b.query()
    assert (q.quota_messages, q.quota_bytes) == (3, 100)
    a.send([hb], b"1")
    a.send([hb], b"2")
    before_b, before_c, info = b.query(), c.query(), bus.info()
    assert errno_of(lambda: a.send([hc, hb], b"3")) == errno.EDQUOT  # c first: unwound
    assert (b.query(), c.query()) == (before_b, before_c)
    assert bus.info()["entries_in_use"] == info["entries_in_use"]
    a.send([hc], b"others keep working")
    assert b.recv(timeout=0).payload == b"1"
    a.send([hb], b"3")  # room again
    assert errno_of(lambda: a.send([hb], b"x" * 99)) == errno.EDQUOT  # bytes quota
    assert [m.payload for m in drain(b)] == [b"2", b"3"]


def test_handle_quota(bus):
    a = bus.peer()
    b = bus.peer(quota_handles=3)  # a alone holds 2 of 3 (fair shares)
    nodes = [a.create_node() for _ in range(3)]
    a.transfer(nodes[0], b), a.transfer(nodes[1], b)
    assert b.query().held_handles == 2 and b.query().share_of(a.id)[3] == 2
    assert errno_of(lambda: a.transfer(nodes[2], b)) == errno.EDQUOT
    b.create_node()  # its own share: the last one
    assert errno_of(lambda: b.create_node()) == errno.EDQUOT
