"""Peer.send and Peer.recv run in C (csrc/py/peer.c) for their common forms and hand
everything else to Python: whichever path a call takes, it returns or raises exactly what
the Python path (Peer._send_general, Peer._recv_general: sending.py, receiving.py) does for the same arguments, and
the frame the C methods keep is each thread's own, refused once the bus is closed."""
from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bus1py


def _outcome(call):
    """What a call did: ("ok", value) or (exception type, errno, message)."""
    try:
        return ("ok", call())
    except Exception as e:  # noqa: BLE001 - any exception is an outcome to compare
        return (type(e), getattr(e, "errno", None), str(e))


_ID = st.one_of(st.integers(-3, 3), st.just(1 << 64), st.just((1 << 64) - 1), st.booleans(),
                st.floats(allow_nan=False), st.none(), st.text(max_size=2))
_DESTS = st.one_of(st.sampled_from(["h", "h2"]), _ID,
                   st.lists(st.one_of(st.sampled_from(["h", "h2"]), _ID), max_size=5),
                   st.tuples(st.sampled_from(["h", "h2"]), st.sampled_from(["h", "h2"])),
                   st.sampled_from(["set", "many"]))
_PAYLOADS = st.one_of(st.binary(max_size=80), st.binary(max_size=80).map(bytearray),
                      st.just(b"x" * 257), st.text(max_size=3), st.integers(0, 3), st.none())


@settings(max_examples=200, deadline=None)
@given(_DESTS, _PAYLOADS)
def test_send_in_c_does_what_the_python_path_does(dests, payload):
    with bus1py.Bus.create(spin_ns=0, max_payload=256, max_dests=3) as bus:
        a, b = bus.peer(), bus.peer()
        ids = {"h": b.transfer(b.create_node(), a), "h2": b.transfer(b.create_node(), a)}

        def concrete(d):
            if d == "set":
                return {ids["h"], ids["h2"]}
            if d == "many":
                return [ids["h"]] * 4  # more than max_dests
            if isinstance(d, (list, tuple)):
                return type(d)(concrete(x) for x in d)
            return ids.get(d, d) if isinstance(d, str) else d

        d = concrete(dests)
        outcomes = []
        for send in (a.send, a._send_general):
            out = _outcome(lambda: send(d, payload))
            got = b.recv_many(8, 0) if out[0] == "ok" else []
            if out[0] == "ok":  # the stamps differ; what was sent must not
                assert out[1][1] == a.id
                out = ("ok", [(m.destination, m.payload, m.handles) for m in got])
            outcomes.append(out)
        assert outcomes[0] == outcomes[1]
        with pytest.raises(BlockingIOError):
            b.recv(0)


_TIMEOUTS = st.one_of(st.none(), st.just(0), st.just(0.0), st.just(-0.0), st.just(-1), st.just(-0.5),
                      st.just(math.nan), st.just(math.inf), st.just(1e30), st.just(1 << 70),
                      st.just(True), st.just("1"), st.just(3), st.just(2.5))
_COPIES = st.sampled_from([True, False, 1, 0, None, "yes"])


@settings(max_examples=200, deadline=None)
@given(_TIMEOUTS, _COPIES, st.booleans(), st.sampled_from(["positional", "keywords", "timeout only"]))
def test_recv_in_c_does_what_the_python_path_does(timeout, copy, queued, form):
    """A message is queued whenever the timeout could wait, so no call blocks."""
    if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                           and timeout > 0):
        queued = True
    with bus1py.Bus.create(spin_ns=0) as bus:
        a, b = bus.peer(), bus.peer()
        h = b.transfer(b.create_node(), a)
        outcomes = []
        for recv in (b.recv, b._recv_general):
            if queued:
                a.send(h, b"queued")
            if form == "positional":
                out = _outcome(lambda: recv(timeout, copy))
            elif form == "keywords":
                out = _outcome(lambda: recv(copy=copy, timeout=timeout))
            else:
                out = _outcome(lambda: recv(timeout))
            if out[0] == "ok":
                m = out[1]
                out = ("ok", type(m), m.type, m.destination, bytes(m.payload), m.handles)
                m.release()
            outcomes.append(out)
            for m in b.recv_many(8, 0) if queued and outcomes[-1][0] != "ok" else ():
                m.release()
        assert outcomes[0] == outcomes[1]


@pytest.mark.timeout(60)
def test_threads_sharing_a_peer_each_use_their_own_frame():
    """Threads that take turns on one peer (each taking the C methods' kept frame over)
    lose no message and mix up no payload."""
    with bus1py.Bus.create(spin_ns=0) as bus:
        a, b = bus.peer(), bus.peer()
        h = b.transfer(b.create_node(), a)
        errors, n = [], 300

        def worker(k):
            try:
                for i in range(n):
                    a.send([h], b"%d:%d" % (k, i))
                    m = b.recv(5, copy=bool(i % 2))
                    assert m.payload[:0] == b"" and len(bytes(m.payload)) >= 3
                    m.release()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and not any(t.is_alive() for t in threads)
        with pytest.raises(BlockingIOError):
            b.recv(0)


def test_a_closed_bus_refuses_the_kept_frame(make_bus):
    """The C methods keep a frame; once the bus is closed they raise, as the Python path
    does, for every form that went through C before."""
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h, h2 = b.transfer(b.create_node(), a), b.transfer(b.create_node(), a)
    a.send([h, h2], b"x")
    b.recv(0, copy=False).release()
    b.recv(0)
    bus.close()
    for call in (lambda: a.send([h, h2], b"x"), lambda: a.send(h, b"x"), lambda: b.recv(0),
                 lambda: b.recv(0, copy=False), lambda: b.recv(None)):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_the_c_methods_have_the_python_signatures():
    """inspect sees send's and recv's parameters (the benchmark asks whether recv takes
    `copy`), and help() their docstrings."""
    import inspect
    assert list(inspect.signature(bus1py.Peer.send).parameters) == [
        "self", "destinations", "payload", "handles", "fds", "unreachable_error"]
    assert list(inspect.signature(bus1py.Peer.recv).parameters) == ["self", "timeout", "copy", "node"]
    assert "EDQUOT" in bus1py.Peer.send.__doc__ and "copy=False" in bus1py.Peer.recv.__doc__



def test_peer_keeps_the_layout_of_peercore(make_bus):
    """Peer is gathered from one module per concept (peerbase, nodes, sending, receiving):
    none of those classes adds a slot, so a Peer is PeerCore's layout plus a weak
    reference, with no __dict__; every method the C code calls back is found, and a
    pickled Peer still unpickles through bus1py.bus._restore as the same peer."""
    import pickle

    from bus1py._messages import PeerCore
    mro = bus1py.Peer.__mro__
    between = mro[1:mro.index(PeerCore)]
    assert [c.__module__ for c in between] == ["bus1py.nodes", "bus1py.sending", "bus1py.receiving",
                                               "bus1py.peerbase"]
    assert all(vars(c)["__slots__"] == () for c in between)
    for name in ("_frame", "_send_general", "_send_failed", "_recv_general", "_recv_failed",
                 "_recv_node_failed", "_attach", "_send_reply"):
        assert callable(getattr(bus1py.Peer, name)), name
    bus = make_bus()
    p = bus.peer()
    assert not hasattr(p, "__dict__")
    with pytest.raises(AttributeError):
        p.anything = 1
    fn = p.__reduce__()[0]
    assert (fn.__module__, fn.__qualname__) == ("bus1py.bus", "_restore")
    assert pickle.loads(pickle.dumps(p)) == p

def test_a_kept_frame_does_not_keep_a_closed_bus_mapped(make_bus):
    """After zero-copy receives and a reservation, with no message or reservation left,
    close unmaps the bus although the peers' C methods kept this thread's frame."""
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    with a.reserve([h], 8) as r:
        r.payload[:] = b"reserved"
    a.send([h], b"x")
    assert bytes(b.recv(0, copy=False).payload) == b"reserved"
    b.recv(0, copy=False).release()
    mm = bus._mmap
    bus.close()
    assert mm.closed
