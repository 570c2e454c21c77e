"""The stress process with its own peer of the bus: the whole API (nodes, handles,
destroy, the bus's stamps), on Worker's loop.

Invariants: a failed call changes nothing on the bus (SPEC section 5), so it leaves no
trace row; it is only counted by errno. A delivery is traced with the sender's id (the
payload's first 8 bytes) and the node it arrived on; a NODE_DESTROY as a deliver of
DESTROY_BIT | node; a NODE_RELEASE only as an internal row.
"""
from __future__ import annotations

import time

from ..message import MessageType
from .ids import DESTROY_BIT, NODE_SHIFT, node_id
from .nodes import NodeActions
from .worker import FILL, Worker
from .workload import ACTION_KINDS

_DATA, _DESTROY = MessageType.DATA, MessageType.NODE_DESTROY


class BusWorker(NodeActions, Worker):
    """A process with its own peer of the bus, the whole API."""

    kinds = ACTION_KINDS

    def __init__(self, spec):
        super().__init__(spec)
        s, cfg = spec, self.cfg
        self.peer = s.peer
        # handles this peer holds to others' nodes: process -> [handle, ...] (primary first)
        self.out_handles = {p: [h] for p, h in s.handles.items()}
        self.node_of = {h: node_id(p, 0) for p, h in s.handles.items()}  # our handle -> node id
        # our own nodes: owner handle -> node id; extra nodes (created while running)
        self.own = {s.own_handle: node_id(s.index, 0)}
        self.extra = []        # own extra node handles (alive)
        self.destroyable = []  # ... of which we may destroy these
        self.keep = []         # ... and never destroy these
        self.refs = {}         # received handle -> references we hold (valid arrivals - releases)
        self.node_count = 1
        self.passed = {}  # own extra handle -> processes it was passed to
        # with churn: processes from n_stable up are mortal (churn.py); 0: no churn
        self.n_stable = cfg.processes - cfg.churn_slots if cfg.churn else 0
        self.all_destroyable = False  # churn.py: a mortal's holders must never drop its nodes

    def on_message(self, msg):
        now = time.monotonic_ns()
        t = msg.type
        if t is _DATA:
            payload = msg.payload
            mid = int.from_bytes(payload[:8], "little")
            self.trace.record("deliver", mid, now, node=self.own.get(msg.destination, self.node_of.get(msg.destination)),
                              stamp=msg.stamp)
            if msg.handles:
                self.learn_handles(payload, msg.handles)
        elif t is _DESTROY:
            node = self.own.get(msg.destination, self.node_of.get(msg.destination))
            self.trace.record("deliver", DESTROY_BIT | (node or 0), now, node=node, stamp=msg.stamp)
            self.on_destroyed(msg.destination)
            if msg.destination in self.own and msg.destination != self.spec.own_handle:
                del self.own[msg.destination]  # our destroyed node: nothing names it any more
        else:  # NODE_RELEASE: nobody holds our node any more; local bookkeeping only
            self.trace.record("internal", None, now, node=self.own.get(msg.destination),
                              stamp=msg.stamp, action="node_release")
        self.n_deliv += 1
        self.last_recv = now

    def drain(self, limit: int = 512) -> int:
        """Receive whatever is ready (up to `limit`), without waiting."""
        recv = self.peer.recv
        n = 0
        while n < limit:
            try:
                msg = recv(0)
            except BlockingIOError:
                break
            except OSError as e:
                self.error(e, "recv")
                break
            self.on_message(msg)
            n += 1
        return n

    def wait(self, timeout):
        """Wait up to `timeout` s for one message (the pipe is polled by the caller)."""
        try:
            self.on_message(self.peer.recv(timeout))
        except TimeoutError:
            pass
        except OSError as e:
            self.error(e, "recv")

    def idle(self):
        try:
            self.on_message(self.peer.recv(0.02))
        except TimeoutError:
            pass
        except OSError as e:
            self.error(e, "recv")
            time.sleep(0.01)
        self.drain()
        self.sample_depth()

    def sample_depth(self):
        try:
            depth = self.peer.query().queued_messages
        except OSError:
            return
        if depth > self.max_depth:
            self.max_depth = depth

    def send(self, action, handles, dest_procs, nodes, carry=()):
        mid = self.new_id()
        size = action.size
        if carry:  # header: id, count, node ids of the carried handles (the receiver maps them)
            head = mid.to_bytes(8, "little") + len(carry).to_bytes(2, "little") + b"".join(
                self.own[h].to_bytes(8, "little") for h in carry)
        else:
            head = mid.to_bytes(8, "little")
        payload = head + FILL[:max(0, size - len(head))]
        now = time.monotonic_ns()
        try:
            stamp = self.peer.send(handles, payload, handles=carry) if carry else self.peer.send(handles, payload)
        except OSError as e:
            self.error(e, "send")
            return False
        self.trace.record("send", mid, now, dests=dest_procs,
                          node=nodes[0] if len(nodes) == 1 else None, stamp=stamp,
                          action=action.kind, size=len(payload))
        self.n_sent += 1
        return True

    def do_unicast(self, a):
        target = a.targets[0]
        if self.n_stable and a.pick % 4 == 1:  # churn: now and then to a mortal's node
            hs = [h for o, l in self.out_handles.items() if o >= self.n_stable for h in l]
            if hs:
                h = hs[(a.pick >> 2) % len(hs)]
                self.send(a, [h], [self.node_of[h] >> NODE_SHIFT], [self.node_of[h]])
                return
        if self.extra and a.pick % 4 == 0:  # now and then: loop back to a node we created
            h = self.extra[(a.pick >> 2) % len(self.extra)]
            self.send(a, [h], [self.index], [self.own[h]])
            return
        hs = self.out_handles.get(target)
        if not hs:
            return
        h = hs[a.pick % len(hs)]
        self.send(a, [h], [target], [self.node_of[h]])

    def do_multicast(self, a):
        handles, procs, nodes = [], [], []
        for t in a.targets:
            hs = self.out_handles.get(t)
            if hs:
                handles.append(hs[0])
                procs.append(t)
                nodes.append(self.node_of[hs[0]])
        if handles:
            self.send(a, handles, procs, nodes)
