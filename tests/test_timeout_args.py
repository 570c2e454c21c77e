"""Every entry point that takes a receive timeout checks it the same way (bus1py.args.timeout_ns):
None or an int or float >= 0 waits; NaN and negative numbers are a ValueError, anything else
a TypeError, each one line naming the value, raised before anything is taken, sent or waited
for (a message queued before the bad call is still there after it)."""
from __future__ import annotations

import asyncio
import math

import pytest

import bus1py
from bus1py.topic import Subscription


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))  # a check that is missed would wait for ever


class Parties:
    """A sender `a` and a receiver `b` with a message queued for it, through b's node `n`
    (a's handle `h`), and b's subscription `sub` to a's topic with a message queued for it."""

    def __init__(self, bus):
        self.a, self.b = bus.peer(), bus.peer()
        self.n = self.b.create_node()
        self.h = self.b.transfer(self.n, self.a)
        self.topic = self.a.topic("t")
        self.sub = self.b.subscribe("t")
        self.topic.send(b"for the subscription")
        self.a.send(self.h, b"for the node")

    def untouched(self, kept: bool) -> None:
        """Nothing was taken or sent: the queued messages are there, in their order, and no more."""
        if kept:  # what a cancelled arecv took is returned first
            assert bytes(self.sub.recv(0).payload) == b"for the subscription"
        got = [bytes(m.payload) for m in self.b.recv_many(8, 0)]
        assert got == ([] if kept else [b"for the subscription"]) + [b"for the node"], got  # no request either


ENTRY_POINTS = {
    "Peer.recv": lambda p, t: p.b.recv(t),
    "Peer.recv(copy=False)": lambda p, t: p.b.recv(t, copy=False),
    "Peer.recv(node=)": lambda p, t: p.b.recv(t, node=p.n),
    "Peer.recv_many": lambda p, t: p.b.recv_many(4, t),
    "Peer.arecv": lambda p, t: _run(p.b.arecv(t)),
    "Peer.call": lambda p, t: p.a.call(p.h, b"request", timeout=t),
    "Peer.acall": lambda p, t: _run(p.a.acall(p.h, b"request", timeout=t)),
    "sub.recv": lambda p, t: p.sub.recv(t),
    "Subscription.recv": lambda p, t: Subscription.recv(p.sub, t),
    "sub.arecv": lambda p, t: _run(p.sub.arecv(t)),
}
BAD = [(math.nan, ValueError), (-1, ValueError), (-1e-9, ValueError), (-math.inf, ValueError),
       ("1", TypeError), (True, TypeError), ([0.5], TypeError)]


# a subscription's receives also with a message kept (its arecv's thread took it): returned without a wait
KEPT = [(e, False) for e in sorted(ENTRY_POINTS)] + [(e, True) for e in sorted(ENTRY_POINTS) if "ubscription" in e
                                                      or e.startswith("sub.")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value,error", BAD, ids=[repr(v) for v, _ in BAD])
@pytest.mark.parametrize("entry,kept", KEPT, ids=[e + (", a message kept" if k else "") for e, k in KEPT])
def test_a_bad_timeout_is_one_line_naming_it_and_changes_nothing(bus, entry, kept, value, error):
    p = Parties(bus)
    if kept:
        p.sub._take(0)  # what arecv's executor thread does before its wait is cancelled
    with pytest.raises(error) as info:
        ENTRY_POINTS[entry](p, value)
    text = str(info.value)
    assert "\n" not in text and text.startswith("timeout must be None or") and text.endswith(repr(value)), text
    p.untouched(kept)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", [None, 0, 0.0, 5, 2.5, math.inf, 1e30, 1 << 70])
@pytest.mark.parametrize("entry", sorted(e for e in ENTRY_POINTS if "call" not in e))
def test_a_good_timeout_receives_what_is_queued(bus, entry, value):
    """The same values pass every check: the message already queued is returned at once."""
    p = Parties(bus)
    got = ENTRY_POINTS[entry](p, value)
    m = got[0] if type(got) is list else got
    want = b"for the node" if entry == "Peer.recv(node=)" else b"for the subscription"
    assert bytes(m.payload) == want
    m.release()
