"""One stress process over any transport (transports/), optionally running a causal-order
protocol (layers.py): the message workload (unicast, multicast, signals) of workload.py.

Invariants:
  - The process performs exactly its Planner's action sequence, in order (as worker.py);
    the transport and protocol change how a message travels, never what is sent.
  - Trace rows are the application's view: `send` when the application sends (one row
    per multicast, or one per copy for a protocol whose multicast is "sequential", as the
    simulator does), `deliver` when the layer hands a payload to the application.  Wires
    (protocol control, retries, the delay line) are counted, never traced.  Stamps are
    empty: these transports have none.
  - Message ids are `index << 40 | counter` in the first 8 payload bytes, as worker.py;
    under a protocol the id is also the last 8 bytes (layers.Causal measures hold-back by it).
  - Signals under a protocol: only bus1 orders what its processes tell each other outside
    the protocol, and only once a send has passed its sync round (`busy` is False); so a
    signal first waits (receiving) until the protocol is not busy, and is skipped and
    counted if that takes longer than SIGNAL_WAIT.  The other protocols cannot see side
    channels at all, so the runner gives signals weight 0 for them (see docs/STRESS.md).
  - Termination: the parent raises DRAIN once every process is SENT and, twice in a row,
    the wires handed out (WIRES_OUT, delay line and backlog included) equal the wires
    received (WIRES_IN): nothing is in flight and nothing more can be sent.  Every
    delivery of every message is then in the trace.
"""
from __future__ import annotations

import hashlib
import os
import time
import traceback

from .layers import DelayLine, make_layer
from .trace import TraceWriter
from .worker import (ACTIONS, CTL_ABORT, CTL_DRAIN, DELIVERED, ERRORS, ID_SHIFT, MAX_DEPTH, PID,
                     SENT, SIG_RECV, SIG_SENT, STATE, STRIDE, ST_RUN, ST_SENT, ST_START,
                     WIRES_IN, WIRES_OUT, _FILL, close_others, finish)
from .workload import Planner, is_message

SIGNAL_WAIT = 2.0  # seconds a signal waits for bus1's sends to pass their sync round


class IpcWorker:
    def __init__(self, spec):
        s = self.spec = spec
        cfg = self.cfg = s.config
        self.index = s.index
        self.counters = s.counters
        self.base = s.index * STRIDE
        self.trace = TraceWriter(s.trace_dir, s.index, cfg.batch_rows)
        self.ep = s.transport.endpoint(s.index)
        self.layer = make_layer(cfg.protocol, s.index, cfg.processes, s.transport.native_multicast)
        self.sequential = self.layer.multicast == "sequential"
        self.trailer = cfg.protocol is not None
        self.delay = DelayLine(cfg.chaos_delay, cfg.seed, s.index) if cfg.chaos_delay else None
        self.next_id = 0
        self.signal_r = s.signal_read_fd
        self.signal_w = s.signal_write_fds
        self.sigbuf = b""
        self.errors = {}
        self.n_sent = self.n_deliv = self.n_sig_sent = self.n_sig_recv = 0
        self.n_actions = self.wires_out = self.wires_in = 0
        self.max_backlog = 0
        self.last_recv = 0
        self.digest = hashlib.sha256()
        self.kinds = {}

    # ---- wires ----

    def emit(self, wires):
        for dest, data in wires:
            self.wires_out += len(dest) if isinstance(dest, list) else 1
            if self.delay is not None:
                self.delay.push(dest, data)
            elif isinstance(dest, list):
                self.ep.send_many(dest, data)
            else:
                self.ep.send(dest, data)

    def pump(self, limit=512) -> int:
        """Release due wires, push the backlog, take in what arrived; returns wires taken."""
        ep = self.ep
        if self.delay is not None and self.delay.heap:
            for dest, data in self.delay.pop_due(time.monotonic_ns()):
                if isinstance(dest, list):
                    ep.send_many(dest, data)
                else:
                    ep.send(dest, data)
        if ep.backlog:
            ep.flush()
            n = len(ep.pending)
            if n > self.max_backlog:
                self.max_backlog = n
        got = ep.poll(limit)
        if got:
            self.take(got)
        return len(got)

    def take(self, got):
        now = time.monotonic_ns()
        layer, record = self.layer, self.trace.record
        for src, data in got:
            self.wires_in += 1
            wires, delivered = layer.receive(src, data, now)
            if wires:
                self.emit(wires)
            for _sender, payload in delivered:
                record("deliver", int.from_bytes(payload[:8], "little"), now)
                self.n_deliv += 1
        self.last_recv = now

    def wait(self, timeout):
        """Wait for a wire at most `timeout` s (less if the delay line has one due sooner)."""
        if self.delay is not None:
            due = self.delay.next_due()
            if due is not None:
                timeout = min(timeout, max(0.0, (due - time.monotonic_ns()) / 1e9))
        if timeout > 0:
            self.ep.wait(timeout)
        self.pump()

    # ---- actions ----

    def new_id(self):
        i = self.next_id
        self.next_id += 1
        return self.index << ID_SHIFT | i

    def app_send(self, action, dests):
        groups = [[d] for d in dests] if self.sequential else [list(dests)]
        for g in groups:
            mid = self.new_id()
            head = mid.to_bytes(8, "little")
            size = action.size
            if self.trailer:
                payload = head + _FILL[:max(0, size - 16)] + head
            else:
                payload = head + _FILL[:max(0, size - 8)]
            self.trace.record("send", mid, time.monotonic_ns(), dests=g, action=action.kind,
                              size=len(payload))
            self.emit(self.layer.send(g, payload))
            self.n_sent += 1

    def do_unicast(self, a):
        self.app_send(a, a.targets[:1])

    def do_multicast(self, a):
        self.app_send(a, a.targets)

    def signal(self, target, action):
        fd = self.signal_w.get(target)
        if fd is None:
            return
        if self.layer.busy:  # bus1: wait until our sends have passed their sync round
            until = time.monotonic() + SIGNAL_WAIT
            while self.layer.busy and time.monotonic() < until:
                self.wait(0.001)
            if self.layer.busy:
                self.errors["signal:busy-skipped"] = self.errors.get("signal:busy-skipped", 0) + 1
                return
        sid = self.new_id()
        now = time.monotonic_ns()
        try:
            os.write(fd, sid.to_bytes(8, "little"))
        except BlockingIOError:
            self.errors["signal:pipe-full"] = self.errors.get("signal:pipe-full", 0) + 1
            return
        self.trace.record("signal_send", sid, now, dests=[target], action=action)
        self.n_sig_sent += 1

    def do_signal(self, a):
        self.signal(a.targets[0], "signal")

    def do_recv_signal(self, a):
        if time.monotonic_ns() - self.last_recv > 200_000:
            self.wait(self.cfg.recv_wait)
        self.signal(a.targets[0], "recv_signal")

    def drain_signals(self):
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

    # ---- the run ----

    def publish(self):
        c, b = self.counters, self.base
        c[b + SENT] = self.n_sent
        c[b + DELIVERED] = self.n_deliv
        c[b + SIG_SENT] = self.n_sig_sent
        c[b + SIG_RECV] = self.n_sig_recv
        c[b + ACTIONS] = self.n_actions
        c[b + MAX_DEPTH] = self.layer.held
        c[b + ERRORS] = sum(self.errors.values())
        c[b + WIRES_OUT] = self.wires_out  # out before in: a reader never sees a reply missing
        c[b + WIRES_IN] = self.wires_in

    def run(self):
        c, b, cfg, spec = self.counters, self.base, self.cfg, self.spec
        c[b + PID] = os.getpid()
        c[b + STATE] = ST_START
        planner = Planner(cfg.seed, self.index, spec.topology, spec.mix, cfg.sizes, cfg.fanout)
        handlers = {"unicast": self.do_unicast, "multicast": self.do_multicast,
                    "signal": self.do_signal, "recv_signal": self.do_recv_signal}
        spec.go.wait()
        c[b + STATE] = ST_RUN
        start = time.monotonic()
        deadline = start + cfg.duration if cfg.duration else None
        budget = cfg.messages if not cfg.duration else None
        ctl, ppid, rate, it = spec.control, os.getppid(), cfg.rate, 0
        while True:
            it += 1
            if it & 7 == 0:
                self.publish()
                if ctl[CTL_ABORT] or os.getppid() != ppid:
                    break
            self.drain_signals()
            self.pump()
            if rate:
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
            self.kinds[action.kind] = self.kinds.get(action.kind, 0) + 1
            handlers[action.kind](action)
            self.n_actions += 1
        sent_at = time.monotonic()
        self.publish()
        c[b + STATE] = ST_SENT
        while not ctl[CTL_DRAIN] and not ctl[CTL_ABORT] and os.getppid() == ppid:
            self.drain_signals()
            self.wait(0.01)
            self.publish()
        drain_at = time.monotonic()
        while self.drain_signals() or self.pump():
            pass
        self.publish()
        self.trace.flush()
        self.ep.close()
        res = {
            "index": self.index, "pid": os.getpid(), "actions": self.n_actions,
            "plan_sha256": self.digest.hexdigest(), "kinds": self.kinds,
            "sent": self.n_sent, "delivered": self.n_deliv,
            "signals_sent": self.n_sig_sent, "signals_received": self.n_sig_recv,
            "errors": self.errors, "max_depth": getattr(self.layer, "held_max", 0),
            "max_backlog": self.max_backlog,
            "wires_out": self.wires_out, "wires_in": self.wires_in,
            "trace_rows": self.trace.seq, "trace_files": self.trace.files,
            "trace_bytes": self.trace.bytes, "start": start, "sent_at": sent_at,
            "drain_at": drain_at, "drained_at": time.monotonic(),
            "end": time.monotonic(), "cpu": sum(os.times()[:2]),
        }
        res.update(self.layer.stats())
        return res


def child_main(spec):
    """Entry point of a stress process over a transport (started by fork)."""
    keep = {spec.signal_read_fd, *spec.signal_write_fds.values(),
            *spec.transport.inherited_fds(spec.index)}
    close_others(keep, spec.all_pipe_fds + spec.transport.all_fds())
    try:
        result = IpcWorker(spec).run()
        status = 0
    except BaseException as e:
        result = {"index": spec.index, "pid": os.getpid(), "failed": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
        status = 1
    finish(spec, result, status)
