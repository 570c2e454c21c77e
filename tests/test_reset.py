"""bus1's PEER_RESET (Peer.reset, csrc/bus/reset.c) and destroy(release=True) dropping one
reference (bus1's NODES_DESTROY_FLAG_RELEASE_HANDLES).

Invariants checked:
  - a reset destroys the peer's nodes (their holders get exactly one NODE_DESTROY each,
    the peer none), drops its committed messages, releases every reference it holds
    (owners get NODE_RELEASE), removes its names, and leaves it connected and usable;
  - a reset whose process is SIGKILLed mid-way (before or after the destruction's stamp)
    is finished by gc: the same outcome, the bus sound (Bus.check);
  - destroy(release=True) drops one reference of the owner's handle, not all.
"""
from __future__ import annotations

import errno
import os

import pytest

import bus1py
from bus1py import MessageType
from bus1py._b1 import lib


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
