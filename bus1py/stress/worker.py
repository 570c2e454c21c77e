"""One stress process's loop: runs its planned actions, traces every event; the part both
kinds share (bus_worker.BusWorker, transport_worker.TransportWorker; child.py starts one).

`Worker` is the plan's loop, signals, the live counters, the end of a run and the result;
a kind provides how it sends and receives.

Invariants:
  - The process performs exactly its Planner's action sequence (workload.py), in order;
    receives happen between actions, as many as are ready (never blocking for long), so
    what it receives depends on timing but what it *does* does not.  A transport and a
    protocol change how a message travels, never what is sent.
  - Every traced event is recorded in the order it happened in this process (one
    thread), so `seq` is the process's local order.  wall_ns is taken *before* a send or
    a signal write and *after* a receive or signal read, so for every message
    deliver.wall_ns >= send.wall_ns (latencies are never negative).
  - A failed call changes nothing on the bus (SPEC section 5), so it leaves no trace row;
    it is only counted by errno.
  - Message and signal ids are `index << 40 | counter` with one counter for both, so
    ids are unique in the trace; the message id travels in the first 8 bytes of the
    payload, so the receiver records `deliver` with the sender's id.  Under a protocol the
    id is also the last 8 bytes (layers.Causal measures hold-back by it).
  - Termination: after its last action the process marks itself SENT and keeps
    receiving until the parent raises DRAIN: on the bus once every process is SENT (every
    send has returned, so every message is committed and every signal written); on a
    transport once, besides, the wires handed out (WIRES_OUT, delay line and backlog
    included) equal the wires received (WIRES_IN) twice in a row.  It then drains its
    queue and pipe to empty, and nothing more can arrive: nobody reacts to a receive by
    sending.  So the trace holds every delivery of every accepted message.
  - Live counters go to this process's own slots of a shared array (no locks: one writer
    per slot); the parent only reads them.
"""
from __future__ import annotations

import errno
import hashlib
import os
import time

from .ids import ID_SHIFT
from .slots import (ACTIONS, CTL_ABORT, CTL_DRAIN, DELIVERED, ERRORS, MAX_DEPTH, PID, SENT, SIG_RECV,
                    SIG_SENT, ST_RUN, ST_SENT, ST_START, STATE, STRIDE)
from .trace import TraceWriter
from .workload import Planner, is_message

FILL = bytes(range(256)) * 4096  # payload filler, sliced (1 MiB)


class Worker:
    """The plan's loop and what every kind does alike.  A kind provides `kinds` (the action
    kinds it performs, a `do_<kind>` each), `drain()` (take in what is ready, without
    waiting; how many), `wait(timeout)` (wait for one arrival at most that long) and
    `idle()` (one round of receiving while the others finish sending)."""

    kinds: tuple = ()

    def __init__(self, spec):
        s = self.spec = spec
        self.index = s.index
        self.counters = s.counters
        self.base = getattr(s, "slot", s.index) * STRIDE  # a churned slot's processes share it
        cfg = self.cfg = s.config
        self.trace = TraceWriter(s.trace_dir, s.index, cfg.batch_rows)
        self.next_id = 0
        self.signal_r = s.signal_read_fd
        self.signal_w = s.signal_write_fds  # target process -> write fd
        self.sigbuf = b""
        self.errors = {}
        self.n_sent = self.n_deliv = self.n_sig_sent = self.n_sig_recv = 0
        self.n_actions = 0
        self.max_depth = 0
        self.last_recv = 0
        self.digest = hashlib.sha256()
        self.done_kinds = {}

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

    def publish(self):
        c, b = self.counters, self.base
        c[b + SENT] = self.n_sent
        c[b + DELIVERED] = self.n_deliv
        c[b + SIG_SENT] = self.n_sig_sent
        c[b + SIG_RECV] = self.n_sig_recv
        c[b + ACTIONS] = self.n_actions
        c[b + MAX_DEPTH] = self.max_depth

    def sample_depth(self):
        """Take a sample of the queue's depth into max_depth (where a kind can read it)."""

    # ---- signals ----

    def may_signal(self) -> bool:
        """Whether a signal may be written now (a kind may first wait)."""
        return True

    def signal(self, target, action):
        fd = self.signal_w.get(target)
        if fd is None or not self.may_signal():
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
            self.wait(self.cfg.recv_wait)
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
        handlers = {k: getattr(self, "do_" + k) for k in self.kinds}
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
                    self.wait(min(wait, 0.002))
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
            self.done_kinds[action.kind] = self.done_kinds.get(action.kind, 0) + 1
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
            self.idle()
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
        self.close()
        return self.result(start, sent_at=sent_at, drain_at=drain_at, drained_at=drained_at)

    def close(self):
        """What the process lets go of once drained."""

    def result(self, start, **times):
        return {
            "index": self.index, "pid": os.getpid(), "actions": self.n_actions,
            "plan_sha256": self.digest.hexdigest(), "kinds": self.done_kinds,
            "sent": self.n_sent, "delivered": self.n_deliv,
            "signals_sent": self.n_sig_sent, "signals_received": self.n_sig_recv,
            "errors": self.errors, "max_depth": self.max_depth,
            "trace_rows": self.trace.seq, "trace_files": self.trace.files,
            "trace_bytes": self.trace.bytes, "start": start, **times,
            "end": time.monotonic(), "cpu": sum(os.times()[:2]),
        }
