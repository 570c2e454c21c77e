# Invariants: a whole check on the driver, for a trace that fits there (local.fits, then
# Events.fits): the summary is the one Spark's path gives for the same trace (summary.py;
# only `seconds` and `timings` differ), because for such a trace Spark's path too skips the
# screen and decides causal and consistent by driver.py's walk; what it computes in Spark
# -- exactly_once, fifo and node_rules, with the same definitions (direct.py) and the same
# examples in the same order -- is computed here with numpy over Events' arrays. A history
# with a causality cycle is the one thing left to Spark (check_local returns None).
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from . import kinds as K
from . import vclock, whole
from .driver import DRIVER_MAX_CELLS
from .driver import Skeleton, causal_and_consistent
from .examples import DUPLICATED, LOST, NOT_A_DESTINATION, event, inversion, origin_kind
from .local import Events, distinct_sorted, member
from .summary import PROPERTIES, all_hold, build

WITNESS = "not needed: decided exactly on the driver"


def check_local(trace, exact=False, max_examples=3, keep_details=False, overview=False,
                driver_max_cells=DRIVER_MAX_CELLS):
    """(summary, details) of a trace from load.read_footers, or None when Spark must
    decide (more than DRIVER_MAX_CELLS rows x processes, unless whole.eligible: the
    kernels decide then; or a causality cycle). details:
    property -> the process of each violation (keep_details; tests count them). overview:
    the summary gets the report's "overview" (overview.py). driver_max_cells: as
    Checker's (tests lower it to send small traces to the kernels)."""
    t0 = time.perf_counter()
    timings = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            timings[name] = time.perf_counter() - t

    if trace.rows == 0:
        summary = build(trace.path, 0, 0, "not run", "empty trace", all_hold(), {},
                        time.perf_counter() - t0, timings)
        if overview:
            summary["overview"] = _overview(trace, None)
        return summary, (dict.fromkeys(PROPERTIES) if keep_details else {})
    ev = timed("main_pass", Events, trace)
    screen = whole.screen_message(trace, exact)
    if whole.eligible(trace, exact):
        # the exact path is certain: the Spark path would check it whole in one task
        info, details = whole.check(trace, None, max_examples, driver_max_cells,
                                    whole.witness_message(trace, exact),
                                    vclock.status(trace.files), ev=ev)
        if info["cycle"]:
            return None
        timings.update(info["seconds"])
        props, wmsg = info["properties"], info["witness"]
    else:
        if not ev.fits(driver_max_cells):
            return None
        props, details = direct_properties(ev, max_examples, timed)
        if not timed("driver", driver_walk, ev, max_examples, props, details):
            return None
        wmsg = WITNESS
    summary = build(trace.path, trace.rows, len(ev.procs), screen, wmsg, props, {},
                    time.perf_counter() - t0, timings)
    if overview:
        summary["overview"] = _overview(trace, ev)
    return summary, ({k: details.get(k) for k in PROPERTIES} if keep_details else {})


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


def driver_walk(ev, max_examples, props, details):
    """causal and consistent by driver.py's walk into props and details; False (nothing
    added) when the history has a causality cycle."""
    sk = Skeleton(ev.skeleton_columns())
    clock = sk.vector_clocks()
    if clock is None:
        return False
    found = causal_and_consistent(SimpleNamespace(max_examples=max_examples), sk, clock)
    for name, (v, n, ex) in zip(("causal", "consistent"), found):
        props[name] = {"ok": n == 0, "violations": int(n), "examples": ex, "method": "exact"}
        details[name] = [int(p) for p in v]
    return True


def _overview(trace, ev):
    from .overview import empty_overview, overview_local
    return overview_local(ev) if ev is not None else empty_overview(trace.path)


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
    not-a-destination (message, process) pairs, as direct.exactly_once."""
    pairs = ev.dest_of
    universe = distinct_sorted(np.concatenate([ev.procs, distinct_sorted(pairs[:, 1])]))
    width = len(universe)
    # pairs are sorted by (origin row, destination), so dest_key is ascending
    dest_key = pairs[:, 0] * width + np.searchsorted(universe, pairs[:, 1])
    deliv = np.flatnonzero(ev.code == K.DELIVER)
    recv_key = ev.origin[deliv] * width + np.searchsorted(universe, ev.process[deliv])
    lost = pairs[~member(dest_key, np.sort(recv_key))]
    if len(lost) and (ev.code == K.DESTROY).any():
        # the bus drops data for a node its receiver saw destroyed: not a loss
        gone = deliv[ev.is_destroy[deliv] & ev.has_node[deliv]]
        destroyed = set(zip(ev.process[gone].tolist(), ev.node[gone].tolist()))
        o, d = lost[:, 0], lost[:, 1]
        keep = [od or not hn or (p, n) not in destroyed for od, hn, p, n in zip(
            (ev.code[o] == K.DESTROY).tolist(), ev.has_node[o].tolist(), d.tolist(),
            ev.node[o].tolist())]
        lost = lost[np.array(keep, bool)]
    first = deliv[ev.first[deliv]]
    first_key = recv_key[ev.first[deliv]]
    not_dest = first[~member(first_key, dest_key)]
    dup = first[ev.dup[first] & member(first_key, dest_key)]
    # (msg, process, origin row, problem) of every violation, in Spark's example order
    rows = [(ev.msg[lost[:, 0]], lost[:, 1], lost[:, 0], LOST),
            (ev.msg[not_dest], ev.process[not_dest], ev.origin[not_dest], NOT_A_DESTINATION),
            (ev.msg[dup], ev.process[dup], ev.origin[dup], DUPLICATED)]
    msg = np.concatenate([r[0] for r in rows])
    proc = np.concatenate([r[1] for r in rows])
    origin = np.concatenate([r[2] for r in rows])
    problem = [r[3] for r in rows for _ in range(len(r[0]))]
    examples = []
    for j in np.lexsort((proc, msg))[:k]:
        o, m, p = int(origin[j]), int(msg[j]), int(proc[j])
        at = (int(ev.process[o]), int(ev.seq[o]))
        seqs = []
        if problem[j] != LOST:
            seqs = ev.seq[deliv[(ev.origin[deliv] == o) & (ev.process[deliv] == p)]].tolist()
        evs = [event(*at, origin_kind(ev.code[o] == K.DESTROY), m)]
        evs += [event(p, s, "deliver", m, origin=at) for s in sorted(seqs)[:3]]
        examples.append({"problem": problem[j], "process": p, "deliveries": len(seqs),
                         "message": evs[0], "events": evs, "highlight": [m]})
    return None, proc.tolist(), len(msg), examples


def _stamp_witness(ev):
    """W1 (every process first-delivers in increasing stamp order) and W2 (every send is
    stamped above everything its process sent or delivered before): main_pass.py's
    w1_fails and w2_fails are both zero."""
    stamped = (ev.code <= K.DESTROY) | (ev.code == K.DELIVER)
    firsts = (ev.code == K.DELIVER) & ev.first
    cuts = np.flatnonzero(np.diff(ev.process)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, ev.n]):
        for mask, check in ((firsts[lo:hi], None), (stamped[lo:hi], ev.code[lo:hi])):
            st = ev.stamp[lo:hi][mask]
            if len(st) < 2:
                continue
            before = np.maximum.accumulate(st)[:-1]
            later = st[1:] <= before
            if check is not None:
                later &= check[mask][1:] <= K.DESTROY
            if later.any():
                return False
    return True


def fifo(ev, k):
    """As direct.fifo: skipped when the stamps witness it, else per (receiver, sender) the
    largest send seq first-delivered before each first delivery."""
    if ev.stamp is not None and _stamp_witness(ev):
        return "stamp witness", None, 0, []
    fd = np.flatnonzero((ev.code == K.DELIVER) & ev.first)
    fd = fd[np.lexsort((ev.seq[fd], ev.sender[fd], ev.process[fd]))]
    gid = _groups(ev.process[fd], ev.sender[fd])
    ss = ev.send_seq[fd]
    big = int(ss.max()) + 2 if len(ss) else 1
    upto = np.maximum.accumulate(ss + gid * big) - gid * big if len(ss) else ss
    prev = np.full(len(fd), -1, np.int64)
    prev[1:] = np.where(gid[1:] == gid[:-1], upto[:-1], -1)
    bad = np.flatnonzero(prev > ss)
    bad = bad[np.lexsort((ev.seq[fd[bad]], ev.process[fd[bad]]))]
    examples = []
    for j in bad[:k]:
        start = np.flatnonzero(gid == gid[j])[0]
        e = fd[start + int(np.flatnonzero(ss[start:j] == prev[j])[0])]
        examples.append(inversion(_delivery(ev, fd[j]), _delivery(ev, e),
                                  int(ev.process[fd[j]])))
    return "exact", ev.process[fd[bad]].tolist(), len(bad), examples


def _delivery(ev, i):
    return {"msg": int(ev.msg[i]), "sender_process": int(ev.sender[i]),
            "send_seq": int(ev.send_seq[i]), "is_destroy": bool(ev.is_destroy[i]),
            "deliver_seq": int(ev.seq[i])}


def node_rules(ev, k):
    """As direct.node_rules: per (receiver, node), data delivered after the first
    NODE_DESTROY delivered there."""
    if not (ev.code == K.DESTROY).any():
        return None, None, 0, []
    d = np.flatnonzero((ev.code == K.DELIVER) & ev.has_node)
    d = d[np.lexsort((ev.seq[d], ev.node[d], ev.process[d]))]
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
