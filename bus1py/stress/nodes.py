"""The bus-only actions of a stress process: nodes, handle passing, destroy, release.

Invariants (the exact destroy recipients, docs/STRESS.md "Exact destroy recipients"):
  - Half the nodes a process creates may be destroyed and are never fully released by
    their holders; the other half are never destroyed and may be released by anyone.  So
    a destroy row's `dests` is exactly the owner plus everyone it passed the node to.
  - On NODE_DESTROY a holder releases every reference it still holds to the dead handle.
  - A destroy row carries the destroy's stamp, as `Peer.destroy` returns it.
"""
from __future__ import annotations

import time

from ..message import HANDLE_INVALID
from .ids import DESTROY_BIT, NODE_SHIFT, node_id


class NodeActions:
    """Mixed into worker.BusWorker, whose state (peer, own, extra, refs, ...) it uses."""

    def do_node_create(self, a):
        # Half the nodes we create may be destroyed and are never fully released by their
        # holders; the other half are never destroyed and may be released by anyone.  The
        # split keeps every destroy's recipient set exactly known to its owner: the owner
        # plus everyone it passed the node to (handles are registered at the send, the
        # pass precedes the destroy in the owner's order, and nobody drops its last
        # reference to a destroyable node), so `dests` of a destroy row is exact.
        destroyable = 1 if self.all_destroyable else a.pick & 1
        pool = self.destroyable if destroyable else self.keep
        if len(pool) >= self.cfg.max_extra_nodes // 2:
            return  # cap reached: the action is a no-op, the plan is unchanged
        now = time.monotonic_ns()
        try:
            h = self.peer.create_node()
        except OSError as e:
            self.error(e, "create_node")
            return
        nid = node_id(self.index, self.node_count << 1 | destroyable)
        self.node_count += 1
        self.own[h] = nid
        pool.append(h)
        self.extra.append(h)
        self.trace.record("internal", None, now, node=nid, action="node_create")

    def do_pass_handle(self, a):
        target = a.targets[0]
        hs = self.out_handles.get(target)
        if not hs or not self.extra:
            return
        carry = self.extra[a.pick % len(self.extra)]
        if self.send(a, [hs[0]], [target], [self.node_of[hs[0]]], carry=(carry,)):
            self.passed.setdefault(carry, set()).add(target)

    def learn_handles(self, payload, handles):
        count = int.from_bytes(payload[8:10], "little")
        for i, h in enumerate(handles[:count]):
            if h == HANDLE_INVALID:
                continue  # its node's destruction is ordered before this message
            nid = int.from_bytes(payload[10 + 8 * i:18 + 8 * i], "little")
            if h in self.own:
                continue  # our own node came back (a lone process): we track it as its owner
            self.refs[h] = self.refs.get(h, 0) + 1  # one more reference (same id per node)
            if h not in self.node_of:
                self.node_of[h] = nid
                self.out_handles.setdefault(nid >> NODE_SHIFT, []).append(h)

    def forget_handle(self, h):
        nid = self.node_of.pop(h, None)
        self.refs.pop(h, None)
        if nid is not None:
            hs = self.out_handles.get(nid >> NODE_SHIFT, [])
            if h in hs:
                hs.remove(h)
            if not hs:  # a gone owner (churn) leaves no key behind: memory stays flat
                self.out_handles.pop(nid >> NODE_SHIFT, None)

    def on_destroyed(self, h):
        """NODE_DESTROY for a handle of ours: drop every reference we still hold."""
        if h in self.own:
            return  # our own node: its handle went with destroy(release=True)
        for _ in range(self.refs.get(h, 0)):
            try:
                self.peer.release(h)
            except OSError as e:
                self.error(e, "release-destroyed")
                break
        self.forget_handle(h)

    def do_node_destroy(self, a):
        if not self.destroyable:
            return
        h = self.destroyable.pop(a.pick % len(self.destroyable))
        if not self.destroy_node(h):
            self.destroyable.append(h)

    def destroy_node(self, h) -> bool:
        """Destroy one of our nodes (and release our handle), traced with its exact
        recipients: us and everyone we passed it to."""
        nid = self.own[h]
        now = time.monotonic_ns()
        try:
            stamp = self.peer.destroy(h, release=True)
        except OSError as e:
            self.error(e, "destroy")
            return False
        if h in self.extra:
            self.extra.remove(h)
        dests = sorted({self.index} | self.passed.pop(h, set()))
        self.trace.record("destroy", DESTROY_BIT | nid, now, dests=dests, node=nid, stamp=stamp,
                          action="node_destroy")
        return True

    def do_release(self, a):
        # one reference of a node we hold more than once, or a never-destroyed node outright
        cands = sorted(h for h, r in self.refs.items() if r >= 2 or not (self.node_of.get(h, 1) & 1))
        if not cands:
            return
        h = cands[a.pick % len(cands)]
        now = time.monotonic_ns()
        try:
            self.peer.release(h)
        except OSError as e:
            self.error(e, "release")
            return
        self.refs[h] -= 1
        self.trace.record("internal", None, now, node=self.node_of.get(h), action="release")
        if not self.refs[h]:
            self.forget_handle(h)
