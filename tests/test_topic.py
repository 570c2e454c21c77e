"""Topics (bus1py/topic.py): one order for every subscriber across publishers, processes
and topics; subscribers that die or close dropped; a slow subscriber stops no one and
counts what it missed; the ways to read a subscription."""
from __future__ import annotations

import asyncio
import errno
import functools
import multiprocessing as mp
import os
import signal
import time

import pytest
from hypothesis import given, settings, strategies as st

import bus1py

from test_fair_shares import Model

FORK = mp.get_context("fork")
LIMITS = dict(max_peers=32, max_nodes=128, max_handles=512, max_entries=1 << 13, max_dests=16,
              pool_size=4 << 20, max_payload=4096, spin_ns=0)


def _wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


# ---- one order across publishers, processes and topics ----

def _publisher(bus_name, topic, n, n_subs, go, ready, done):
    bus = bus1py.Bus.attach(bus_name)
    t = bus.peer().topic(topic)
    ready.put(topic)
    go.wait(30)
    _wait_for(lambda: t.subscribers == n_subs, 20, "every subscriber")
    for i in range(n):
        t.send(b"%s:%d" % (topic.encode(), i))
    done.wait(30)  # the parent saw every subscriber done: the topic may go


def _subscriber(bus_name, index, topics, n_expected, out):
    bus = bus1py.Bus.attach(bus_name)
    peer = bus.peer()
    subs = [peer.subscribe(t) for t in topics]
    handles = {s.handle for s in subs}
    got = []
    while len(got) < n_expected:  # plain recv: both subscriptions in the queue's one order
        m = peer.recv(timeout=20)
        assert m.destination in handles
        got.append(bytes(m.payload).decode())
    out.put((index, got))


@pytest.mark.timeout(90)
def test_every_subscriber_sees_one_order_across_publishers_and_topics(make_bus):
    """Two publisher processes (topics a and b), three subscriber processes (two take
    both topics, one takes b only): every message arrives, each publisher's in its
    order, and any two subscribers see the messages they share in the same order."""
    bus = make_bus(**LIMITS)
    n = 150
    ready, out, go, done = FORK.Queue(), FORK.Queue(), FORK.Event(), FORK.Event()
    pubs = [FORK.Process(target=_publisher, args=(bus.name, t, n, k, go, ready, done))
            for t, k in (("a", 2), ("b", 3))]
    for p in pubs:
        p.start()
    assert {ready.get(timeout=30), ready.get(timeout=30)} == {"a", "b"}
    wants = [("a", "b"), ("a", "b"), ("b",)]
    subs = [FORK.Process(target=_subscriber, args=(bus.name, i, w, n * len(w), out)) for i, w in enumerate(wants)]
    for p in subs:
        p.start()
    go.set()
    got = [g for _, g in sorted(out.get(timeout=60) for _ in subs)]
    done.set()
    for p in subs + pubs:
        p.join(30)
        assert p.exitcode == 0
    for g, w in zip(got, wants):
        assert sorted(g) == sorted(f"{t}:{i}" for t in w for i in range(n))
        for t in w:
            assert [x for x in g if x[0] == t] == [f"{t}:{i}" for i in range(n)]
    for x in got:
        for y in got:
            shared = set(x) & set(y)
            assert [m for m in x if m in shared] == [m for m in y if m in shared]


# ---- subscribers that go ----

def _subscribe_and_stop(bus_name, ready):
    peer = bus1py.Bus.attach(bus_name).peer()
    peer.subscribe("t")
    ready.set()
    time.sleep(60)


@pytest.mark.timeout(60)
def test_a_subscriber_that_dies_is_dropped_within_a_second(make_bus):
    bus = make_bus(**LIMITS)
    pub, peer = bus.peer(), bus.peer()
    t = pub.topic("t")
    stays = peer.subscribe("t")
    ready = FORK.Event()
    p = FORK.Process(target=_subscribe_and_stop, args=(bus.name, ready))
    p.start()
    assert ready.wait(30)
    _wait_for(lambda: t.subscribers == 2, 10, "the child's subscription taken in")
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    killed = time.monotonic()
    _wait_for(lambda: t.subscribers == 1, 5, "the dead subscriber dropped")
    took = time.monotonic() - killed
    assert took < 3, took  # the death watcher's second, with room for a loaded machine
    assert t.send(b"after") == 1 and bytes(stays.recv(timeout=1).payload) == b"after"


def test_close_unsubscribes_and_leaves_nothing_in_the_queue(make_bus):
    bus = make_bus(**LIMITS)
    pub, peer = bus.peer(), bus.peer()
    t = pub.topic("t")
    other = peer.create_node()
    h_other = peer.transfer(other, pub)
    with peer.subscribe("t") as s:
        t.send(b"one")
        pub.send(h_other, b"beside")
        t.send(b"two")
        assert bytes(s.recv(timeout=1).payload) == b"one"
    assert t.subscribers == 0 and t.send(b"nobody") == 0
    m = peer.recv(timeout=0)  # the other node's message stayed, nothing of the subscription
    assert bytes(m.payload) == b"beside"
    with pytest.raises(BlockingIOError):
        peer.recv(timeout=0)
    with pytest.raises(OSError, match="closed"):
        s.recv(timeout=0)


def test_a_topic_gone_ends_its_subscribers_waits(make_bus):
    bus = make_bus(**LIMITS)
    pub, peer = bus.peer(), bus.peer()
    t = pub.topic("t")
    s = peer.subscribe("t")
    t.send(b"last")
    t.close()
    assert [bytes(m.payload) for m in s] == [b"last"]  # iteration ends with the topic
    with pytest.raises(ConnectionResetError):
        s.recv(timeout=1)
    assert pub.topic("t").subscribers == 0  # the name is free again


# ---- a slow subscriber ----

@pytest.mark.timeout(60)
def test_a_slow_subscriber_stops_no_one_and_counts_what_it_missed(make_bus):
    """A subscriber that does not read (a stopped process's peer, quota 20: the topic's
    share 10) misses what comes past its share; the others get everything, the sends
    never wait, and the slow one, once it reads, knows how many it missed."""
    bus = make_bus(**LIMITS)
    pub = bus.peer()
    t = pub.topic("t")
    fast = [bus.peer().subscribe("t") for _ in range(2)]
    slow = bus.peer(quota_messages=20).subscribe("t")
    started = time.monotonic()
    took = [t.send(b"%d" % i) for i in range(50)]
    assert time.monotonic() - started < 5, "sends must never wait for a slow subscriber"
    assert took == [3] * 10 + [2] * 40
    for s in fast:
        assert [int(s.recv(timeout=0).payload) for _ in range(50)] == list(range(50))
    assert [int(slow.recv(timeout=0).payload) for _ in range(10)] == list(range(10))
    t.send(b"50")
    assert int(slow.recv(timeout=0).payload) == 50 and slow.missed == 40


# ---- against the model of fair shares ----

@settings(max_examples=25, deadline=None)
@given(quota=st.integers(1, 6), wants=st.lists(st.sets(st.integers(0, 2), min_size=1), min_size=1, max_size=3),
       ops=st.lists(st.tuples(st.sampled_from(["publish", "publish", "take"]), st.integers(0, 2)), min_size=8,
                    max_size=50))
def test_who_takes_each_message_is_the_fair_share_models(quota, wants, ops):
    """Three topics, subscriber peers of small quotas each subscribed to some: every
    `topic.send` reaches exactly the subscribers the model of bus1's rule lets take it
    (each topic's peer a charger of their quotas), each peer receives them in the order
    sent, and a subscription's misses are the model's refusals between what it received."""
    with bus1py.Bus.create(**LIMITS) as bus:
        topics = [bus.peer().topic(f"t{i}") for i in range(3)]
        peers = [bus.peer(quota_messages=quota) for _ in wants]
        subs = [{t: p.subscribe(f"t{t}") for t in sorted(w)} for p, w in zip(peers, wants)]
        assert [t.subscribers for t in topics] == [sum(i in w for w in wants) for i in range(3)]
        models = [Model(quota, 1 << 40) for _ in peers]
        queued = [[] for _ in peers]       # (topic, payload, n) the model says each peer holds
        refused = [{} for _ in peers]      # topic -> the ops n whose message each peer refused
        taken = [{} for _ in peers]        # topic -> the ops n whose message each peer received
        for n, (op, i) in enumerate(ops):
            if op == "publish":
                payload = b"%d:%d" % (i, n)
                takers = 0
                for j, w in enumerate(wants):
                    if i in w:
                        if models[j].send(topics[i].id, len(payload)):
                            queued[j].append((i, payload, n))
                            takers += 1
                        else:
                            refused[j].setdefault(i, []).append(n)
                assert topics[i].send(payload) == takers
            elif queued[i % len(peers)]:
                j = i % len(peers)
                t, payload, sent = queued[j].pop(0)
                m = subs[j][t].recv(timeout=0)  # the peer's front is this subscription's
                assert bytes(m.payload) == payload
                models[j].recv()
                taken[j].setdefault(t, []).append(sent)
        for j in range(len(peers)):
            for t, s in subs[j].items():
                seen = taken[j].get(t, [])
                want = sum(1 for r in refused[j].get(t, []) if seen and seen[0] < r < seen[-1])
                assert s.missed == want, (j, t, s.missed, want)


# ---- reading a subscription ----

def test_asynchronous_reads_and_a_cancelled_one_loses_nothing(make_bus):
    bus = make_bus(**LIMITS)
    pub, peer = bus.peer(), bus.peer()
    t = pub.topic("t")
    s = peer.subscribe("t")

    async def main():
        with pytest.raises(TimeoutError):
            await s.arecv(timeout=0.05)
        waiting = asyncio.ensure_future(s.arecv())
        await asyncio.sleep(0.05)
        waiting.cancel()
        t.send(b"kept")
        await asyncio.sleep(0.2)  # the cancelled wait's slice may take it meanwhile
        t.send(b"next")
        return [bytes((await s.arecv(timeout=5)).payload) for _ in range(2)]

    assert asyncio.run(main()) == [b"kept", b"next"]


def test_bad_names_are_clear_errors(make_bus):
    bus = make_bus(**LIMITS)
    pub, peer = bus.peer(), bus.peer()
    with pytest.raises(FileNotFoundError):
        peer.subscribe("nobody")
    pub.topic("t")
    with pytest.raises(FileExistsError):
        pub.topic("t")
    with pytest.raises(OSError, match="name"):
        pub.topic("")
    assert bus.info()["peers"] == 3  # the refused topics' peers are gone


def test_a_subscription_past_max_dests_is_let_go(make_bus):
    """A topic's message is one transaction: past the bus's max_dests a subscription is
    refused, and its subscriber learns it at its next wait."""
    bus = make_bus(**{**LIMITS, "max_dests": 2})
    pub = bus.peer()
    t = pub.topic("t")
    subs = [bus.peer().subscribe("t") for _ in range(3)]
    assert t.subscribers == 2 and t.send(b"x") == 2
    assert [bytes(s.recv(timeout=1).payload) for s in subs[:2]] == [b"x", b"x"]
    with pytest.raises(ConnectionResetError, match="max_dests"):
        subs[2].recv(timeout=1)


def test_handles_and_descriptors_reach_every_subscriber(make_bus):
    """The publisher's handles are lent to the topic's peer for the send and given back
    after it; each subscriber gets its own handle and descriptor."""
    bus = make_bus(**LIMITS)
    pub = bus.peer()
    t = pub.topic("t")
    subs = [bus.peer().subscribe("t") for _ in range(2)]
    node = pub.create_node()
    rd, wr = os.pipe()
    try:
        assert t.send(b"h", handles=[node], fds=[wr]) == 2
    finally:
        os.close(wr)
    for s in subs:
        m = s.recv(timeout=1)
        assert len(m.handles) == 1 and m.handles[0] != bus1py.HANDLE_INVALID and len(m.fds) == 1
        os.close(m.fds[0])
        s._peer.release(m.handles[0])
    assert t._tp.query().held_handles == 3  # its node and the two subscriptions: the lent one given back
    os.close(rd)


# ---- the C forms of send and recv (csrc/py/topic.c) ----

def test_the_c_forms_of_send_and_recv_are_the_methods_forms(make_bus):
    """topic.send and sub.recv are single C calls in their common forms; every other form
    (and every failure) is the Python method's, with the same results and errors, and the
    misses are counted whichever form read the messages around a gap."""
    from bus1py.topic import Subscription, Topic
    bus = make_bus(**LIMITS)
    pub = bus.peer()
    t = pub.topic("t")
    s = bus.peer().subscribe("t")
    slow = bus.peer(quota_messages=2).subscribe("t")  # the topic's share of it: 1
    assert type(t.send).__name__ == "PartialSender" and type(s.recv).__name__ == "NodeReader"
    assert [t.send(b"0"), t.send(bytearray(b"1")), Topic.send(t, memoryview(b"2"))] == [2, 1, 1]
    assert [bytes(s.recv(0).payload), bytes(s.recv(timeout=0).payload),
            bytes(Subscription.recv(s, 0).payload)] == [b"0", b"1", b"2"]
    for call, error, words in [(lambda: s.recv(timeout=-1), ValueError, "timeout must be None or >= 0"),
                               (lambda: s.recv("x"), TypeError, "timeout must be None or a number"),
                               (lambda: s.recv(1, 2), TypeError, "positional arguments"),
                               (lambda: s.recv(tmo=1), TypeError, "unexpected keyword argument 'tmo'"),
                               (lambda: t.send(), TypeError, "missing 1 required positional argument"),
                               (lambda: t.send(5), TypeError, "payload must be bytes-like")]:
        with pytest.raises(error, match=words):
            call()
    with pytest.raises(BlockingIOError):
        s.recv(timeout=0)
    assert bytes(slow.recv(timeout=0).payload) == b"0" and slow.missed == 0
    assert [t.send(b"%d" % i) for i in range(3, 6)] == [2, 1, 1]  # slow's share is free again, once
    assert bytes(Subscription.recv(slow, 0).payload) == b"3" and slow.missed == 2  # the Python form
    assert t.send(b"6") == 2
    assert bytes(slow.recv(timeout=0).payload) == b"6" and slow.missed == 4        # the C form, past a gap
    assert bytes(s.recv().payload) == b"3"  # a wait for ever, then the C form's next in sequence
    t.close()
    for send in (t.send, functools.partial(Topic.send, t)):
        with pytest.raises(BrokenPipeError, match="peer disconnected"):
            send(b"x")
