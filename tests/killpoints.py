"""A kill at every step: one trial kills a victim process at a named point of the C helper
(csrc/bus/kill.c), lets the survivors reap it and carry on, and checks what they saw.

A trial: two survivor processes and a victim process (with two peers) exchange multicasts
that carry handles, side-channel signals (pipes, recorded as the stress tool records them),
node creation, destruction, release and transfer, until the victim SIGKILLs itself the
(after + 1)-th time it passes the point.  The parent reaps it (`bus.gc()`), the survivors
finish with a last message to each other, drain, report and exit.

Invariants checked, each an assertion of `run_trial`:
  - The trace -- the survivors' rows and the victim's rows up to its death, the victim
    counted as a destination only of the messages it recorded receiving -- has zero
    lost, duplicated, FIFO, causal and consistency violations (bus1py.check.reference).
  - The recovery rule: a message whose sender died before its stamp reaches no one
    (rolled back); one whose sender died after its stamp reaches every destination
    exactly once (rolled forward).
  - Every survivor holding a handle to a victim's node gets exactly one NODE_DESTROY for
    it (from the victim's destroy or from the reaping of the victim's peer), and every
    node a survivor handed to the victim comes back as exactly one NODE_RELEASE.
  - No queue is stuck (each survivor receives the other's last message), and once every
    peer is gone the bus holds zero peers, nodes, handles, entries and pool bytes, and
    `Bus.check()` (fsck) finds every invariant of the segment whole.
  - Descriptors: some messages carry the write end of a canary pipe (fds=); a message
    brings at most the one it was sent with, a survivor ends with the descriptors it
    started with (/proc/self/fd: every one it received closed, none installed behind its
    back), and once the trial's processes and the bus are gone the canary's reader sees
    end-of-file: no descriptor is left in flight in any store or process.
"""
from __future__ import annotations

import errno
import faulthandler
import json
import multiprocessing as mp
import os
import random
import select
import struct
import time
from collections import Counter

import bus1py
from bus1py import HANDLE_INVALID, MessageType
from bus1py import holders
from bus1py._lib import lib
from bus1py.check.reference import reference_check

FORK = mp.get_context("fork")
POINTS = {name[len("B1_KILL_"):].lower(): getattr(lib, name) for name in dir(lib)
          if name.startswith("B1_KILL_") and name not in ("B1_KILL_NONE", "B1_KILL_POINTS")}
AFTER_STAMP = {"stamp", "sync", "commit"}  # a transaction killed here is rolled forward
NO_TX = {"release", "transfer", "recv"}  # points outside any transaction of the victim
VICTIM = 2  # process index of the victim; the survivors are 0 and 1
# refusals a trial's workload may meet: the bus full (a victim that outlives its point keeps
# making nodes the survivors' backlog keeps alive), quotas, and the dead victim's peers
TOLERATED = {errno.EDQUOT, errno.EXFULL, errno.ENOSPC, errno.ESHUTDOWN, errno.ENXIO, errno.ESTALE}
LIMITS = dict(max_peers=16, max_nodes=256, max_handles=1024, max_entries=1 << 14, max_dests=4,
              max_msg_handles=2, pool_size=4 << 20, spin_ns=0)


def _pack(msg, labels=()):
    return struct.pack(f"<{1 + len(labels)}q", msg, *labels)


def _unpack(payload):
    words = struct.unpack(f"<{len(payload) // 8}q", payload)
    return words[0], words[1:]


class Trace:
    """Trace rows of one process (SPEC columns), ids `index << 40 | counter`."""

    def __init__(self, index, log_fd=None):
        self.index, self.seq, self.counter, self.rows, self.log_fd = index, 0, 0, [], log_fd

    def new_id(self):
        self.counter += 1
        return self.index << 40 | self.counter

    def record(self, kind, msg, dests=None, **extra):
        row = {"process": self.index, "seq": self.seq, "kind": kind, "msg": msg, "dests": dests,
               "node": None, "wall_ns": time.monotonic_ns()}
        self.seq += 1
        self.log(row=row, **extra)
        return row

    def log(self, **entry):
        if "row" in entry:
            self.rows.append(entry["row"])
        if self.log_fd is not None:  # the victim's rows must survive its death
            os.write(self.log_fd, (json.dumps(entry) + "\n").encode())


def setup(bus):
    """Peers, nodes and the handles between them, made by the parent, which then stops
    holding the peers so that each belongs to the child that uses it."""
    s = [bus.peer(), bus.peer()]
    va, vb = bus.peer(), bus.peer()
    own = [p.create_node() for p in s]
    vnode = va.create_node()
    w = {"s": s, "va": va, "vb": vb, "vnode": vnode,
         "v_to": [s[i].transfer(own[i], va) for i in range(2)],          # victim -> survivor i
         "s_to": [s[1 - i].transfer(own[1 - i], s[i]) for i in range(2)],  # survivor i -> other
         "s_to_v": [va.transfer(vnode, s[i]) for i in range(2)],         # survivor i -> victim
         "vlabel": VICTIM << 40}
    for p in (*s, va, vb):
        let_go(bus, p)
    return w


def let_go(bus, peer):
    """This process stops holding `peer`, so that the child that uses it next is its only
    holder (the one whose death gets it reaped)."""
    lib.b1_peer_detach(bus.base(), peer._slot, peer._id, os.getpid())
    holders.held.pop((bus.name, peer._slot, peer._id), None)


def _fds(rng, w):
    """What a send of the trial carries: the canary's write end, now and then."""
    return (w["canary"],) if rng.random() < 0.3 else ()


def _fd_links() -> list:
    """What this process's descriptors refer to (the ones open while it is listed aside)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out


def _close_fds(m):
    assert len(m.fds) <= 1, m  # at most the one it was sent with: none delivered twice
    for fd in m.fds:
        os.close(fd)


def victim(w, point, after, seed, log_path, sig_w, seconds):
    """The victim's workload until it dies at the point (or `seconds` pass).  Every row
    and every operation it starts is written to log_path before the call, so the parent
    knows what was in flight when it died."""
    rng = random.Random(seed)
    tr = Trace(VICTIM, os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    va, vb = w["va"], w["vb"]
    own = {}          # label -> VA's owner handle of a live node
    held_x = []       # VA's handles to survivors' nodes, to release
    vb_to = {}        # survivor -> VB's handle to its node (by transfer)
    va._attach()  # both peers are this process's from the start, so the reaper takes both
    vb._attach()
    lib.b1_kill_at(POINTS[point], after)

    def send(peer, dests, handles=(), labels=()):
        # a third of VA's sends are partial (send_partial): what a destination refused is
        # logged as missed, and the send is one transaction to the others
        partial = peer is va and rng.random() < 0.33
        msg = tr.new_id()
        tr.record("send", msg, dests=sorted(dests), op="send_partial" if partial else "send")
        to = [w["v_to"][i] if peer is va else vb_to[i] for i in dests]
        try:
            if partial:
                stamp, errors = peer.send_partial(to, _pack(msg, labels), handles=handles, fds=_fds(rng, w))
                missed = [i for i in dests if w["v_to"][i] in errors]
                tr.log(done=msg, missed=missed) if stamp else tr.log(failed=msg, missed=missed)
            else:
                peer.send(to, _pack(msg, labels), handles=handles, fds=_fds(rng, w))
                tr.log(done=msg)
        except OSError as e:
            tr.log(failed=msg, errno=e.errno)

    def send_many(dests, k):
        # a batch without handles, unicast or multicast: Peer.send_many's path of one lock
        # hold per step and destination for the batch
        msgs = [tr.new_id() for _ in range(k)]
        for msg in msgs:
            tr.record("send", msg, dests=sorted(dests))
        tr.log(op="send_many", label=msgs)
        try:
            n = va.send_many([w["v_to"][i] for i in dests], [_pack(msg) for msg in msgs])
        except OSError as e:
            n = 0
            if e.errno not in TOLERATED:
                raise
        for msg in msgs[n:]:
            tr.log(failed=msg)
        tr.log(done=msgs)

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        a = rng.random()
        try:
            if a < 0.08:
                send_many(rng.sample([0, 1], rng.randint(1, 2)), rng.randint(2, 6))
            elif a < 0.25:
                dests = rng.sample([0, 1], rng.randint(1, 2))
                carry = rng.sample(sorted(own), min(len(own), rng.randint(0, 1)))
                send(va, dests, [own[x] for x in carry], carry)
            elif a < 0.35 and len(own) < 3:
                label = tr.new_id()
                own[label] = va.create_node()
                send(va, [0, 1], [own[label]], [label])
            elif a < 0.45 and own:
                label = rng.choice(sorted(own))
                tr.log(op="destroy", label=label)
                va.destroy(own.pop(label), release=rng.random() < 0.5)
                tr.log(done=label)
            elif a < 0.55:
                i = rng.randint(0, 1)
                tr.log(op="transfer")
                vb_to[i] = va.transfer(w["v_to"][i], vb)
                tr.log(done="transfer")
                send(vb, [i])
            elif a < 0.65 and (held_x or vb_to):
                tr.log(op="release")
                if held_x and (rng.random() < 0.7 or not vb_to):
                    va.release(held_x.pop(rng.randrange(len(held_x))))
                else:
                    vb.release(vb_to.pop(rng.choice(sorted(vb_to))))
                tr.log(done="release")
            else:
                tr.log(op="recv")
                m = va.recv(timeout=0)
                tr.log(done="recv")
                _close_fds(m)
                if m.type == MessageType.DATA:
                    msg, _ = _unpack(m.payload)
                    tr.record("deliver", msg)
                    held_x.extend(h for h in m.handles if h != HANDLE_INVALID)
                    if rng.random() < 0.5:
                        j, sid = rng.randint(0, 1), tr.new_id()
                        tr.record("signal_send", sid, dests=[j])
                        os.write(sig_w[j], sid.to_bytes(8, "little"))
        except BlockingIOError:
            tr.log(done="recv")
        except OSError as e:
            if e.errno not in TOLERATED:
                raise
            tr.log(done="error", errno=e.errno)
        time.sleep(0.0002)
    lib.b1_kill_at(lib.B1_KILL_NONE, 0)  # the point was not reached: leave normally


def survivor(w, i, seed, sig_r, sig_w, dead, quiet, stop, report_path):
    """Survivor i's workload until `stop`, then its last message, the drain, and its
    report (rows, notices counted per node label) in report_path.  Once `dead` is set it
    hands the victim no more nodes and says so with `quiet`."""
    faulthandler.dump_traceback_later(50, exit=True)  # a hang shows where, before the parent gives up
    rng = random.Random(seed * 7 + i)
    tr = Trace(i)
    me, other = w["s"][i], 1 - i
    label_of = {w["s_to_v"][i]: w["vlabel"]}  # my handle id -> victim's node label
    destroys, unknown, releases = Counter(), Counter(), Counter()
    mine = {}  # owner handle of a node handed to the victim -> its label
    fin = {"sent": None}
    delivered = set()  # data messages received: the other's last one may come early
    me._attach()  # its descriptor store, set up at a fork child's first use: before the count
    fds_at_start = _fd_links()
    # the parent reaps the victim, after the survivors went quiet: a send refused with
    # EDQUOT (a dead victim's full descriptor store) must not reap it earlier, or a node
    # handed to it meanwhile would owe no NODE_RELEASE
    bus1py.sending._last_reap[me.bus.name] = float("inf")

    def send(dests, handles=(), labels=()):
        msg = tr.new_id()
        to = [w["s_to"][i] if d == other else w["s_to_v"][i] for d in dests]
        tr.record("send", msg, dests=sorted(dests))
        try:
            # a node handed over must arrive: its send carries no descriptors, which a full
            # store (the dead victim's) would refuse
            me.send(to, _pack(msg, labels), handles=handles, fds=() if handles else _fds(rng, w))
        except OSError as e:
            if e.errno not in TOLERATED:
                raise
            tr.rows.pop()
            tr.seq -= 1
            return None
        return msg

    def take(m):
        _close_fds(m)
        if m.type == MessageType.DATA:
            msg, labels = _unpack(m.payload)
            tr.record("deliver", msg)
            for h, label in zip(m.handles, labels):
                if h != HANDLE_INVALID:
                    label_of[h] = label
            delivered.add(msg)
            return msg
        if m.type == MessageType.NODE_DESTROY:
            if m.destination in mine:
                return None  # the destruction of my own node, after its release
            (destroys if m.destination in label_of else unknown)[label_of.get(m.destination, m.destination)] += 1
            me.release(m.destination)  # a dead node's handle: let go, so its record can be freed
        elif m.destination in mine:
            releases[mine[m.destination]] += 1
            me.destroy(m.destination, release=True)
        return None

    def drain_signals():
        try:
            data = os.read(sig_r, 8 * 64)
        except BlockingIOError:
            return 0
        for off in range(0, len(data), 8):
            tr.record("signal_recv", int.from_bytes(data[off:off + 8], "little"))
        return len(data)

    while not stop.is_set():
        if dead.is_set():
            quiet.set()  # no node is handed to the victim after this
        a = rng.random()
        try:
            if a < 0.4:
                msg = take(me.recv(timeout=0))
                if msg is not None and rng.random() < 0.3:
                    sid = tr.new_id()
                    tr.record("signal_send", sid, dests=[other])
                    os.write(sig_w[other], sid.to_bytes(8, "little"))
            elif a < 0.7:
                send(rng.choice([[other], [VICTIM], [other, VICTIM]]))
            elif a < 0.8 and not dead.is_set() and len(mine) < 6:
                x = me.create_node()
                label = tr.new_id()
                mine[x] = label
                releases[label] += 0
                if send([VICTIM], [x], [label]) is None:  # refused (the victim's full queue): not
                    del releases[label]                    # handed, so no NODE_RELEASE is owed
                    me.destroy(x, release=True)
            elif drain_signals():
                send([other, VICTIM])  # caused by the signal
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno not in TOLERATED:
                raise
        time.sleep(0.0002)
    # the last message: the other's last one is behind everything it sent (FIFO).  It
    # must go out: a full bus (the dead victim's queue fills it until the reaping) is
    # waited out, receiving meanwhile so that the other's last message can go out too.
    deadline = time.monotonic() + 20
    while fin["sent"] is None and time.monotonic() < deadline:
        fin["sent"] = send([other])
        try:
            take(me.recv(timeout=0.001))
        except TimeoutError:
            pass
    # report_path is <dir>/s<i>-<trial>.json: both survivors name the same <dir>/fin-<trial>
    base = os.path.join(os.path.dirname(report_path), "fin-" + os.path.basename(report_path)[3:])
    mine_fin, other_fin = (f"{base}.{j}" for j in (i, other))
    with open(mine_fin + ".tmp", "w") as f:
        f.write(str(fin["sent"] or 0))
    os.rename(mine_fin + ".tmp", mine_fin)
    deadline = time.monotonic() + 20
    while not os.path.exists(other_fin) and time.monotonic() < deadline:
        time.sleep(0.001)
    with open(other_fin) as f:
        fin["other"] = int(f.read())
    while fin["other"] not in delivered and time.monotonic() < deadline:
        try:
            take(me.recv(timeout=0.05))
        except TimeoutError:
            pass
    while True:
        try:
            take(me.recv(timeout=0))
        except BlockingIOError:
            break
    drain_signals()
    out = {"rows": tr.rows, "destroys": destroys, "unknown": unknown, "releases": releases,
           "held": sorted(set(label_of.values())), "fin": fin["other"] in delivered, "fin_sent": bool(fin["sent"]),
           "recoveries": me.query().lock_recoveries,
           "fds_left": sorted((Counter(_fd_links()) - Counter(fds_at_start)).elements())}
    with open(report_path, "w") as f:
        json.dump(out, f)


def _victim_log(path):
    """The victim's rows, the messages it recorded as failed, and its last unfinished op."""
    rows, failed, pending = [], set(), None
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if "row" in e:
                rows.append(e["row"])
            if "failed" in e:
                failed.add(e["failed"])
            if e.get("missed"):  # a partial send: the destinations that refused it
                row = next(r for r in rows if r["msg"] == e.get("done", e.get("failed")) and r["kind"] == "send")
                row["dests"] = [d for d in row["dests"] if d not in e["missed"]]
            if "op" in e:
                pending = (e["op"], e["row"]["msg"] if "row" in e else e.get("label"))
            if "done" in e or "failed" in e:
                pending = None
    return rows, failed, pending


def check(point, killed, reports, vrows, failed, pending):
    """The checks of one trial (module docstring); returns what the trial showed."""
    rows = [r for rep in reports for r in rep["rows"]]
    rows += [r for r in vrows if r["msg"] not in failed]
    got = {}
    for r in rows:
        if r["kind"] == "deliver":
            got.setdefault(r["msg"], []).append(r["process"])
    rule = None
    if killed and pending and pending[0] in ("send", "send_partial", "send_many", "destroy", "release") \
            and point not in NO_TX:
        rule = "forward" if point in AFTER_STAMP else "back"
    if rule and pending[0] in ("send", "send_partial", "send_many"):
        # a batch stages all everywhere, stamps all, then commits all: one rule for every message
        for msg in pending[1] if pending[0] == "send_many" else [pending[1]]:
            sent = next(r for r in rows if r["msg"] == msg and r["kind"] == "send")
            if rule == "forward" and pending[0] == "send_partial":
                # a destination may have refused it before the stamp: the others have it
                assert got.get(msg) and set(got[msg]) <= set(sent["dests"]), (point, sent, got.get(msg))
                sent["dests"] = sorted(got[msg])
            elif rule == "forward":
                assert sorted(got.get(msg, [])) == sent["dests"], (point, sent, got.get(msg))
            else:
                assert msg not in got, (point, sent, got[msg])
                rows.remove(sent)
    for r in rows:  # the victim is a destination only of what it recorded receiving
        if r["kind"] == "send" and VICTIM in r["dests"] and VICTIM not in got.get(r["msg"], []):
            r["dests"] = [d for d in r["dests"] if d != VICTIM]
    rows = [r for r in rows if r["kind"] != "send" or r["dests"]]
    result = reference_check(rows)
    assert not any(result.values()), (point, result, pending)
    for i, rep in enumerate(reports):
        assert rep["fin_sent"], f"survivor {i}: its last message found the bus full for 20 s"
        assert rep["fin"], f"survivor {i}: the other's last message never came (a stuck queue)"
        for label in rep["held"]:
            assert rep["destroys"].get(str(label), 0) == 1, (i, label, rep["destroys"])
        assert all(n == 1 for n in rep["unknown"].values()), (i, rep["unknown"])
        assert all(n == 1 for n in rep["releases"].values()), (i, rep["releases"])
    return rule


def run_trial(point, seed, after, tmpdir, seconds=1.5):
    """One trial; returns a dict of what happened (killed, the op, the rule, gc stats)."""
    tag = f"{point}-{seed}"
    log_path = os.path.join(tmpdir, f"victim-{tag}.jsonl")
    reports = [os.path.join(tmpdir, f"s{i}-{tag}.json") for i in range(2)]  # survivor i's report
    pipes = [os.pipe() for _ in range(2)]
    for r, _ in pipes:
        os.set_blocking(r, False)
    sig_w = [w for _, w in pipes]
    canary = os.pipe()  # its write end travels in messages (fds=)
    # the parent reaps the victim itself, after the survivors went quiet: no death watcher
    # may do it earlier (bus1py/watch.py), in this process or the forked ones
    watch_was = os.environ.get("BUS1PY_WATCH")
    os.environ["BUS1PY_WATCH"] = "0"
    try:
        try:
            out = _run_trial(point, seed, after, tmpdir, seconds, tag, log_path, reports, pipes, sig_w,
                             canary[1])
        finally:
            os.close(canary[1])
        ready, _, _ = select.select([canary[0]], [], [], 10)
        assert ready and os.read(canary[0], 8) == b"", "a descriptor stayed in flight after the trial"
        return out
    finally:
        os.close(canary[0])
        if watch_was is None:
            del os.environ["BUS1PY_WATCH"]
        else:
            os.environ["BUS1PY_WATCH"] = watch_was


def _run_trial(point, seed, after, tmpdir, seconds, tag, log_path, reports, pipes, sig_w, canary):
    with bus1py.Bus.create(**LIMITS) as bus:
        w = setup(bus)
        w["canary"] = canary
        dead, stop = FORK.Event(), FORK.Event()
        quiet = [FORK.Event() for _ in range(2)]
        procs = [FORK.Process(target=survivor, args=(w, i, seed, pipes[i][0], sig_w, dead, quiet[i],
                                                      stop, reports[i])) for i in range(2)]
        procs.append(FORK.Process(target=victim, args=(w, point, after, seed, log_path, sig_w, seconds)))
        try:
            for p in procs:
                p.start()
            procs[2].join(timeout=seconds + 30)
            assert procs[2].exitcode in (0, -9), procs[2].exitcode
            killed = procs[2].exitcode == -9
            dead.set()
            for i, q in enumerate(quiet):
                assert q.wait(timeout=30), f"survivor {i} stopped (exit code {procs[i].exitcode})"
            stats = bus.gc()
            stop.set()
            for p in procs[:2]:
                p.join(timeout=60)
                assert p.exitcode == 0, p.exitcode
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for r, wfd in pipes:
                os.close(r)
                os.close(wfd)
        reps = []
        for path in reports:
            with open(path) as f:
                reps.append(json.load(f))
        assert [r["fds_left"] for r in reps] == [[], []], (point, seed, after, [r["fds_left"] for r in reps])
        vrows, failed, pending = _victim_log(log_path)
        rule = check(point, killed, reps, vrows, failed, pending)
        bus.gc(sole=True)  # every process of the trial has exited
        info = bus.info()
        use = {k: info[k] for k in ("peers", "nodes", "handles", "entries_in_use", "pool_used")}
        assert not any(use.values()), (point, seed, after, use, pending)
        assert bus.check() == [], (point, seed, after, bus.check())
    return {"killed": killed, "op": pending and pending[0], "rule": rule, "gc": stats,
            "rows": sum(len(r["rows"]) for r in reps) + len(vrows)}
