"""One stress process: runs its planned actions against its own peer, traces every event.

Invariants:
  - The process performs exactly its Planner's action sequence (workload.py), in order;
    receives happen between actions, as many as are ready (never blocking for long), so
    what it receives depends on timing but what it *does* does not.
  - Every traced event is recorded in the order it happened in this process (one
    thread), so `seq` is the process's local order.  wall_ns is taken *before* a send or
    a signal write and *after* a receive or signal read, so for every message
    deliver.wall_ns >= send.wall_ns (latencies are never negative).
  - A failed call changes nothing on the bus (SPEC section 5), so it leaves no trace row;
    it is only counted by errno.
  - Message and signal ids are `index << 40 | counter` with one counter for both, so
    ids are unique in the trace; the message id travels in the first 8 bytes of the
    payload, so the receiver records `deliver` with the sender's id.
  - Termination: after its last action the process marks itself SENT and keeps
    receiving until the parent raises DRAIN (every process is SENT: every send has
    returned, so every message is committed and every signal written).  It then drains
    its queue and pipe to empty, and nothing more can arrive: nobody reacts to a
    receive by sending.  So the trace holds every delivery of every accepted message.
  - Live counters go to this process's own slots of a shared array (no locks: one writer
    per slot); the parent only reads them.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import time
import traceback

from ..message import MessageType
from .ids import DESTROY_BIT, ID_SHIFT, NODE_SHIFT, node_id  # noqa: F401 (re-exported)
from .nodes import NodeActions
from .trace import TraceWriter
from .workload import Planner, is_message

# Shared counter slots per process (parent reads, child writes).
# WIRES_OUT/WIRES_IN: transport-level wires handed out / received (the generic worker's
# quiescence test: the parent ends a run once every process is SENT and they are equal).
SENT, DELIVERED, SIG_SENT, SIG_RECV, ERRORS, MAX_DEPTH, ACTIONS, STATE, PID, WIRES_OUT, WIRES_IN = range(11)
STRIDE = 11
# Process states.
ST_START, ST_RUN, ST_SENT, ST_DONE, ST_FAILED = range(5)
# Control slots (parent writes); CTL_LEAVE: mortal processes leave now (churn.py).
CTL_DRAIN, CTL_ABORT, CTL_LEAVE = range(3)

_DATA, _DESTROY = MessageType.DATA, MessageType.NODE_DESTROY
_FILL = bytes(range(256)) * 4096  # payload filler, sliced (1 MiB)


class Worker(NodeActions):
    def __init__(self, spec):
        s = self.spec = spec
        self.index = s.index
        self.peer = s.peer
        self.counters = s.counters
        self.base = getattr(s, "slot", s.index) * STRIDE  # a churned slot's processes share it
        cfg = s.config
        self.cfg = cfg
        self.trace = TraceWriter(s.trace_dir, s.index, cfg.batch_rows)
        self.next_id = 0
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
        self.signal_r = s.signal_read_fd
        self.signal_w = s.signal_write_fds  # target process -> write fd
        self.sigbuf = b""
        self.errors = {}
        self.n_sent = self.n_deliv = self.n_sig_sent = self.n_sig_recv = 0
        self.n_actions = 0
        self.max_depth = 0
        self.last_recv = 0
        self.digest = hashlib.sha256()
        self.kinds = {}
        # with churn: processes from n_stable up are mortal (churn.py); 0: no churn
        self.n_stable = cfg.processes - cfg.churn_slots if cfg.churn else 0
        self.all_destroyable = False  # churn.py: a mortal's holders must never drop its nodes

    # ---- events ----

    def new_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return self.index << ID_SHIFT | i

    def error(self, e: OSError, what: str):
        name = errno.errorcode.get(e.errno, str(e.errno))
        key = f"{what}:{name}"
        self.errors[key] = self.errors.get(key, 0) + 1
        self.counters[self.base + ERRORS] += 1

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

    def drain_signals(self) -> int:
        if self.signal_r is None:  # nobody signals this process (a mortal one: churn.py)
            return 0
        try:
            data = os.read(self.signal_r, 8 * 512)
        except BlockingIOError:
            return 0
        now = time.monotonic_ns()
        data = self.sigbuf + data
        whole = len(data) - len(data) % 8
        self.sigbuf = data[whole:]
        for off in range(0, whole, 8):
            self.trace.record("signal_recv", int.from_bytes(data[off:off + 8], "little"), now)
        self.n_sig_recv += whole // 8
        return whole // 8

    def wait_recv(self, timeout):
        """Wait up to `timeout` s for one message (the pipe is polled by the caller)."""
        try:
            self.on_message(self.peer.recv(timeout))
        except TimeoutError:
            pass
        except OSError as e:
            self.error(e, "recv")

    def publish(self):
        c, b = self.counters, self.base
        c[b + SENT] = self.n_sent
        c[b + DELIVERED] = self.n_deliv
        c[b + SIG_SENT] = self.n_sig_sent
        c[b + SIG_RECV] = self.n_sig_recv
        c[b + ACTIONS] = self.n_actions
        c[b + MAX_DEPTH] = self.max_depth

    def sample_depth(self):
        try:
            depth = self.peer.query().queued_messages
        except OSError:
            return
        if depth > self.max_depth:
            self.max_depth = depth

    # ---- actions ----

    def send(self, action, handles, dest_procs, nodes, carry=()):
        mid = self.new_id()
        size = action.size
        if carry:  # header: id, count, node ids of the carried handles (the receiver maps them)
            head = mid.to_bytes(8, "little") + len(carry).to_bytes(2, "little") + b"".join(
                self.own[h].to_bytes(8, "little") for h in carry)
        else:
            head = mid.to_bytes(8, "little")
        payload = head + _FILL[:max(0, size - len(head))]
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

    def signal(self, target, action):
        fd = self.signal_w.get(target)
        if fd is None:
            return
        sid = self.new_id()
        now = time.monotonic_ns()
        try:
            os.write(fd, sid.to_bytes(8, "little"))
        except BlockingIOError:
            self.errors["signal:pipe-full"] = self.errors.get("signal:pipe-full", 0) + 1
            return
        except BrokenPipeError:
            self.errors["signal:EPIPE"] = self.errors.get("signal:EPIPE", 0) + 1
            return
        self.trace.record("signal_send", sid, now, dests=[target], action=action)
        self.n_sig_sent += 1

    def do_signal(self, a):
        self.signal(a.targets[0], "signal")

    def do_recv_signal(self, a):
        # Signal right after a receive: if the drain before this action got nothing, wait
        # (briefly) for one message, so the signal is caused by a delivery.
        if time.monotonic_ns() - self.last_recv > 200_000:
            try:
                self.on_message(self.peer.recv(self.cfg.recv_wait))
            except TimeoutError:
                pass
            except OSError as e:
                self.error(e, "recv")
        self.signal(a.targets[0], "recv_signal")

    # ---- the run ----

    def planner(self):
        spec, cfg = self.spec, self.cfg
        return Planner(cfg.seed, self.index, spec.topology, spec.mix, cfg.sizes, cfg.fanout)

    def limits(self, start):
        """(deadline, message budget) of the plan; one of them is None."""
        cfg = self.cfg
        if cfg.duration:
            return start + cfg.duration, None
        return None, cfg.messages

    def stopping(self) -> bool:
        return bool(self.spec.control[CTL_ABORT]) or os.getppid() != self.ppid

    def act(self):
        """Run the plan to its end (or an abort); returns the start time."""
        c, b, cfg, spec = self.counters, self.base, self.cfg, self.spec
        c[b + PID] = os.getpid()
        c[b + STATE] = ST_START
        planner = self.planner()
        handlers = {k: getattr(self, "do_" + k) for k in
                    ("unicast", "multicast", "signal", "recv_signal", "node_create",
                     "node_destroy", "pass_handle", "release")}
        spec.go.wait()
        c[b + STATE] = ST_RUN
        start = time.monotonic()
        deadline, budget = self.limits(start)
        rate = cfg.rate
        it = 0
        while True:
            it += 1
            if it & 7 == 0:
                self.sample_depth()
                self.publish()
                if self.stopping():
                    break
            self.drain_signals()
            self.drain()
            if rate:  # paced: receive while ahead of schedule (latency without saturation)
                wait = start + self.n_actions / rate - time.monotonic()
                if wait > 0:
                    self.wait_recv(min(wait, 0.002))
                    continue
            if deadline is not None:
                if time.monotonic() >= deadline:
                    break
            elif budget <= 0:
                break
            action = next(planner)
            if budget is not None and is_message(action):
                budget -= 1
            self.digest.update(action.describe().encode() + b";")
            self.kinds[action.kind] = self.kinds.get(action.kind, 0) + 1
            handlers[action.kind](action)
            self.n_actions += 1
        return start

    def run(self):
        self.ppid = os.getppid()
        c, b, ctl = self.counters, self.base, self.spec.control
        start = self.act()
        sent_at = time.monotonic()
        self.publish()
        c[b + STATE] = ST_SENT
        # keep receiving (queues must not fill) until every process has sent everything
        while not ctl[CTL_DRAIN] and not ctl[CTL_ABORT]:
            self.drain_signals()
            try:
                self.on_message(self.peer.recv(0.02))
            except TimeoutError:
                pass
            except OSError as e:
                self.error(e, "recv")
                time.sleep(0.01)
            self.drain()
            self.sample_depth()
            self.publish()
            if os.getppid() != self.ppid:
                break
        drain_at = time.monotonic()
        # everything is committed now: drain to empty
        while self.drain_signals() or self.drain():
            pass
        self.publish()
        drained_at = time.monotonic()
        self.trace.flush()
        return self.result(start, sent_at=sent_at, drain_at=drain_at, drained_at=drained_at)

    def result(self, start, **times):
        return {
            "index": self.index, "pid": os.getpid(), "actions": self.n_actions,
            "plan_sha256": self.digest.hexdigest(), "kinds": self.kinds,
            "sent": self.n_sent, "delivered": self.n_deliv,
            "signals_sent": self.n_sig_sent, "signals_received": self.n_sig_recv,
            "errors": self.errors, "max_depth": self.max_depth,
            "trace_rows": self.trace.seq, "trace_files": self.trace.files,
            "trace_bytes": self.trace.bytes, "start": start, **times,
            "end": time.monotonic(), "cpu": sum(os.times()[:2]),
        }


def child_main(spec):
    """Entry point of a stress process (started by fork)."""
    # keep only our pipe ends: our read end, write ends to our signal targets
    close_others({spec.signal_read_fd, *spec.signal_write_fds.values()}, spec.all_pipe_fds)
    try:
        result = Worker(spec).run()
        status = 0
    except BaseException as e:  # report it to the parent, then fail
        result = {"index": spec.index, "pid": os.getpid(), "failed": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
        status = 1
    finish(spec, result, status)


def close_others(keep, fds):
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def finish(spec, result, status):
    """Leave the result for the parent (atomically), mark the state, exit at once."""
    tmp = os.path.join(spec.result_dir, f".{spec.index}.json")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(spec.result_dir, f"{spec.index}.json"))
    spec.counters[getattr(spec, "slot", spec.index) * STRIDE + STATE] = ST_DONE if status == 0 else ST_FAILED
    os._exit(status)  # no atexit handlers, no flushing of inherited parent buffers
