"""The Messages and stamps that bus1py._messages builds in C (csrc/py/messages.c) are the
objects the Python API promises: the same classes, field types and values whatever call
received them, built from what was sent; a blocking receive in C lets other threads run;
the unicast fast path of `send` fails as the general path does."""
from __future__ import annotations

import errno
import gc
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bus1py
from bus1py.message import HANDLE_INVALID, Message, MessageType
from bus1py.receive import SliceMessage


@pytest.fixture
def pair(make_bus):
    bus = make_bus(spin_ns=0, max_payload=1 << 12)
    a, b = bus.peer(), bus.peer()
    return bus, a, b, b.transfer(b.create_node(), a)


def _check(m, dest, payload, handles, stamp, zero_copy=False):
    assert type(m) is (SliceMessage if zero_copy else Message)
    assert type(m.type) is MessageType and m.type is MessageType.DATA
    assert type(m.destination) is int and m.destination == dest
    if zero_copy:
        assert type(m.payload) is memoryview and m.payload.readonly and bytes(m.payload) == payload
    else:
        assert type(m.payload) is bytes and m.payload == payload
    assert type(m.handles) is tuple and len(m.handles) == len(handles)
    assert all(type(x) is int for x in m.handles)
    assert type(m.stamp) is tuple and m.stamp == stamp and all(type(x) is int for x in m.stamp)
    assert type(m.fds) is tuple and m.fds == ()
    assert m == (MessageType.DATA, dest, m.payload, m.handles, stamp, ())
    assert m.release() is None


@pytest.mark.parametrize("form", ["recv", "recv_many", "recv_many zero-copy", "recv zero-copy"])
def test_every_receive_form_builds_the_promised_message(pair, form):
    bus, a, b, _ = pair
    own = b.create_node()
    h = b.transfer(own, a)
    carried = a.create_node()
    sent = [(a.send(h, b"one"), b"one", ()),
            (a.send([h], b"two", [carried]), b"two", (carried,)),
            (a.send(h, bytearray(b"three")), b"three", ())]
    zero_copy = "zero-copy" in form
    if form.startswith("recv_many"):
        got = b.recv_many(100, 0, copy=not zero_copy)
    else:
        got = [b.recv(0, copy=not zero_copy) for _ in sent]
    assert len(got) == len(sent)
    for m, (stamp, payload, handles) in zip(got, sent):
        _check(m, own, payload, handles, stamp, zero_copy)
    with pytest.raises(BlockingIOError):
        b.recv(0)


def test_stamps_of_send_match_what_the_receiver_sees(pair):
    bus, a, b, h = pair
    stamps = [a.send(h, b"%d" % i) for i in range(20)]
    assert all(type(s) is tuple and len(s) == 3 and s[1] == a.id for s in stamps)
    assert [m.stamp for m in b.recv_many(20, 0)] == stamps
    assert [s[2] for s in stamps] == sorted(s[2] for s in stamps)


def test_carried_handles_and_notices(pair):
    bus, a, b, h = pair
    n1, n2 = a.create_node(), a.create_node()
    a.send(h, b"x", [n1, n2])
    m = b.recv(0)
    assert len(m.handles) == 2 and len(set(m.handles)) == 2
    a.destroy(n1)
    notices = [a.recv(0), b.recv(0)]
    assert [type(x.type) for x in notices] == [MessageType, MessageType]
    assert all(x.type is MessageType.NODE_DESTROY and type(x) is Message for x in notices)
    assert notices[1].destination == m.handles[0]
    a.send(h, b"y", [n2])
    assert b.recv_many(5, 0)[0].handles == (m.handles[1],)
    assert HANDLE_INVALID not in m.handles


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.booleans()), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(1, 7), st.booleans()), min_size=1, max_size=40))
def test_any_mix_of_receives_returns_what_was_sent_in_order(payloads, takes):
    """Whatever mix of recv, recv_many and zero-copy takes the queue, the messages come out
    in order, each equal to what was sent, with its handle and stamp."""
    with bus1py.Bus.create(spin_ns=0, max_payload=1 << 10) as bus:
        a, b = bus.peer(), bus.peer()
        h = b.transfer(b.create_node(), a)
        node = a.create_node()
        sent = [(a.send(h, p, [node] if carry else ()), p, carry) for p, carry in payloads]
        got, i = [], 0
        while len(got) < len(sent):
            k, copy = takes[i % len(takes)]
            i += 1
            batch = [b.recv(0, copy=copy)] if k == 1 else b.recv_many(k, 0, copy=copy)
            got += [(m.stamp, bytes(m.payload), len(m.handles) == 1, type(m) is SliceMessage, copy)
                    for m in batch]
            for m in batch:
                m.release()
        assert [(s, p, c) for s, p, c, _, _ in got] == sent
        assert all(zc == (not copy) for _, _, _, zc, copy in got)
        with pytest.raises(BlockingIOError):
            b.recv(0)


def test_a_blocked_receive_lets_other_threads_run(pair):
    bus, a, b, h = pair
    out = []
    t = threading.Thread(target=lambda: out.append(b.recv(5)))
    t.start()
    ticks = 0
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:  # runs only while the receiver gave the GIL up
        ticks += 1
    a.send(h, b"wake")
    t.join(5)
    assert not t.is_alive() and out[0].payload == b"wake" and ticks > 1000


@pytest.mark.parametrize("dest, exc, code", [(-1, TypeError, None), (1 << 64, TypeError, None),
                                             (12345, OSError, errno.ENXIO)])
def test_the_fast_unicast_fails_as_send_does(pair, dest, exc, code):
    bus, a, b, h = pair
    a.send(h, b"attach first")
    with pytest.raises(exc) as e:
        a.send(dest, b"x")
    if code:
        assert e.value.errno == code
    with pytest.raises(OSError) as e:
        a.send(h, b"x" * (bus.limits.max_payload + 1))
    assert e.value.errno == errno.EMSGSIZE
    assert len(b.recv_many(10, 0)) == 1


def test_a_closed_bus_refuses_the_fast_calls(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    a.send(h, b"x")
    b.recv(0)
    bus.close()
    for call in (lambda: a.send(h, b"x"), lambda: b.recv(0), lambda: b.recv_many(4, 0)):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_freeing_messages_drops_exactly_what_they_hold(pair):
    """Message's deallocator is messages.c's: every item and the class reference go once,
    for a Message built in C or in Python, a SliceMessage and a subclass with a finalizer."""
    bus, a, b, h = pair
    payload = b"p" * 100
    stamp = (1, 2, 3)

    class Noted(Message):
        deleted = 0

        def __del__(self):
            Noted.deleted += 1

    classes = (Message, SliceMessage, Noted)
    before = [sys.getrefcount(c) for c in classes] + [sys.getrefcount(payload), sys.getrefcount(stamp)]
    for _ in range(3):
        a.send_many([h], [b"x"] * 50)
        got = b.recv_many(50, 0)
        assert len(got) == 50 and not gc.is_tracked(got[0])
        del got
        a.send(h, b"z")
        m = b.recv(0, copy=False)
        m.release()
        del m
        made = [Message(MessageType.DATA, 1, payload, (), stamp) for _ in range(50)]
        made += [Noted(MessageType.DATA, 1, payload, (), stamp) for _ in range(50)]
        del made
    assert Noted.deleted == 150
    after = [sys.getrefcount(c) for c in classes] + [sys.getrefcount(payload), sys.getrefcount(stamp)]
    assert after == before


def test_a_deep_chain_of_messages_is_freed_without_recursing_the_stack():
    m = None
    for i in range(200_000):
        m = Message(MessageType.DATA, i, m, (), (0, 0, 0))
    del m  # the trashcan bounds the depth: no stack overflow


def test_setup_refuses_a_message_class_that_is_more_than_a_tuple():
    from bus1py import _messages

    class WithDict(tuple):
        pass
    with pytest.raises(TypeError, match="tuple and nothing more"):
        _messages.setup(WithDict, WithDict, (), 1, 1, 1, 1, 1)
