"""Call and reply (bus1py/call.py), and the receive for one node underneath.

Invariants checked:
  - `call` returns its own reply, with the handles and descriptors it carries, and a
    service's `reply` answers only a request, once;
  - messages for other nodes that arrive while a call waits stay queued, in their order,
    and nothing of a finished call is left in the caller's queue (no NODE_RELEASE of the
    reply node, no late reply);
  - `recv(node=h)` takes what `recv` would, in the same order, restricted to h (a model);
  - TimeoutError after the timeout, and the late reply is dropped, not taken by the next
    call; ConnectionResetError as soon as the service's node is destroyed, or its owner
    dies (across unrelated processes, within a second), with its NODE_DESTROY left queued;
  - threads of one peer and `acall` each get their own reply;
  - a service in its own interpreter serves clients in theirs that come and go.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

import bus1py
import service
from bus1py import Message, MessageType, Request

NOTICE = 1.0  # seconds from a service's death to the caller's ConnectionResetError


@pytest.fixture
def bus(make_bus):
    return make_bus(max_peers=16, pool_size=1 << 20)


@pytest.fixture
def served(bus):
    """(a Service, a client peer, the client's handle to the service's node)"""
    svc = Service(bus)
    client = bus.peer()
    return svc, client, svc.handle_for(client)


class Service:
    """A service thread on its own peer: answers b"echo:<x>" with b"re:<x>" (and, on the
    way, sends b"noise:<x>" to the caller's `noise` handle if one was given); b"hold"
    is never answered; b"destroy" destroys the service's node instead of answering."""

    def __init__(self, bus, noise_node=None, noise_owner=None):
        self.peer = bus.peer()
        self.node = self.peer.create_node()
        self.noise = noise_owner.transfer(noise_node, self.peer) if noise_node else None
        self.held = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def handle_for(self, client):
        return self.peer.transfer(self.node, client)

    def run(self):
        while True:
            try:
                msg = self.peer.recv(node=self.node, timeout=10)
            except (TimeoutError, BrokenPipeError, ValueError):
                return
            if not isinstance(msg, Request):
                continue
            p = msg.payload
            if p == b"stop":
                msg.reply(b"bye")
                return
            if p == b"hold":
                self.held.append(msg)
            elif p == b"destroy":
                self.peer.destroy(self.node)
                return
            else:
                if self.noise:
                    self.peer.send(self.noise, b"noise:" + p)
                msg.reply(b"re:" + p, handles=msg.handles, fds=msg.fds)
                for fd in msg.fds:
                    os.close(fd)

    def stop(self, client, h):
        assert client.call(h, b"stop", timeout=10).payload == b"bye"
        self.thread.join(10)
        assert client.bus.check() == []


@pytest.mark.timeout(60)
def test_call_and_reply_carry_payload_handles_and_fds(served):
    svc, client, h = served
    mine = client.create_node()
    r, w = os.pipe()
    try:
        reply = client.call(h, bytearray(b"x"), handles=[mine], fds=[r], timeout=10)
        assert (reply.type, reply.payload, reply.handles) == (MessageType.DATA, b"re:x", (mine,))
        assert type(reply) is Message and len(reply.fds) == 1
        os.write(w, b"!")  # the descriptor came there and back: the same pipe
        assert os.read(reply.fds[0], 1) == b"!"
        os.close(reply.fds[0])
        with pytest.raises(ValueError, match="not a request"):
            reply.reply(b"no")
    finally:
        os.close(r)
        os.close(w)
    svc.stop(client, h)
    assert client.query().queued_entries == 0  # no NODE_RELEASE of a reply node, nothing else
    assert svc.peer.query().queued_entries == 0


@pytest.mark.timeout(60)
def test_messages_for_other_nodes_stay_queued_in_their_order(bus):
    client = bus.peer()
    other = client.create_node()
    svc = Service(bus, other, client)
    h = svc.handle_for(client)
    for i in range(3):
        assert client.call(h, b"echo%d" % i, timeout=10).payload == b"re:echo%d" % i
    got = [client.recv(0).payload for _ in range(3)]
    assert got == [b"noise:echo0", b"noise:echo1", b"noise:echo2"]
    with pytest.raises(BlockingIOError):
        client.recv(0)
    svc.stop(client, h)


@pytest.mark.timeout(60)
def test_reply_once_and_only_to_a_request(bus):
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    h = b.transfer(node, a)
    a.send(h, b"plain")
    with pytest.raises(ValueError, match="not a request"):
        b.recv(0).reply(b"x")
    done = threading.Thread(target=lambda: a.call(h, b"q", timeout=10))
    done.start()
    req = b.recv(node=node, timeout=10)
    assert isinstance(req, Request) and req.handles == ()
    req.reply(b"r")
    done.join(10)
    with pytest.raises(ValueError, match="answered already"):
        req.reply(b"again")
    assert a.query().queued_entries == 0


@pytest.mark.timeout(60)
def test_timeout_and_the_late_reply_is_dropped(served):
    svc, client, h = served
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no reply"):
        client.call(h, b"hold", timeout=0.2)
    assert time.monotonic() - t0 >= 0.2
    svc.held.pop().reply(b"late")  # to the reply node the next call takes again
    assert client.call(h, b"echo", timeout=10).payload == b"re:echo"
    with pytest.raises(BlockingIOError):
        client.recv(0)
    svc.stop(client, h)


@pytest.mark.timeout(60)
def test_a_caller_gone_before_the_reply_leaves_the_service_only_its_own_notices(bus):
    """The reply node is quiet: its destruction (the caller disconnected) and the
    service's release after its late reply queue nothing; the caller's handle to the
    service's node going is the service's NODE_RELEASE, for its own node."""
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    h = b.transfer(node, a)
    with pytest.raises(TimeoutError):
        a.call(h, b"q", timeout=0.05)
    req = b.recv(node=node, timeout=10)
    a.disconnect()
    req.reply(b"late")  # to a destroyed node: dropped, no error
    msg = b.recv(0)
    assert (msg.type, msg.destination) == (MessageType.NODE_RELEASE, node)
    with pytest.raises(BlockingIOError):
        b.recv(0)
    assert bus.check() == [] and b.query().held_handles == 1  # its own node's handle alone


@pytest.mark.timeout(60)
def test_destroyed_service_resets_the_call_and_its_notice_stays(served):
    svc, client, h = served
    with pytest.raises(ConnectionResetError, match="destroyed"):
        client.call(h, b"destroy", timeout=10)
    msg = client.recv(0)
    assert (msg.type, msg.destination) == (MessageType.NODE_DESTROY, h)
    with pytest.raises(ConnectionResetError):  # known dead: at once
        client.call(h, b"again", timeout=10)


@pytest.mark.timeout(60)
def test_threads_and_acall_each_get_their_own_reply(served):
    svc, client, h = served
    errors = []

    def caller(k):
        try:
            for i in range(50):
                p = b"%d-%d" % (k, i)
                assert client.call(h, p, timeout=10).payload == b"re:" + p
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()

    async def acalls():
        replies = await asyncio.gather(*(client.acall(h, b"a%d" % i, timeout=10) for i in range(8)))
        return [r.payload for r in replies]

    assert asyncio.run(acalls()) == [b"re:a%d" % i for i in range(8)]
    for t in threads:
        t.join(30)
    assert errors == []

    async def held():
        with pytest.raises(TimeoutError):
            await client.acall(h, b"hold", timeout=0.1)
        task = asyncio.ensure_future(client.acall(h, b"hold"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(held())
    for msg in svc.held:  # late replies: dropped at the reply nodes' next calls
        msg.reply(b"late")
    assert [client.call(h, b"x%d" % i, timeout=10).payload for i in range(3)] == [b"re:x0", b"re:x1", b"re:x2"]
    svc.stop(client, h)
    assert client.query().queued_entries == 0


@pytest.mark.timeout(60)
def test_recv_node_waits_times_out_and_outlasts_signals(bus):
    a, b = bus.peer(), bus.peer()
    node, other = b.create_node(), b.create_node()
    h, ho = b.transfer(node, a), b.transfer(other, a)
    a.send(ho, b"other")
    with pytest.raises(BlockingIOError):
        b.recv(0, node=node)
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            b.recv(node=node, timeout=0.3)
        assert time.monotonic() - t0 >= 0.3 and fired
        threading.Timer(0.2, a.send, (h, b"late")).start()
        assert b.recv(timeout=10, node=node).payload == b"late"  # woken behind the other message
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert b.recv(0).payload == b"other"


def test_bad_arguments_change_nothing(bus):
    a = bus.peer()
    with pytest.raises(TypeError, match="handle id"):
        a.call("x", b"p")
    with pytest.raises(ValueError, match="timeout"):
        a.call(1, b"p", timeout=-1)
    with pytest.raises(OSError, match="no handle"):
        a.call(12345, b"p", timeout=1)
    with pytest.raises(TypeError, match="recv\\(\\) got an unexpected keyword argument 'nod'"):
        a.recv(nod=1)
    with pytest.raises(ValueError, match="copy=False"):
        a.recv(node=1, copy=False)
    assert a.query().queued_entries == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=12), st.lists(st.sampled_from([None, 0, 1, 2]), max_size=14))
def test_recv_node_takes_what_recv_would_for_that_node(sends, takes):
    """A model: the queue is a list in send order; recv(node=k) takes the first entry for
    k, recv() the first of all; both leave the rest in order."""
    with contextlib.closing(bus1py.Bus.create(max_peers=4, pool_size=1 << 16)) as bus:
        try:
            _model_run(bus, sends, takes)
        finally:
            bus.unlink()


def _model_run(bus, sends, takes):
    a, b = bus.peer(), bus.peer()
    nodes = [b.create_node() for _ in range(3)]
    hs = [b.transfer(n, a) for n in nodes]
    model = []
    for i, k in enumerate(sends):
        a.send(hs[k], b"%d" % i)
        model.append((nodes[k], b"%d" % i))
    for k in takes:
        want = [m for m in model if k is None or m[0] == nodes[k]]
        try:
            msg = b.recv(0) if k is None else b.recv(node=nodes[k], timeout=0)
        except BlockingIOError:
            assert not want
            continue
        assert (msg.destination, msg.payload) == want[0]
        model.remove(want[0])
    rest = [(m.destination, m.payload) for m in b.recv_many(100, 0)] if model else []
    assert rest == model


CLIENT = textwrap.dedent("""
    import sys, time, bus1py
    peer = bus1py.Bus.open(sys.argv[1]).peer()
    h = peer.lookup("svc")
    for i in range(int(sys.argv[2])):
        assert peer.call(h, b"%d" % i, timeout=10).payload == b"re:%d" % i
    print("ok", flush=True)
    if sys.argv[3] == "hold":
        try:
            peer.call(h, b"hold", timeout=20)
        except ConnectionResetError:
            print("reset", time.monotonic(), flush=True)
""")


@pytest.mark.timeout(90)
def test_a_service_and_unrelated_clients_and_its_death_mid_call(bus):
    """Separate interpreters: clients come and go (each disconnects at exit, leaving the
    service a NODE_RELEASE or nothing to skip), then two wait in a call the service holds
    while it is SIGKILLed: both get ConnectionResetError within a second."""
    run = [sys.executable, "-c"]
    server = service.start(bus.name, "open")
    clients = goers = []
    try:
        goers = [subprocess.Popen(run + [CLIENT, bus.name, "20", "go"], stdout=subprocess.PIPE, text=True)
                 for _ in range(2)]  # clients that come and go, beside those that stay
        clients = [subprocess.Popen(run + [CLIENT, bus.name, "5", "hold"], stdout=subprocess.PIPE, text=True)
                   for _ in range(2)]
        for c in goers:
            assert c.stdout.readline().strip() == "ok" and c.wait(timeout=30) == 0
        for c in clients:
            assert c.stdout.readline().strip() == "ok"
        time.sleep(0.3)  # both wait in their "hold" call
        killed = time.monotonic()
        os.kill(server.pid, signal.SIGKILL)
        for c in clients:
            kind, at = c.stdout.readline().split()
            assert kind == "reset" and float(at) - killed < NOTICE
            assert c.wait(timeout=10) == 0
    finally:
        for p in [server] + clients + goers:
            p.kill()
            p.wait()
