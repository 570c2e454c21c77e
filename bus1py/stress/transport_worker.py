"""The stress process on a transport endpoint: the message workload (unicast, multicast,
signals) over any transport (transports/), optionally through a causal-order protocol
(layers.py), on Worker's loop.

Invariants:
  - On a transport, trace rows are the application's view: `send` when the application
    sends (one row per multicast, or one per copy for a protocol whose multicast is
    "sequential", as the simulator does), `deliver` when the layer hands a payload to the
    application.  Wires (protocol control, retries, the delay line) are counted, never
    traced.  Stamps are empty: these transports have none.
  - Signals under a protocol: only bus1 orders what its processes tell each other outside
    the protocol, and only once a send has passed its sync round (`busy` is False); so a
    signal first waits (receiving) until the protocol is not busy, and is skipped and
    counted if that takes longer than SIGNAL_WAIT.  The other protocols cannot see side
    channels at all, so the runner gives signals weight 0 for them (see docs/STRESS.md).
  - Its quiescence counters: WIRES_OUT (delay line and backlog included) and WIRES_IN,
    published out before in, so the parent never sees a reply without its request.
"""
from __future__ import annotations

import time

from .layers import DelayLine, make_layer
from .slots import ERRORS, WIRES_IN, WIRES_OUT
from .worker import FILL, Worker
from .workload import MESSAGE_KINDS

SIGNAL_WAIT = 2.0  # seconds a signal waits for bus1's sends to pass their sync round


class TransportWorker(Worker):
    """A process on a transport endpoint, through a layer (nothing, or a protocol machine)
    and the chaos delay line when there is one."""

    kinds = MESSAGE_KINDS

    def __init__(self, spec):
        super().__init__(spec)
        s, cfg = spec, self.cfg
        self.ep = s.transport.endpoint(s.index)
        self.layer = make_layer(cfg.protocol, s.index, cfg.processes, s.transport.native_multicast)
        self.sequential = self.layer.multicast == "sequential"
        self.trailer = cfg.protocol is not None
        self.delay = DelayLine(cfg.chaos_delay, cfg.seed, s.index) if cfg.chaos_delay else None
        self.wires_out = self.wires_in = 0
        self.max_backlog = 0

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

    def drain(self, limit=512) -> int:
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
        self.drain()

    def idle(self):
        self.wait(0.01)

    def close(self):
        self.ep.close()

    # ---- actions ----

    def app_send(self, action, dests):
        groups = [[d] for d in dests] if self.sequential else [list(dests)]
        for g in groups:
            mid = self.new_id()
            head = mid.to_bytes(8, "little")
            size = action.size
            if self.trailer:
                payload = head + FILL[:max(0, size - 16)] + head
            else:
                payload = head + FILL[:max(0, size - 8)]
            self.trace.record("send", mid, time.monotonic_ns(), dests=g, action=action.kind,
                              size=len(payload))
            self.emit(self.layer.send(g, payload))
            self.n_sent += 1

    def do_unicast(self, a):
        self.app_send(a, a.targets[:1])

    def do_multicast(self, a):
        self.app_send(a, a.targets)

    def may_signal(self) -> bool:
        if self.layer.busy:  # bus1: wait until our sends have passed their sync round
            until = time.monotonic() + SIGNAL_WAIT
            while self.layer.busy and time.monotonic() < until:
                self.wait(0.001)
            if self.layer.busy:
                self.errors["signal:busy-skipped"] = self.errors.get("signal:busy-skipped", 0) + 1
                return False
        return True

    # ---- the run ----

    def publish(self):
        self.max_depth = self.layer.held
        super().publish()
        c, b = self.counters, self.base
        c[b + ERRORS] = sum(self.errors.values())
        c[b + WIRES_OUT] = self.wires_out  # out before in: a reader never sees a reply missing
        c[b + WIRES_IN] = self.wires_in

    def result(self, start, **times):
        res = super().result(start, **times)
        res.update(max_depth=getattr(self.layer, "held_max", 0), max_backlog=self.max_backlog,
                   wires_out=self.wires_out, wires_in=self.wires_in)
        res.update(self.layer.stats())
        return res
