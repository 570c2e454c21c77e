"""exactly_once, fifo and node_rules by the array engine: each decided here once, with
numpy over events.py's arrays.

Invariants: the definitions are the reference's (reference.py), and the examples come in
one order: (message, process) for exactly_once, (process, seq) for the others; so a
trace's summary does not depend on the path that checked it (all but `seconds` and
`timings`): the driver's Events, or the Spark path's tasks by message (violations,
examples, excused) and the walk's task (ByPosition). Each is decided exactly from the
rows; stamps are never read. Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from .. import kinds as K
from ..examples import DUPLICATED, LOST, NOT_A_DESTINATION, event, inversion, origin_kind
from .events import distinct_sorted, lex_order, member


def direct_properties(ev, max_examples, timed):
    """({property: its entry}, {property: processes of its violations, or None}) for
    exactly_once, fifo and node_rules; timed(name, fn, *args) runs and times each."""
    props, details = {}, {}
    for name, fn in (("exactly_once", exactly_once), ("fifo", fifo),
                     ("node_rules", node_rules)):
        method, v, n, ex = timed(name, fn, ev, max_examples)
        props[name] = {"ok": n == 0, "violations": int(n), "examples": ex}
        if method:
            props[name]["method"] = method
        details[name] = v
    return props, details


def _groups(*keys):
    """Group ids (0, 1, ...) of rows sorted by keys: a new group where any key changes."""
    new = np.zeros(len(keys[0]), bool)
    if len(new):
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return np.cumsum(new) - 1


def exactly_once(ev, k):
    """Lost (unless excused by a NODE_DESTROY of the send's node there), duplicated and
    not-a-destination (message, process) pairs."""
    msg, proc, origin, problem = violations(ev)
    return None, proc.tolist(), len(msg), examples(ev, msg, proc, origin, problem, k)


def violations(ev, excuse=True):
    """(msg, process, origin row, problem) arrays of exactly_once's violations: the lost
    pairs, then the not-a-destination and the duplicated first deliveries (problem: 0, 1,
    2, the index in PROBLEMS). excuse: drop the losses a NODE_DESTROY excuses; without it
    every row of the messages' deliveries must be in ev, not the destroys' (the Spark
    path's tasks by message excuse the losses after them, spark/by_message.py)."""
    pairs = ev.dest_of
    universe = distinct_sorted(np.concatenate([ev.procs, distinct_sorted(pairs[:, 1])]))
    width = len(universe)
    # pairs are sorted by (origin row, destination), so dest_key is ascending
    dest_key = pairs[:, 0] * width + np.searchsorted(universe, pairs[:, 1])
    deliv = np.flatnonzero(ev.code == K.DELIVER)
    recv_key = ev.origin[deliv] * width + np.searchsorted(universe, ev.process[deliv])
    lost = pairs[~member(dest_key, np.sort(recv_key))]
    if excuse and len(lost) and (ev.code == K.DESTROY).any():
        # the bus drops data for a node its receiver saw destroyed: not a loss
        gone = deliv[ev.is_destroy[deliv] & ev.has_node[deliv]]
        destroyed = set(zip(ev.process[gone].tolist(), ev.node[gone].tolist()))
        lost = lost[excused(ev.code[lost[:, 0]] == K.DESTROY, ev.has_node[lost[:, 0]],
                            lost[:, 1], ev.node[lost[:, 0]], destroyed) == 0]
    first = deliv[ev.first[deliv]]
    first_key = recv_key[ev.first[deliv]]
    to_dest = member(first_key, dest_key)
    not_dest = first[~to_dest]
    dup = first[ev.dup[first] & to_dest]
    return (np.concatenate([ev.msg[lost[:, 0]], ev.msg[not_dest], ev.msg[dup]]),
            np.concatenate([lost[:, 1], ev.process[not_dest], ev.process[dup]]),
            np.concatenate([lost[:, 0], ev.origin[not_dest], ev.origin[dup]]),
            np.repeat(np.arange(3, dtype=np.int8), [len(lost), len(not_dest), len(dup)]))


PROBLEMS = (LOST, NOT_A_DESTINATION, DUPLICATED)


def excused(origin_is_destroy, has_node, dest, node, destroyed):
    """1 where a lost pair is excused: its origin is data for a node and its destination
    delivered a NODE_DESTROY of that node ((process, node) in `destroyed`), else 0."""
    return np.array([not od and hn and (p, n) in destroyed for od, hn, p, n in zip(
        origin_is_destroy.tolist(), has_node.tolist(), dest.tolist(), node.tolist())],
        np.int8)


def examples(ev, msg, proc, origin, problem, k):
    """The first k of violations' rows as examples, in the one order: by (message id,
    process), a pair being one violation only."""
    out = []
    deliv = np.flatnonzero(ev.code == K.DELIVER)
    for j in np.lexsort((proc, msg))[:k]:
        o, m, p = int(origin[j]), int(msg[j]), int(proc[j])
        seqs = []
        if PROBLEMS[problem[j]] != LOST:
            seqs = ev.seq[deliv[(ev.origin[deliv] == o) & (ev.process[deliv] == p)]].tolist()
        out.append(example(PROBLEMS[problem[j]], p, m, int(ev.process[o]), int(ev.seq[o]),
                           ev.code[o] == K.DESTROY, seqs))
    return out


def example(problem, process, msg, o_process, o_seq, o_destroy, seqs):
    """One exactly_once example: `seqs` are the seqs of the message's deliveries at
    `process`."""
    at = (o_process, o_seq)
    evs = [event(*at, origin_kind(o_destroy), msg)]
    evs += [event(process, s, "deliver", msg, origin=at) for s in sorted(seqs)[:3]]
    return {"problem": problem, "process": process, "deliveries": len(seqs),
            "message": evs[0], "events": evs, "highlight": [msg]}


# fifo works on whole processes of about this many events at a time (a (receiver, sender)
# group never spans two), so its sorts' temporaries stay a fraction of the trace's
FIFO_CHUNK = 8_000_000


def fifo(ev, k, chunk=FIFO_CHUNK):
    """Per (receiver, sender) the largest send seq first-delivered before each first
    delivery: a delivery below it is a violation."""
    starts = ev.starts
    cuts = np.append(np.unique(starts[np.searchsorted(
        starts, np.arange(0, ev.n, chunk), side="right") - 1]), ev.n)
    bads, examples = [np.zeros(0, np.int64)], []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        bad, ex = _fifo_among(ev, a, b, k - len(examples))
        bads.append(bad)
        examples += ex
    bad = np.concatenate(bads)
    return "exact", ev.process[bad].tolist(), len(bad), examples


def _fifo_among(ev, a, b, k):
    """(positions of the fifo violations among the events a..b-1, whole processes, in
    (process, seq) order; the examples of the first k)."""
    fd = a + np.flatnonzero((ev.code[a:b] == K.DELIVER) & ev.first[a:b])
    process, sender = ev.process[fd], ev.sender[fd]
    order = lex_order(process, sender)   # fd is in (process, seq) order
    fd = fd[order]
    gid = _groups(process[order], sender[order])
    del process, sender, order
    ss = ev.send_seq[fd]
    big = int(ss.max()) + 2 if len(ss) else 1
    upto = np.maximum.accumulate(ss + gid * big) - gid * big if len(ss) else ss
    prev = np.full(len(fd), -1, np.int64)
    prev[1:] = np.where(gid[1:] == gid[:-1], upto[:-1], -1)
    bad = np.flatnonzero(prev > ss)
    bad = bad[np.lexsort((ev.seq[fd[bad]], ev.process[fd[bad]]))]
    examples = []
    for j in bad[:max(k, 0)]:
        start = np.flatnonzero(gid == gid[j])[0]
        e = fd[start + int(np.flatnonzero(ss[start:j] == prev[j])[0])]
        examples.append(inversion(_delivery(ev, fd[j]), _delivery(ev, e),
                                  int(ev.process[fd[j]])))
    return fd[bad], examples


def _delivery(ev, i):
    return {"msg": int(ev.msg[i]), "sender_process": int(ev.sender[i]),
            "send_seq": int(ev.send_seq[i]), "is_destroy": bool(ev.is_destroy[i]),
            "deliver_seq": int(ev.seq[i])}


def node_rules(ev, k):
    """Per (receiver, node), data delivered after the first
    NODE_DESTROY delivered there."""
    if not (ev.code == K.DESTROY).any():
        return None, None, 0, []
    return node_rules_of(ev, k)


def node_rules_of(ev, k):
    """node_rules's answer whether or not ev holds the destroys (the streamed walk reads
    one process at a time, arrays/streamed.py)."""
    d = np.flatnonzero((ev.code == K.DELIVER) & ev.has_node)
    d = d[lex_order(ev.process[d], ev.node[d])]   # d is in (process, seq) order
    gid = _groups(ev.process[d], ev.node[d])
    pos = np.arange(len(d))
    gone = ev.is_destroy[d]
    first = np.full(gid[-1] + 1 if len(d) else 0, len(d))
    np.minimum.at(first, gid[gone], pos[gone])
    bad = np.flatnonzero(~gone & (pos > first[gid]))
    bad = bad[np.lexsort((ev.seq[d[bad]], ev.process[d[bad]]))]
    examples = []
    for j in bad[:k]:
        r, x = d[j], d[first[gid[j]]]
        node, p = int(ev.node[r]), int(ev.process[r])
        x_origin = (int(ev.sender[x]), int(ev.send_seq[x]))
        m_origin = (int(ev.sender[r]), int(ev.send_seq[r]))
        evs = [event(*x_origin, "destroy", ev.msg[x], node=node),
               event(p, ev.seq[x], "deliver", ev.msg[x], origin=x_origin, node=node),
               event(*m_origin, "send", ev.msg[r]),
               event(p, ev.seq[r], "deliver", ev.msg[r], origin=m_origin, node=node)]
        examples.append({"process": p, "node": node, "destroy": evs[0], "data": evs[2],
                         "events": evs, "highlight": [int(ev.msg[r])]})
    return None, ev.process[d[bad]].tolist(), len(bad), examples


class ByPosition:
    """The arrays fifo and node_rules read, by position from a walk Layout (layout.py) of
    validated rows, computed where they are indexed instead of held (a
    Layout of a hundred million events leaves little room for more). node, has_node: the
    placed node column, or None when the trace has no destroy (node_rules then reads
    neither)."""

    def __init__(self, lay, node=None, has_node=None):
        self.n, self.code, self.first = lay.n, lay.kind, lay.first.view(np.bool_)
        self.msg, self.is_destroy = lay.msg, lay.is_destroy
        self.node, self.has_node = node, has_node
        self.starts = lay.start[:-1]
        slot, start, procs, src = lay.slot_of, lay.start, lay.procs, lay.src
        self.process = _Computed(lambda k: procs[slot[k]])
        self.seq = _Computed(lambda k: k - start[slot[k]])
        self.sender = _Computed(lambda k: np.where(src[k] >= 0, procs[slot[src[k]]], -1))
        self.send_seq = _Computed(lambda k: np.where(src[k] >= 0,
                                                     src[k] - start[slot[src[k]]], -1))


class _Computed:
    """An array computed where it is indexed: a[k] is f(k)."""

    def __init__(self, f):
        self.f = f

    def __getitem__(self, k):
        return self.f(k)
