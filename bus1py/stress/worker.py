"""One stress process: runs its planned actions, traces every event; two kinds, one loop.

`BusWorker` drives its own peer of the bus with the whole API (nodes, handles, destroy);
`TransportWorker` runs the message workload (unicast, multicast, signals) over any transport
(transports/), optionally through a causal-order protocol (layers.py).  `Worker` is what they
share: the plan's loop, signals, the live counters, the end of a run and the result.

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
import json
import os
import time
import traceback

from ..message import MessageType
from .ids import DESTROY_BIT, ID_SHIFT, NODE_SHIFT, node_id  # noqa: F401 (re-exported)
from .layers import DelayLine, make_layer
from .nodes import NodeActions
from .trace import TraceWriter
from .workload import ACTION_KINDS, MESSAGE_KINDS, Planner, is_message

# Shared counter slots per process (parent reads, child writes).
# WIRES_OUT/WIRES_IN: transport-level wires handed out / received (a transport run's
# quiescence test: the parent ends it once every process is SENT and they are equal).
SENT, DELIVERED, SIG_SENT, SIG_RECV, ERRORS, MAX_DEPTH, ACTIONS, STATE, PID, WIRES_OUT, WIRES_IN = range(11)
STRIDE = 11
# Process states.
ST_START, ST_RUN, ST_SENT, ST_DONE, ST_FAILED = range(5)
# Control slots (parent writes); CTL_LEAVE: mortal processes leave now (churn.py).
CTL_DRAIN, CTL_ABORT, CTL_LEAVE = range(3)

SIGNAL_WAIT = 2.0  # seconds a signal waits for bus1's sends to pass their sync round

_DATA, _DESTROY = MessageType.DATA, MessageType.NODE_DESTROY
_FILL = bytes(range(256)) * 4096  # payload filler, sliced (1 MiB)


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


class BusWorker(NodeActions, Worker):
    """A process with its own peer of the bus, the whole API."""

    kinds = ACTION_KINDS

    def __init__(self, spec):
        super().__init__(spec)
        s, cfg = spec, self.cfg
        self.peer = s.peer
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
        # with churn: processes from n_stable up are mortal (churn.py); 0: no churn
        self.n_stable = cfg.processes - cfg.churn_slots if cfg.churn else 0
        self.all_destroyable = False  # churn.py: a mortal's holders must never drop its nodes

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

    def wait(self, timeout):
        """Wait up to `timeout` s for one message (the pipe is polled by the caller)."""
        try:
            self.on_message(self.peer.recv(timeout))
        except TimeoutError:
            pass
        except OSError as e:
            self.error(e, "recv")

    def idle(self):
        try:
            self.on_message(self.peer.recv(0.02))
        except TimeoutError:
            pass
        except OSError as e:
            self.error(e, "recv")
            time.sleep(0.01)
        self.drain()
        self.sample_depth()

    def sample_depth(self):
        try:
            depth = self.peer.query().queued_messages
        except OSError:
            return
        if depth > self.max_depth:
            self.max_depth = depth

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


def child_main(spec):
    """Entry point of a stress process (started by fork): a TransportWorker when the spec
    names a transport, else a BusWorker."""
    transport = getattr(spec, "transport", None)
    # keep only our pipe ends: our read end, write ends to our signal targets
    keep, fds = {spec.signal_read_fd, *spec.signal_write_fds.values()}, spec.all_pipe_fds
    if transport is not None:
        keep |= set(transport.inherited_fds(spec.index))
        fds = fds + transport.all_fds()
    close_others(keep, fds)
    try:
        result = (BusWorker if transport is None else TransportWorker)(spec).run()
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
