"""The rules of the crash explorer (tests/explore.py), and the frame its workloads
(tests/explore_workloads.py) share.

Every workload's setup makes the same frame: two survivor peers s1 and s2 held by the
trial, each owning a node (n1, n2) and holding a handle to the other's (the probes that
show no queue is stuck), and a victim peer v held only by the victim process (so the
reaper takes it when it dies) holding handles to n1 and n2.  A workload adds what it
needs, `run` is the victim's part (every operation logged before and after it, so the
trial knows what was done, undone or in flight at the kill), `check` the rules after it.

Rules every trial checks (`leave`): each survivor's node that was handed out comes back as
exactly one NODE_RELEASE once every other holder is gone; a handle a survivor got to a
node of the victim gets exactly one NODE_DESTROY (the victim's peer is always reaped, so
its nodes are destroyed); no notice is ever duplicated.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from collections import Counter

from bus1py import HANDLE_INVALID, MessageType
from bus1py._lib import lib

import killpoints as kp

LIMITS = dict(max_peers=8, max_nodes=64, max_handles=256, max_entries=256, max_dests=4,
              max_msg_handles=2, max_payload=4096, pool_size=1 << 16, spin_ns=0)
SIZE = 96  # a payload: its id, then bytes drawn from the id


def payload(i: int) -> bytes:
    return struct.pack("<q", i) + (hashlib.sha256(b"%d" % i).digest() * 3)[:SIZE - 8]


def ident(data) -> int | None:
    """The id of a payload, or None when it is not byte-identical to payload(id)."""
    data = bytes(data)
    i = struct.unpack_from("<q", data)[0] if len(data) >= 8 else -1
    return i if data == payload(i) else None


class Log:
    """The victim's log: one JSON line per entry, written before the step it announces."""

    def __init__(self, fd):
        self.fd = fd

    def __call__(self, **entry):
        os.write(self.fd, (json.dumps(entry) + "\n").encode())


def in_flight(events):
    """The last operation the victim began and did not end (None: none)."""
    op = None
    for e in events:
        if "op" in e:
            op = e
        if "done" in e or "failed" in e:
            op = None
    return op


# ---- the frame every workload shares ----

def frame(bus, shared=False, s2_quota=0):
    s1, s2 = bus.peer(), bus.peer(quota_messages=s2_quota)
    n1, n2 = s1.create_node(), s2.create_node()
    v = bus.peer()
    w = {"bus": bus, "s1": s1, "s2": s2, "v": v, "n1": n1, "n2": n2,
         "to": {"s1": s1.transfer(n1, v), "s2": s2.transfer(n2, v)},  # v's handles
         "owned": {"s1": [n1]}, "destroyed": [],  # (survivor, its handle to a victim's node)
         "drained": {"s1": [], "s2": [], "v": []}, "shared": shared}
    w["probe"] = {"s1": (s2, s1.transfer(n1, s2)), "s2": (s1, s2.transfer(n2, s1))}
    if shared:
        # the receiver is held by the trial too: it stays connected, and what the victim
        # left in its queue is drained here
        w["nv"] = v.create_node()
        w["probe"]["v"] = (s1, v.transfer(w["nv"], s1))
    return w


def let_go(w):
    kp.let_go(w["bus"], w["v"])


def drain(w, name):
    """Receive everything queued at survivor `name` into w['drained'][name]; findings."""
    peer, got, found = w[name], w["drained"][name], []
    while True:
        try:
            m = peer.recv(timeout=0)
        except BlockingIOError:
            return found
        for fd in m.fds:
            os.close(fd)
        if m.type == MessageType.DATA and len(m.fds) != w.get("fds_each", 0):
            found.append(f"{name} received message {ident(m.payload)} with {len(m.fds)} descriptors, "
                         f"not {w.get('fds_each', 0)}")
        if m.type == MessageType.DATA and ident(m.payload) is None:
            found.append(f"{name} received a corrupted payload {bytes(m.payload[:16]).hex()}...")
            continue
        got.append((int(m.type), m.destination, ident(m.payload) if m.type == MessageType.DATA else None,
                    tuple(h for h in m.handles if h != HANDLE_INVALID)))


def data_ids(w, name):
    return [i for t, _, i, _ in w["drained"][name] if t == MessageType.DATA and i is not None]


def notices(w, name, kind):
    return Counter(d for t, d, _, _ in w["drained"][name] if t == kind)


def probe(w, name):
    """A message to survivor `name` after it drained must be received: its queue moves."""
    sender, handle = w["probe"][name]
    peer = w[name]
    sender.send(handle, payload(-1))
    for _ in range(8):
        try:
            m = peer.recv(timeout=0)
        except BlockingIOError:
            break
        if m.type == MessageType.DATA and ident(m.payload) == -1:
            return []
        w["drained"][name].append((int(m.type), m.destination, None, ()))
    return [f"{name}'s queue is stuck: a probe sent after the drain is not received"]


def sends(events):
    """(started: id -> destination names, done ids, failed ids) from the victim's log."""
    started, done, failed = {}, set(), set()
    for e in events:
        if e.get("op") == "send":
            for i in e["ids"]:
                started[i] = e["to"]
        done |= set(e.get("done") or ())
        failed |= set(e.get("failed") or ())
    return started, done, failed


def check_sends(w, started, done, failed, names=("s1", "s2")):
    """Each destination got each done message once, a message in flight at all its
    destinations or at none, a failed one nowhere, in the order sent."""
    found = []
    got = {n: data_ids(w, n) for n in names}
    for n in names:
        c = Counter(got[n])
        for i, times in c.items():
            if i not in started or n not in started[i]:
                found.append(f"{n} received message {i}, never sent to it")
            elif times > 1:
                found.append(f"{n} received message {i} {times} times")
            elif i in failed:
                found.append(f"{n} received message {i}, whose send failed or was aborted")
        for i, dests in started.items():
            if n in dests and i in done and c[i] == 0:
                found.append(f"{n} lost message {i} (its send returned)")
        if got[n] != sorted(got[n]):
            found.append(f"{n} received the victim's messages out of order: {got[n]}")
    for i, dests in started.items():
        if i not in done and i not in failed:
            seen = {n: i in got[n] for n in dests}
            if len(set(seen.values())) > 1:
                found.append(f"message {i}, in flight at the kill, reached only some destinations: {seen}")
    return found


def check_receives(w, events, n_sent):
    """The shared receiver's messages 1..n_sent were received once, by the victim or the
    trial, in order; only those of the receive in flight at the kill may be gone."""
    mine = [e["got"] for e in events if "got" in e]
    found = [f"the victim received a corrupted payload ({e['bad']})" for e in events if "bad" in e]
    theirs = data_ids(w, "v")
    seen = mine + theirs
    for i, c in Counter(seen).items():
        if c > 1:
            found.append(f"message {i} received {c} times (victim: {mine}, trial: {theirs})")
    if seen != sorted(seen):
        found.append(f"messages out of order (victim: {mine}, trial: {theirs})")
    missing = sorted(set(range(1, n_sent + 1)) - set(seen))
    op = in_flight(events)
    lo, hi = (mine[-1] if mine else 0), (theirs[0] if theirs else n_sent + 1)
    if missing and not (op and len(missing) <= op.get("max", 1) and all(lo < i < hi for i in missing)):
        found.append(f"messages {missing} lost (in flight: {op}; victim: {mine}, trial: {theirs})")
    return found


def leave(bus, w) -> list:
    """After the workload's checks: probes, then every survivor leaves, with the notice
    rules of the module docstring; returns findings."""
    found = []
    for name in ("s1", "s2") + (("v",) if w["shared"] else ()):
        found += probe(w, name)
    if w["shared"]:
        w["v"].disconnect()
    w["s2"].disconnect()
    found += drain(w, "s1")
    releases = notices(w, "s1", MessageType.NODE_RELEASE)
    for node in w["owned"]["s1"]:
        if releases[node] != 1:
            found.append(f"s1 got {releases[node]} NODE_RELEASE for its node {node} (expected 1)")
    for name in ("s1", "s2"):
        for kind in (MessageType.NODE_RELEASE, MessageType.NODE_DESTROY):
            for dest, c in notices(w, name, kind).items():
                if c > 1:
                    found.append(f"{name} got {c} {kind.name} for handle {dest}")
    destroys = {n: notices(w, n, MessageType.NODE_DESTROY) for n in ("s1", "s2")}
    for name, handle in w["destroyed"]:
        if destroys[name][handle] != 1:
            found.append(f"{name} got {destroys[name][handle]} NODE_DESTROY for its handle {handle} "
                         "to a node of the victim (expected 1)")
    w["s1"].disconnect()
    return found
