"""The crash explorer's workloads (tests/explore.py): what the victim does, armed, and what
must hold after it died anywhere in it (beyond the rules every trial checks,
tests/explore_rules.py).

A workload is `setup(bus) -> w` (in the trial, before the fork), `prepare(w)` (in the
victim, before it is armed: it becomes a holder of its peer, so that the reaper knows the
peer is its), `run(w, log)` (the victim, armed) and `check(bus, w, events) -> findings`.
"""
from __future__ import annotations

import errno
import os
import signal

from bus1py import MessageType, call
from bus1py._lib import ffi, lib

import killpoints as kp
from segment import HANDLE_REFS, Segment

from explore_rules import (check_receives, check_sends, drain, frame, let_go, payload, ident,
                           sends, SIZE)


def carried_fds(w) -> tuple:
    """The descriptors each message of the workload carries (Canary): none, or the
    canary's write end."""
    return (w["canary"][1],) * w["fds_each"] if w.get("fds_each") else ()


def vsend(w, log, ids, to, carry=()):
    """The victim sends message ids[0] to the survivors named in `to` (with the canary's
    write end when the workload carries descriptors)."""
    log(op="send", ids=ids, to=to)
    try:
        w["v"].send([w["to"][n] for n in to], payload(ids[0]), handles=carry, fds=carried_fds(w))
    except OSError as e:
        log(failed=ids, errno=e.errno)
        return
    log(done=ids)


def step(log, what, fn, **extra):
    log(op=what, **extra)
    r = fn()
    log(done=what)
    return r


class Workload:
    shared = False  # the victim's peer is held by the trial too (receiving workloads)

    def setup(self, bus):
        w = frame(bus, self.shared)
        self.more(bus, w)
        if not self.shared:
            let_go(w)
        return w

    def more(self, bus, w):
        pass

    def prepare(self, w):
        w["v"]._attach()

    def check(self, bus, w, events):
        found = drain(w, "s1") + drain(w, "s2")
        found += check_sends(w, *sends(events))
        for name in ("s1", "s2"):  # a handle carried by the victim: its node dies with it
            w["destroyed"] += [(name, h) for t, _, i, hs in w["drained"][name] if i for h in hs]
        return found


class Canary:
    """Descriptors in messages: each data message carries the write end of a pipe made
    for the trial.  Every one received is checked (explore_rules.drain) and closed; once
    the trial closed its own, the pipe's reader must see end-of-file: no descriptor left
    in a store or a process."""

    def more(self, bus, w):
        w["canary"], w["fds_each"] = os.pipe(), 1
        super().more(bus, w)

    def check(self, bus, w, events):
        found = super().check(bus, w, events)
        rd, wr = w["canary"]
        os.close(wr)
        os.set_blocking(rd, False)
        try:
            if os.read(rd, 8) != b"":
                found.append("the canary pipe was written to")
        except BlockingIOError:
            found.append("a descriptor stayed in flight after the kill (a store or a process holds it)")
        os.close(rd)
        return found


class Send(Workload):
    def run(self, w, log):
        for i in (1, 2, 3):
            vsend(w, log, [i], ["s1"])


class Multicast(Workload):
    def more(self, bus, w):
        w["vn"] = w["v"].create_node()

    def run(self, w, log):
        vsend(w, log, [1], ["s1", "s2"], carry=[w["vn"]])
        vsend(w, log, [2], ["s1", "s2"])


class Batch(Workload):
    def run(self, w, log):
        for ids, to in (([1, 2, 3, 4], ["s1", "s2"]), ([5, 6, 7], ["s1"])):
            log(op="send", ids=ids, to=to)
            try:
                n = w["v"].send_many([w["to"][x] for x in to], [payload(i) for i in ids])
            except OSError as e:
                n = 0
                log(errno=e.errno)
            log(done=ids[:n], failed=ids[n:])


class Partial(Workload):
    """Partial multicasts (send_partial): s2's quota of 4 holds the victim's share (2
    messages, queued before the trial), so every copy to s2 is refused with EDQUOT while
    s1 takes its own; a send all of whose destinations refuse stamps nothing.  A message in
    flight at the kill reaches every destination that takes it or none."""

    FILL = 2

    def setup(self, bus):
        w = frame(bus, s2_quota=4)
        for k in range(self.FILL):
            w["v"].send(w["to"]["s2"], payload(-2 - k))
        let_go(w)
        return w

    def run(self, w, log):
        for i, takers, refused in ((1, ["s1"], ["s2"]), (2, [], ["s2"]), (3, ["s1"], ["s2"])):
            log(op="send", ids=[i], to=takers)
            stamp, errors = w["v"].send_partial([w["to"][n] for n in takers + refused], payload(i))
            want = {w["to"][n]: errno.EDQUOT for n in refused}
            log(**({"done": [i]} if stamp else {"failed": [i]}), **({} if errors == want else {"bad": [i]}))

    def check(self, bus, w, events):
        found = [f"send_partial of {e['bad']} reported other errors than s2's EDQUOT" for e in events if "bad" in e]
        fill = [ident(w["s2"].recv(timeout=0).payload) for _ in range(self.FILL)]
        if fill != [-2 - k for k in range(self.FILL)]:
            found.append(f"s2's queue began with {fill}, not the fill")
        return found + super().check(bus, w, events)


class Reserve(Workload):
    """Zero-copy sends: the payload written in place, then committed or (abort) given back."""

    def __init__(self, abort):
        self.abort = abort

    def run(self, w, log):
        for i, to in ((1, ["s1"]), (2, ["s1", "s2"]), (3, ["s1"])):
            log(op="send", ids=[i], to=to)
            r = w["v"].reserve([w["to"][x] for x in to], SIZE)
            r.payload[:] = payload(i)
            if self.abort and i != 2:
                r.abort()
                log(failed=[i])
            else:
                r.commit()
                log(done=[i])


class Receive(Workload):
    """The survivor s1 queued messages 1..n at v (the second carrying a handle); the
    victim receives them, `how` it says."""
    shared = True

    fds_each = 0

    def __init__(self, how, n):
        self.how, self.n = how, n

    def more(self, bus, w):
        super().more(bus, w)
        to_v = w["probe"]["v"][1]
        for i in range(1, self.n + 1):
            w["s1"].send(to_v, payload(i), handles=[w["n1"]] if i == 2 else (), fds=carried_fds(w))

    def got(self, log, m):
        i = ident(m.payload)
        log(**({"got": i} if i is not None else {"bad": bytes(m.payload[:16]).hex()}))
        if len(m.fds) != self.fds_each:
            log(error=f"message {i} came with {len(m.fds)} descriptors, not {self.fds_each}")
        for fd in m.fds:
            os.close(fd)

    def run(self, w, log):
        v = w["v"]
        if self.how == "recv":
            for _ in range(3):
                step(log, "recv", lambda: self.got(log, v.recv(timeout=0)))
        elif self.how == "node":  # the receive for one node (all of them are nv's)
            for _ in range(3):
                step(log, "recv", lambda: self.got(log, v.recv(node=w["nv"], timeout=0)))
        elif self.how == "recv_many":
            for _ in range(2):
                step(log, "recv", lambda: [self.got(log, m) for m in v.recv_many(3, timeout=0)], max=3)
        else:  # zero-copy: each payload a view into the pool until released
            for _ in range(2):
                m = step(log, "recv", lambda: v.recv(timeout=0, copy=False))
                self.got(log, m)
                step(log, "release", m.release)
            ms = step(log, "recv", lambda: v.recv_many(2, timeout=0, copy=False), max=2)
            for m in ms:
                self.got(log, m)
            step(log, "release", lambda: [m.release() for m in ms])

    def check(self, bus, w, events):
        found = drain(w, "v") + drain(w, "s1") + drain(w, "s2")
        return found + check_receives(w, events, self.n)


class Reply(Receive):
    """s1 queued requests 1..n at v, each carrying one of s1's reply nodes (its own
    tag); the victim takes each with the receive for one node and answers it (a tagged
    send, then the reply handle released): s1 gets each answer at most once, in order,
    and nothing else of a reply node, whatever the kill."""

    def __init__(self, n):
        super().__init__("reply", n)

    def more(self, bus, w):
        Workload.more(self, bus, w)
        s1, to_v = w["s1"], w["probe"]["v"][1]
        w["reply_nodes"] = [call._take_node(s1) for _ in range(self.n)]
        for i, node in enumerate(w["reply_nodes"], 1):
            call._send_request(s1, to_v, payload(i), (), node, i)

    def run(self, w, log):
        v = w["v"]
        for _ in range(3):
            m = step(log, "recv", lambda: v.recv(node=w["nv"], timeout=0))
            self.got(log, m)
            step(log, "reply", lambda: m.reply(m.payload))

    def check(self, bus, w, events):
        found = super().check(bus, w, events)
        answers = [i for t, _, i, _ in w["drained"]["s1"] if i is not None and t == int(MessageType.DATA)]
        if answers != sorted(set(answers)) or not set(answers) <= set(range(1, self.n + 1)):
            found.append(f"s1's answers are not each request's once, in order: {answers}")
        notices = [(t, d) for t, d, i, _ in w["drained"]["s1"] if d in w["reply_nodes"] and t != int(MessageType.DATA)]
        if notices:
            found.append(f"s1 was sent notices of its reply nodes: {notices}")
        return found


class Transfer(Workload):
    def more(self, bus, w):
        w["vn"] = [w["v"].create_node() for _ in range(2)]

    def run(self, w, log):
        v = w["v"]
        for node, name in zip(w["vn"], ("s1", "s2")):
            log(op="transfer", to=name)
            log(done="transfer", at=name, handle=v.transfer(node, w[name]))
        step(log, "transfer", lambda: v.transfer(w["to"]["s1"], w["s2"]))  # s1's node, to s2

    def check(self, bus, w, events):
        w["destroyed"] += [(e["at"], e["handle"]) for e in events if "handle" in e]
        return drain(w, "s1") + drain(w, "s2")


class Release(Workload):
    def more(self, bus, w):
        s1, v = w["s1"], w["v"]
        m = [s1.create_node() for _ in range(2)]
        w["h"] = [s1.transfer(m[0], v), s1.transfer(m[1], v)]
        s1.transfer(m[1], v)  # two references to drop
        w["owned"]["s1"] += m

    def run(self, w, log):
        for h in (w["h"][0], w["h"][1], w["h"][1], w["to"]["s1"]):
            step(log, "release", lambda: w["v"].release(h))

    def check(self, bus, w, events):
        return drain(w, "s1") + drain(w, "s2")


class Destroy(Workload):
    def more(self, bus, w):
        v, s1, s2 = w["v"], w["s1"], w["s2"]
        w["vn"] = [v.create_node() for _ in range(3)]
        w["destroyed"] += [("s1", v.transfer(n, s1)) for n in w["vn"]]
        w["destroyed"].append(("s2", v.transfer(w["vn"][0], s2)))

    def run(self, w, log):
        d = w["vn"]
        step(log, "destroy", lambda: w["v"].destroy(d[0]))
        step(log, "destroy", lambda: w["v"].destroy(d[1], d[2], release=True))

    def check(self, bus, w, events):
        return drain(w, "s1") + drain(w, "s2")


class Disconnect(Workload):
    """The victim holds a node s1 has a handle to, handles to s1's and s2's nodes, two
    messages queued (one carrying a handle), one of them received as a held slice."""

    def more(self, bus, w):
        v, s1 = w["v"], w["s1"]
        hd = v.transfer(v.create_node(), s1)
        w["destroyed"].append(("s1", hd))
        m1 = s1.create_node()
        w["owned"]["s1"].append(m1)
        s1.send(hd, payload(1))
        s1.send(hd, payload(2), handles=[m1])

    def run(self, w, log):
        w["held"] = step(log, "recv", lambda: w["v"].recv(timeout=0, copy=False))
        step(log, "disconnect", w["v"].disconnect)

    def check(self, bus, w, events):
        return drain(w, "s1") + drain(w, "s2")


class Gc(Workload):
    """Dead work for the victim's gc to reap: a sender dead after staging one of two
    copies (rolled back), one dead after its stamp (rolled forward), a receiver dead with
    an entry taken out of its queue; each held a node s1 has a handle to."""
    shared = True  # the victim runs only gc: its peer is the trial's

    def more(self, bus, w):
        s1, s2 = w["s1"], w["s2"]
        z = [bus.peer() for _ in range(3)]
        held = [p.transfer(p.create_node(), s1) for p in z]  # s1's handles to their nodes
        w["destroyed"] += [("s1", h) for h in held]
        to = [[s1.transfer(w["n1"], p), s2.transfer(w["n2"], p)] for p in z[:2]]
        for i in (10, 11):
            s1.send(held[2], payload(i))
        for p in z:
            kp.let_go(bus, p)
        self.die(z[0], lib.B1_KILL_STAGE, lambda: z[0].send(to[0], payload(2)),
                 first=lambda: z[0].send(to[0], payload(1)))
        self.die(z[1], lib.B1_KILL_SYNC, lambda: z[1].send(to[1], payload(3)))
        self.die(z[2], lib.B1_KILL_RECV, lambda: z[2].recv(timeout=0))

    @staticmethod
    def die(peer, point, action, first=None):
        """In a child holding `peer`: `first`, then `action` killed at the named point's
        first pass."""
        pid = os.fork()
        if pid == 0:
            peer._attach()
            if first:
                first()
            lib.b1_kill_at(point, 0)
            action()
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status

    def prepare(self, w):
        pass

    def run(self, w, log):
        step(log, "gc", w["bus"].gc)

    def check(self, bus, w, events):
        found = drain(w, "v") + drain(w, "s1") + drain(w, "s2")
        both = ["s1", "s2"]
        return found + check_sends(w, {1: both, 2: both, 3: both}, {1, 3}, {2})


class Create(Workload):
    """Nodes made by the victim: a kill inside b1_node_create leaves at most a node and a
    handle taken from their free lists and not yet ALIVE, which the victim's reaping or a
    sole gc gives back."""

    def run(self, w, log):
        for _ in range(2):
            step(log, "create_node", w["v"].create_node)


class Verify(Workload):
    """A takeover's verification cut anywhere: s1's lock left by a sender dead inside it,
    and under it a release cut short (z's handle to s1's node m still listed, its count
    0).  The victim's release of its handle to s1's n1 takes that lock first (the owner's
    lock for a node's fields), so it rebuilds s1's holder lists and carries out z's drop;
    the trial's gc finishes what the victim's death cut, and m's NODE_RELEASE comes
    exactly once (the frame's rules)."""

    def more(self, bus, w):
        s1, z = w["s1"], bus.peer()
        m = s1.create_node()
        w["owned"]["s1"].append(m)
        h, to = s1.transfer(m, z), s1.transfer(w["n1"], z)
        with Segment(bus) as seg:
            seg.u32(seg.handle(h, HANDLE_REFS), 0)
        kp.let_go(bus, z)
        Gc.die(z, lib.B1_KILL_LOCKED, lambda: z.send([to], payload(20)))  # rolled back

    def run(self, w, log):
        step(log, "release", lambda: w["v"].release(w["to"]["s1"]))


class SendFds(Canary, Multicast):
    """Multicast's sends, each carrying a descriptor."""


class ReceiveFds(Canary, Receive):
    """Receive's messages, each carrying a descriptor, taken by the victim."""
    fds_each = 1


class ReceiveFdsMoved(ReceiveFds):
    """ReceiveFds past the inbox's room (net.unix.max_dgram_qlen + 1 = 11 by default): s1's
    twelfth post moved the inbox into the pair (the trial holds the store), the last ones
    wait in the inbox, so the victim's first receive moves them (csrc/bus/fds.c): a mover
    killed between a forward and its pop leaves a duplicate, which no take may deliver
    twice and which must not outlive its message."""

    def __init__(self):
        super().__init__("recv", 16)


class ReceiveFdsCrossed(ReceiveFds):
    """ReceiveFds with the store out of the queue's order: s1's message 2 and s2's message 3
    are staged together (the same stamp, s1's id the lower: 2 is received first), 3 is
    stamped (its descriptors posted) before 2.  The victim's take of 2 meets 3's datagram
    first: a receiver killed there must not cost 3 a descriptor."""

    def __init__(self):
        super().__init__("recv", 1)

    def more(self, bus, w):
        super().more(bus, w)
        base, v = bus.base(), w["v"]
        fds = carried_fds(w)
        txs = {}
        for name, i, to in (("s1", self.n + 1, w["probe"]["v"][1]), ("s2", self.n + 2, v.transfer(w["nv"], w["s2"]))):
            s, tx = w[name], ffi.new("struct b1_tx *")
            tx.dests = dests = ffi.new("struct b1_dest[]", 1)
            txs[name] = (tx, dests)
            assert lib.b1_send_fds(ffi.new("int32_t[]", fds), len(fds)) == 0
            assert lib.b1_tx_prepare(base, tx, s._slot, s._id, ffi.new("uint64_t[]", [to]), 1,
                                     payload(i), SIZE, ffi.NULL, 0, 0) == 0
            assert lib.b1_tx_stage(base, tx, 0) == 0
        for name in ("s2", "s1"):
            assert lib.b1_send_fds(ffi.new("int32_t[]", fds), len(fds)) == 0
            assert lib.b1_tx_stamp(base, txs[name][0]) == 0
        lib.b1_send_fds(ffi.NULL, 0)
        for name in ("s1", "s2"):
            assert lib.b1_tx_commit(base, txs[name][0], 0) == 0

    def check(self, bus, w, events):
        found = drain(w, "v") + drain(w, "s1") + drain(w, "s2")
        return found + check_receives(w, events, self.n + 2)


class Publish(Workload):
    """The victim names its node, twice, and takes one name back: its names go with it
    (the reaping after the kill), and a lookup of one finds nothing."""

    def more(self, bus, w):
        w["vn"] = w["v"].create_node()

    def run(self, w, log):
        v, n = w["v"], w["vn"]
        step(log, "publish", lambda: v.publish("a", n))
        step(log, "publish", lambda: v.publish("b", n))
        step(log, "unpublish", lambda: v.unpublish("a"))

    def check(self, bus, w, events):
        found = drain(w, "s1") + drain(w, "s2")
        if bus.names():
            found.append(f"names outlived their owner: {bus.names()}")
        for name in ("a", "b"):
            try:
                found.append(f"s1 looked up {name!r}: handle {w['s1'].lookup(name)}")
            except FileNotFoundError:
                pass
        return found


class Lookup(Workload):
    """s1 published its node; the victim looks it up (one more reference each time),
    sends to it and releases one reference.  The name stays s1's; what the victim held
    goes back to s1 as one NODE_RELEASE (explore_rules.leave)."""

    def more(self, bus, w):
        w["s1"].publish("svc", w["n1"])

    def run(self, w, log):
        v = w["v"]
        h = step(log, "lookup", lambda: v.lookup("svc"))
        vsend(w, log, [1], ["s1"])
        step(log, "lookup", lambda: v.lookup("svc"))
        step(log, "release", lambda: v.release(h))

    def check(self, bus, w, events):
        found = drain(w, "s1") + drain(w, "s2")
        if bus.names() != {"svc": w["s1"].id}:
            found.append(f"the name table is {bus.names()}, not s1's 'svc' alone")
        return found


class Reset(Disconnect):
    """The victim resets its peer (Disconnect's setup): its node (held by s1) destroyed,
    its queue (two messages from s1, one carrying s1's node) flushed, its handles
    released.  A reset cut short is finished by gc.  Then, still usable, it creates a node
    and sends it to s1 (whose handle dies with the victim)."""

    def run(self, w, log):
        step(log, "reset", w["v"].reset)
        node = step(log, "create", w["v"].create_node)
        vsend(w, log, [1], ["s1"], carry=[node])

    def check(self, bus, w, events):
        return Workload.check(self, bus, w, events)


WORKLOADS = {
    "send": Send(), "multicast": Multicast(), "batch": Batch(), "partial": Partial(),
    "recv": Receive("recv", 4), "recv_node": Receive("node", 4), "reply": Reply(4), "recv_many": Receive("recv_many", 6), "zero_copy": Receive("slice", 5),
    "reserve_commit": Reserve(abort=False), "reserve_abort": Reserve(abort=True),
    "transfer": Transfer(), "release": Release(), "destroy": Destroy(), "disconnect": Disconnect(),
    "gc": Gc(), "verify": Verify(), "create": Create(),
    "send_fds": SendFds(), "recv_fds": ReceiveFds("recv", 4), "recv_fds_crossed": ReceiveFdsCrossed(),
    "recv_fds_moved": ReceiveFdsMoved(),
    "publish": Publish(), "lookup": Lookup(), "reset": Reset(),
}
