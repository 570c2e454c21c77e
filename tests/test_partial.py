"""Partial multicast, bus1's SEND_FLAG_CONTINUE (bus1py/partial.py, csrc/bus/tx.c
b1_tx_run_partial): one transaction to every destination that can take it, each one that
could not named with its errno; `send` stays all-or-nothing.  Kills inside it:
tests/explore_workloads.py Partial."""
from __future__ import annotations

import errno
import os

import pytest

LIMITS = dict(max_peers=16, max_nodes=64, max_handles=256, max_entries=1024, pool_size=1 << 20,
              max_payload=4096, spin_ns=0)


@pytest.fixture
def world(make_bus):
    """(bus, sender, receivers, handles): receivers[0] has a quota of 2 (the sender's
    share: 1 message), the others the bus's."""
    bus = make_bus(**LIMITS)
    a = bus.peer()
    rs = [bus.peer(quota_messages=2), bus.peer(), bus.peer()]
    return bus, a, rs, [r.transfer(r.create_node(), a) for r in rs]


def test_a_full_receiver_misses_the_message_the_others_get_with_one_stamp(world):
    bus, a, rs, hs = world
    a.send(hs[0], b"fills its share")
    with pytest.raises(OSError) as e:  # send: all or nothing
        a.send(hs, b"all")
    assert e.value.errno == errno.EDQUOT
    assert [r.query().queued_messages for r in rs] == [1, 0, 0]
    stamp, errors = a.send_partial(hs, b"partial")
    assert errors == {hs[0]: errno.EDQUOT}
    got = [r.recv(timeout=0) for r in rs[1:]]
    assert [bytes(m.payload) for m in got] == [b"partial"] * 2
    assert {m.stamp for m in got} == {stamp} and stamp[1] == a.id
    assert [bytes(m.payload) for m in rs[0].recv_many(10, timeout=0)] == [b"fills its share"]
    stamp2, errors2 = a.send_partial(hs, b"everyone")
    assert errors2 == {} and stamp2[0] > stamp[0]
    assert bus.check() == []


def test_no_destination_takes_it_nothing_is_stamped_or_changed(world):
    bus, a, rs, hs = world
    a.send(hs[0], b"fills its share")
    before = (rs[0].query(), a.query().clock, bus.info()["entries_in_use"], bus.info()["pool_used"])
    assert a.send_partial([hs[0]], b"no room") == (None, {hs[0]: errno.EDQUOT})
    assert (rs[0].query(), a.query().clock, bus.info()["entries_in_use"], bus.info()["pool_used"]) == before
    assert bus.check() == []


def test_a_destroyed_destination_is_dropped_as_send_drops_it(world):
    bus, a, rs, hs = world
    rs[2].disconnect()
    stamp, errors = a.send_partial(hs[1:], b"x")
    assert stamp is not None and errors == {}
    assert bytes(rs[1].recv(timeout=0).payload) == b"x"


def test_descriptors_go_to_the_destinations_that_take_it(world):
    bus, a, rs, hs = world
    a.send(hs[0], b"fills its share")
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        stamp, errors = a.send_partial(hs, b"f", fds=[fd])
    finally:
        os.close(fd)
    assert errors == {hs[0]: errno.EDQUOT} and rs[0].query().n_fds == 0
    for r in rs[1:]:
        m = r.recv(timeout=0)
        assert len(m.fds) == 1
        os.close(m.fds[0])


@pytest.mark.parametrize("dests,exc,words", [
    ([], OSError, "no destinations"), ("x", TypeError, "handle ids"),
    ([1 << 70], TypeError, "handle ids"), ([12345], OSError, "holds no handle")])
def test_bad_input_is_one_clear_error_and_sends_nothing(world, dests, exc, words):
    bus, a, rs, hs = world
    with pytest.raises(exc, match=words):
        a.send_partial(dests, b"x")
    assert [r.query().queued_messages for r in rs] == [0, 0, 0] and a.query().sent == 0
