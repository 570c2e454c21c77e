"""Fair shares of a receiver's quotas (csrc/bus/queue.h b1_charge_locked, docs/SPEC.md
"Quotas"), held to a model of bus1's rule (ipc/bus1/user.c bus1_user_charge_quota_one):

  - a charger is a sending peer, folded into share (id mod 16);
  - n is the number of shares holding a message, the charger's own counted even when it
    holds none;
  - a charge c of a resource (messages, bytes, descriptors, handles) with quota Q, U in use and s
    held by the charger's share passes when c == 0 or Q - U >= (s + c) * n, and a message
    is charged whole or not at all.

bus1's comment says "after charging, the remaining must not drop below (share + charge) x
users", but its code compares the remaining before the charge
(`bus1_atomic_add_if_ge(remaining, -charge, new_share * users)` adds only when the old
value is at least the bound): bus1py follows the code, as the model does.

The model below is written from that statement, not from the C; Hypothesis drives both
with the same sends and receives and compares every outcome and the shares `query()` shows.
The counters live in the segment: a takeover of the receiver's lock from a killed sender
recounts them from the entries.
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os

import pytest
from hypothesis import given, settings, strategies as st

import bus1py
from bus1py._b1 import lib

from segment import PEER_N_HANDLES, PEER_ROOT, PEER_SHARE_HANDLES, PEER_SHARES, SHARE_SIZE, Segment

SHARES = 16
LIMITS = dict(max_peers=64, max_nodes=64, max_handles=256, max_entries=1024, pool_size=1 << 20,
              max_payload=4096, spin_ns=0)


class Model:
    """bus1's rule over one receiver's quotas of messages and bytes."""

    def __init__(self, quota_messages, quota_bytes):
        self.quota = (quota_messages, quota_bytes)
        self.shares = {}  # share -> [messages, bytes]
        self.queue = []   # (share, len) in the receiver's order

    def send(self, sender_id, length):
        share = sender_id % SHARES
        held = self.shares.get(share, [0, 0])
        n = len(self.shares) + (share not in self.shares)
        used = (sum(s[0] for s in self.shares.values()), sum(s[1] for s in self.shares.values()))
        for quota, u, s, c in zip(self.quota, used, held, (1, length)):
            if c and quota - u < (s + c) * n:
                return False
        self.shares[share] = [held[0] + 1, held[1] + length]
        self.queue.append((share, length))
        return True

    def recv(self):
        share, length = self.queue.pop(0)
        held = self.shares[share]
        held[0] -= 1
        held[1] -= length
        if not held[0]:
            del self.shares[share]

    def shown(self):
        return {k: (m, b, 0) for k, (m, b) in self.shares.items()}


def _world(bus, n_senders, twin=False):
    """(receiver, [(sender, handle)]): with `twin`, one more sender whose id shares the
    first sender's share (peers made in between are disconnected)."""
    r = bus.peer()
    node = r.create_node()
    senders = [bus.peer() for _ in range(n_senders)]
    if twin:
        fillers = []
        while True:
            p = bus.peer()
            if p.id % SHARES == senders[0].id % SHARES:
                break
            fillers.append(p)
        for f in fillers:
            f.disconnect()
        senders.append(p)
    return r, [(s, r.transfer(node, s)) for s in senders]


def _outcome(sender, h, payload):
    try:
        sender.send([h], payload)
        return True
    except OSError as e:
        assert e.errno == errno.EDQUOT, e
        return False


OPS = st.lists(st.one_of(st.tuples(st.just("send"), st.integers(0, 4), st.integers(0, 40)),
                         st.tuples(st.just("recv"), st.just(0), st.just(0))), max_size=60)


@settings(max_examples=30, deadline=None)
@given(quota_messages=st.integers(1, 24), quota_bytes=st.integers(1, 400), ops=OPS)
def test_shares_follow_bus1s_rule(quota_messages, quota_bytes, ops):
    """Every send's outcome and the shares shown after it are the model's, over 4 senders
    and a fifth folded into the first one's share."""
    with bus1py.Bus.create(quota_messages=quota_messages, quota_bytes=quota_bytes, **LIMITS) as bus:
        r, senders = _world(bus, 4, twin=True)
        model = Model(quota_messages, quota_bytes)
        for op, who, length in ops:
            if op == "send":
                sender, h = senders[who]
                assert _outcome(sender, h, b"x" * length) == model.send(sender.id, length)
            elif model.queue:
                m = r.recv(timeout=0)
                assert len(m.payload) == model.queue[0][1]
                model.recv()
            q = r.query()
            assert (_message_shares(q), q.chargers) == (model.shown(), len(model.shares))
            assert (q.queued_messages, q.queued_bytes) == (len(model.queue), sum(x for _, x in model.queue))
        assert bus.check() == []


def _message_shares(q):
    """query()'s shares of messages, bytes and descriptors (a peer's own node is a handle
    of its own share)."""
    return {k: v[:3] for k, v in q.shares.items() if v[0]}


def _flood(sender, h, payload=b"x"):
    n = 0
    while _outcome(sender, h, payload):
        n += 1
    return n


def test_a_flood_leaves_room_for_others_until_the_receiver_drains(make_bus):
    """One sender floods a receiver: it stops at about half, a second and a third still get
    through, and once the receiver has drained the first sends again."""
    bus = make_bus(quota_messages=60, **LIMITS)
    r, [(a, ha), (b, hb), (c, hc)] = _world(bus, 3)
    assert _flood(a, ha) == 30       # alone: 60 - s >= s + 1
    assert _flood(b, hb) == 10       # two: 30 - s >= 2 (s + 1)
    assert _flood(c, hc) == 5        # three: 20 - s >= 3 (s + 1)
    q = r.query()
    assert (q.chargers, q.share_of(a.id), q.share_of(b.id), q.share_of(c.id)) == \
        (3, (30, 30, 0, 0), (10, 10, 0, 0), (5, 5, 0, 0))
    assert not _outcome(a, ha, b"x")
    assert len(r.recv_many(100, timeout=0)) == 45
    assert (r.query().chargers, _message_shares(r.query())) == (0, {})
    assert _flood(a, ha) == 30


def test_the_rule_reads_what_is_left_before_the_charge(make_bus):
    """bus1's code, not its comment: a sender alone passes while Q - s >= s + 1 (4 of 7
    messages, 2 of 100 bytes in 30-byte messages); "what is left after the charge"
    (Q - s - c >= s + c) would stop it at 3 and at 1."""
    bus = make_bus(quota_messages=7, quota_bytes=100, **LIMITS)
    r, [(a, ha), (b, hb)] = _world(bus, 2)
    assert _flood(a, ha) == 4          # 7 - s >= s + 1 for s = 0..3
    assert _flood(b, hb) == 1          # 3 - s >= 2 (s + 1) for s = 0
    assert len(r.recv_many(10, timeout=0)) == 5
    assert _flood(a, ha, b"x" * 30) == 2  # 100 - s >= s + 30 for s = 0, 30


def test_bytes_and_descriptors_are_shared_too(make_bus):
    """A sender of large payloads, or of many descriptors, is stopped by its share of
    bytes or descriptors while a newcomer's small message still passes."""
    bus = make_bus(quota_bytes=1000, quota_fds=8, **LIMITS)
    r, [(a, ha), (b, hb)] = _world(bus, 2)
    assert _flood(a, ha, b"x" * 100) == 5      # 1000 - s >= s + 100
    assert _outcome(b, hb, b"x" * 100)        # 500 >= 2 * 100
    assert r.query().share_of(b.id) == (1, 100, 0, 0)
    assert len(r.recv_many(10, timeout=0)) == 6
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        sent = 0
        while True:
            try:
                a.send([ha], b"f", fds=[fd, fd])
                sent += 1
            except OSError as e:
                assert e.errno == errno.EDQUOT
                break
        assert sent == 2                        # 8 - s >= s + 2 for s = 0, 2, not 4
        assert r.query().share_of(a.id) == (2, 2, 4, 0)
        b.send([hb], b"g", fds=[fd])            # 4 >= 2 * 1
        assert r.query().n_fds == 5
    finally:
        os.close(fd)
    for m in r.recv_many(10, timeout=0):
        for f in m.fds:
            os.close(f)
    assert (r.query().chargers, r.query().n_fds) == (0, 0)


def _die_holding_the_lock(a, h):
    lib.b1_kill_at(lib.B1_KILL_LOCKED, 0)  # dies holding the receiver's lock, its copy charged
    a.send([h], b"never stamped")


@pytest.mark.timeout(60)
def test_a_takeover_recounts_the_shares(make_bus, monkeypatch):
    """A sender killed holding the receiver's lock, with the shares scribbled meanwhile:
    the takeover recounts them from the queue, and gc gives the dead one's charge back."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")  # gc only when called
    bus = make_bus(quota_messages=64, **LIMITS)
    r, [(a, ha), (b, hb)] = _world(bus, 2)
    for i in range(3):
        a.send([ha], b"a%d" % i)
    b.send([hb], b"b")
    p = mp.get_context("fork").Process(target=_die_holding_the_lock, args=(a, ha))
    p.start()
    p.join(30)
    assert p.exitcode == -9
    with Segment(bus) as seg:
        share = seg.peer(r, PEER_SHARES) + (a.id % SHARES) * SHARE_SIZE
        assert seg.u32(share) == 4  # a's three and the dead one's block
        seg.u32(share, 99)
        seg.u32(seg.peer(r, PEER_ROOT), 0)
    q = r.query()  # takes the lock over: repaired and recounted
    assert q.lock_recoveries == 1
    assert (q.share_of(a.id)[0], q.share_of(b.id), q.chargers) == (4, (1, 1, 0, 0), 2)
    bus.gc()
    assert r.query().share_of(a.id) == (3, 6, 0, 0)
    assert [bytes(m.payload) for m in r.recv_many(10, timeout=0)] == [b"a0", b"a1", b"a2", b"b"]
    assert (r.query().chargers, _message_shares(r.query())) == (0, {}) and bus.check() == []


def test_handles_are_shared_and_recounted_by_a_rebuild(make_bus, monkeypatch):
    """Handles given to a receiver (by transfer, in messages) are charged to the share of
    the peer that gives them: one giver stops at half, another still gets through, and a
    release gives room back.  A rebuild (gc of the bus held alone) recounts the shares
    from the handles."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(**LIMITS)
    r, a, b = bus.peer(quota_handles=20), bus.peer(), bus.peer()
    given = []
    for _ in range(11):
        node = a.create_node()
        try:
            given.append(a.transfer(node, r))
        except OSError as e:
            assert e.errno == errno.EDQUOT and len(given) == 10  # alone: 20 - s >= s + 1
            break
    h = b.transfer(b.create_node(), r)  # 10 >= 1 * 1
    q = r.query()
    assert (q.held_handles, q.share_of(a.id)[3], q.share_of(b.id)[3]) == (11, 10, 1)
    r.release(given.pop())
    a.transfer(a.create_node(), r)
    with Segment(bus) as seg:
        word = seg.peer(r, PEER_SHARE_HANDLES) + (a.id % SHARES) * 4
        assert seg.u32(word) == 10
        seg.u32(word, 77)
    assert r.query().share_of(a.id)[3] == 77
    bus.gc(sole=True)
    assert (r.query().share_of(a.id)[3], r.query().share_of(b.id)[3]) == (10, 1)
    r.release(h)
    assert r.query().share_of(b.id)[3] == 0 and bus.check() == []


def test_check_reports_handle_counters_that_disagree_with_the_handles(make_bus, monkeypatch):
    """Bus.check() counts each peer's handles, in all and by the share they are charged
    to: a scribbled share, then a scribbled n_handles, is named; a rebuild mends both."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    bus = make_bus(**LIMITS)
    r, a = bus.peer(), bus.peer()
    for _ in range(3):
        a.transfer(a.create_node(), r)
    assert bus.check() == []
    with Segment(bus) as seg:
        share = seg.peer(r, PEER_SHARE_HANDLES) + (a.id % SHARES) * 4
        count = seg.peer(r, PEER_N_HANDLES)
        assert (seg.u32(share), seg.u32(count)) == (3, r.query().held_handles) == (3, 3)
        seg.u32(share, 5)
        assert sorted(bus.check()) == sorted([
            f"peer slot {r._slot}: share {a.id % SHARES} of its handles says 5, 3 handles are charged to it",
            f"peer slot {r._slot}: its shares of handles add up to 5, n_handles says 3"])
        seg.u32(share, 3)
        seg.u32(count, 4)
        assert sorted(bus.check()) == sorted([
            f"peer slot {r._slot}: n_handles 4 but it holds 3 handles",
            f"peer slot {r._slot}: its shares of handles add up to 3, n_handles says 4"])
        seg.u32(share, 9)
    bus.gc(sole=True)
    assert r.query().held_handles == 3 and r.query().share_of(a.id)[3] == 3 and bus.check() == []
