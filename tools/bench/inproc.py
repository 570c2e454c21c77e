"""In-process sections: the cost of one queue operation against queue length (3) and where
bus1py's time goes per call (5a), plus the loops `perf` records (5b).  Times here are thread
CPU time or medians of single calls, so preemption by other jobs on the machine does not
count."""
from __future__ import annotations

import functools
import gc
import math
import os
import statistics
import time
from array import array

import bus1py
from bus1py._b1 import ffi, lib

from .harness import run_oneway
from .bus_channels import BusChannel
from .transports import MQChannel, posix_ipc


def _nargs(fn):
    return len(ffi.typeof(fn).args)


class RawOps:
    """The C helper's send/recv calls with every argument bound (functools.partial over the
    cffi function: no Python frame per call), for timing the queue itself.

    Adapts to the helper's signature as it evolves (b1_send/b1_tx_prepare gained carried
    handles and flags, b1_recv/b1_recv_wait a handles_out buffer); each call returns what the
    C function returns (negative: -errno)."""

    def __init__(self, bus, sender, receiver, handles, payload):
        base = bus.base()
        handles = list(handles) if isinstance(handles, (list, tuple)) else [handles]
        size = len(payload)
        self.base, self.payload = base, payload
        self.dests = ffi.new("uint64_t[]", handles)
        self.out = ffi.new("uint64_t[4]")
        self.info = ffi.new("struct b1_msg_info *")
        self.buflen = max(size, 4096)
        self.buf = ffi.new("char[]", self.buflen)
        self.hbuf = ffi.new("uint64_t[]", max(bus.limits.max_msg_handles, 1))
        common = (base, sender._slot, sender.id, self.dests, len(handles), payload, size)
        extra = {8: (), 11: (ffi.NULL, 0, 0)}
        ns = _nargs(lib.b1_send)
        if ns not in extra:
            raise RuntimeError(f"b1_send takes {ns} arguments: tools/bench/inproc.py RawOps needs updating")
        self.send = functools.partial(lib.b1_send, *common, *extra[ns], self.out)
        self.tx = ffi.new("struct b1_tx *")
        self.tx_dests = ffi.new("struct b1_dest[]", len(handles))
        self.tx.dests = self.tx_dests
        self.prepare = functools.partial(lib.b1_tx_prepare, base, self.tx, sender._slot, sender.id,
                                         self.dests, len(handles), payload, size,
                                         *{8: (), 11: (ffi.NULL, 0, 0)}[_nargs(lib.b1_tx_prepare)])
        self.stage = functools.partial(lib.b1_tx_stage, base, self.tx, 0)
        self.stamp = functools.partial(lib.b1_tx_stamp, base, self.tx)
        self.commit = functools.partial(lib.b1_tx_commit, base, self.tx, 0)
        self.recv = self.recv_for(receiver)
        self.recv_wait = self.recv_for(receiver, wait=True)
        self.empty_call = functools.partial(lib.b1_peer_wake_seq, base, receiver._slot)

    def recv_for(self, peer, wait=False):
        fn = lib.b1_recv_wait if wait else lib.b1_recv
        args = [self.base, peer._slot, peer.id, self.info, self.buf, self.buflen]
        if _nargs(fn) == (8 if wait else 7):
            args.append(self.hbuf)
        if wait:
            args.append(-1)
        return functools.partial(fn, *args)


def bench_queue_cost(cfg, progress=None, task=None, size=64):
    """Section 3: steady-state send+recv pairs on a queue holding m committed entries.

    In one process (no wakeups): one receiver peer per m, each queue filled to its m first
    (all of them live in the same segment at once: 1.1M entries for m up to 1M); then, for
    every repetition, each queue in turn gets P pairs of (a send from another peer, a recv),
    so every pair inserts behind m entries and dequeues the front, and the queue stays at m.
    Interleaving the queues within each repetition makes a burst of load from elsewhere hit
    every m alike.  Timed through the raw C calls (RawOps: lib.b1_send + lib.b1_recv) and
    through the API (Peer.send + Peer.recv(0)); `c_ns` is min(raw) minus the min cost of two
    empty cffi calls.  All times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so
    being preempted by other jobs on the machine does not count."""
    ms = list(cfg.qc_ms)
    total = sum(ms)
    cap = total + max(100_000, total // 10)
    rec = 1 << (16 + size - 1).bit_length()  # the pool's size class for one record
    limits = dict(max_entries=cap, pool_size=cap * max(rec, 64) + (16 << 20),
                  quota_messages=2 * cap, quota_bytes=1 << 40)  # one sender holds half (fair shares)
    res = {"limits": limits, "rows": []}
    payload = bytes(size)
    pc = time.thread_time_ns  # CPU time: time spent preempted by other jobs is not counted
    P = cfg.qc_pairs
    with bus1py.Bus.create(**limits) as bus:
        a = bus.peer()
        queues = []
        for m in ms:
            b = bus.peer()
            h = b.transfer(b.create_node(), a)
            ops = RawOps(bus, a, b, h, payload)
            queues.append({"m": m, "b": b, "h": [h], "ops": ops, "raw": [], "api": [], "call": []})
        gc.disable()
        try:
            for q in queues:
                send = q["ops"].send
                t = pc()
                for _ in range(q["m"]):
                    r = send()
                    if r < 0:  # b1_send: -errno on failure (0 or the timestamp on success)
                        raise bus1py.bus_error(r, f"filling a queue to {q['m']}")
                q["fill_s"] = (pc() - t) / 1e9
            for q in queues:  # warm up (caches, branch predictors, CPU clock)
                send, recv = q["ops"].send, q["ops"].recv
                for _ in range(P):
                    send()
                    recv()
            for _ in range(cfg.qc_reps):
                for q in queues:
                    ops = q["ops"]
                    send, recv, noop = ops.send, ops.recv, ops.empty_call
                    t = pc()
                    for _ in range(P):
                        send()
                        recv()
                    q["raw"].append((pc() - t) / P)
                    t = pc()
                    for _ in range(P):
                        noop()
                        noop()
                    q["call"].append((pc() - t) / P)
                    asend, arecv, hl = a.send, q["b"].recv, q["h"]
                    t = pc()
                    for _ in range(P):
                        asend(hl, payload)
                        arecv(0)
                    q["api"].append((pc() - t) / P)
                if progress is not None:
                    progress.advance(task)
        finally:
            gc.enable()
        for q in queues:
            b, m = q["b"], q["m"]
            depth = lib.b1_queue_depth(bus.base(), b._slot)
            n_q = b.query().queued_entries
            if n_q != m:
                raise RuntimeError(f"queue holds {n_q} entries, expected {m}")
            raw = q["raw"]
            res["rows"].append({"m": m, "raw_ns": statistics.median(raw), "raw_min_ns": min(raw),
                                "api_ns": statistics.median(q["api"]),
                                "c_ns": max(min(raw) - min(q["call"]), 1.0), "depth": depth,
                                "fill_s": q["fill_s"]})
    rows = res["rows"]
    for key in ("raw_ns", "api_ns", "c_ns", "raw_min_ns"):
        res[f"ratio_{key}"] = rows[-1][key] / rows[0][key]
    # least-squares fit cost = a + b*log2(m) on the C-side cost

    xs = [math.log2(r["m"]) for r in rows]
    ys = [r["c_ns"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs) or 1.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    res["fit"] = (my - slope * mx, slope)
    return res


def bench_profile(cfg, size=64):
    """Section 5a: the cost of one send and one recv, in-process, queue depth 0 or 1.

    Every loop alternates one send and one recv, so the queue never holds more than one
    message (as in a ping-pong).  Per-call rows time each call with perf_counter_ns around
    it and subtract the cost of one timer read; `pair` rows time a whole send+recv loop with
    no timer inside.  Each row is the minimum over 5 batches of the mean ns per call."""
    n = cfg.prof_n
    payload = bytes(size)
    rows = {}
    with bus1py.Bus.create() as bus:
        a, b = bus.peer(), bus.peer()
        node = b.create_node()
        h = b.transfer(node, a)
        extra = [bus.peer() for _ in range(7)]
        mc_handles = [h] + [p.transfer(p.create_node(), a) for p in extra]
        mc_peers = [b] + extra
        ops = RawOps(bus, a, b, h, payload)
        pc = time.perf_counter_ns
        cpu = time.thread_time_ns
        hl = [h]
        raw_send, raw_recv, raw_wait = ops.send, ops.recv, ops.recv_wait

        def api_send():
            a.send(hl, payload)

        def api_recv():
            b.recv()

        def api_recv0():
            b.recv(0)

        def timer():  # what one perf_counter_ns() adds to an interval: median of back-to-back reads
            d = array("q", bytes(8 * n))
            for i in range(n):
                t0 = pc()
                t1 = pc()
                d[i] = t1 - t0
            return statistics.median(d)

        def empty_call():
            f = ops.empty_call
            t = cpu()
            for _ in range(n):
                f()
            return (cpu() - t) / n

        def alternate(snd, rcv):
            """(ns per snd, ns per rcv): the median of each call timed alone inside an
            alternating loop, minus one timer read (a preemption hits one sample, not the
            median).  The harness wrappers' own Python call is included in both."""
            ds, dr = array("q", bytes(8 * n)), array("q", bytes(8 * n))
            for i in range(n):
                t0 = pc()
                snd()
                t1 = pc()
                rcv()
                t2 = pc()
                ds[i] = t1 - t0
                dr[i] = t2 - t1
            return statistics.median(ds) - tmr, statistics.median(dr) - tmr

        def pair(fn):  # whole loops: timed in CPU time (preemption does not count)
            def once():
                t = cpu()
                fn(n)
                return (cpu() - t) / n
            return min(once() for _ in range(5))

        def api_pair(k):
            for _ in range(k):
                a.send(hl, payload)
                b.recv()

        def raw_pair(k):
            for _ in range(k):
                raw_send()
                raw_wait()

        def steps():  # medians, as in alternate()
            prep, stage, stmp, commit = ops.prepare, ops.stage, ops.stamp, ops.commit
            d = [array("q", bytes(8 * n)) for _ in range(4)]
            for i in range(n):
                t0 = pc()
                prep()
                t1 = pc()
                stage()
                t2 = pc()
                stmp()
                t3 = pc()
                commit()
                t4 = pc()
                raw_recv()
                d[0][i] = t1 - t0
                d[1][i] = t2 - t1
                d[2][i] = t3 - t2
                d[3][i] = t4 - t3
            return [statistics.median(x) - tmr for x in d]

        gc.disable()
        try:
            tmr = timer()
            call = min(empty_call() for _ in range(5))
            rows["pair: Peer.send + Peer.recv (API), depth 0/1"] = pair(api_pair)
            rows["pair: lib.b1_send + lib.b1_recv_wait (raw cffi)"] = pair(raw_pair)
            rows["send: Peer.send (API)"] = alternate(api_send, raw_recv)[0]
            rows["send: lib.b1_send (raw cffi)"] = alternate(raw_send, raw_recv)[0]
            st = steps()
            for i, nm in enumerate(("prepare", "stage", "stamp", "commit")):
                rows[f"send step: b1_tx_{nm} (raw cffi)"] = st[i]
            rows["recv: Peer.recv() (API)"] = alternate(raw_send, api_recv)[1]
            rows["recv: Peer.recv(0) (API)"] = alternate(raw_send, api_recv0)[1]
            rows["recv: lib.b1_recv_wait (raw cffi)"] = alternate(raw_send, raw_wait)[1]
            rows["recv: lib.b1_recv (raw cffi)"] = alternate(raw_send, raw_recv)[1]
            rows["timer: perf_counter_ns() (subtracted above)"] = tmr
            rows["timer: empty cffi call"] = call
            rows.update(_peer_pair_costs(n, payload, lambda fn: min(fn() for _ in range(5))))
            for k in (2, 4, 8):
                hk = mc_handles[:k]
                rk = [ops.recv_for(p) for p in mc_peers[:k]]

                def mc_send():
                    a.send(hk, payload)

                def mc_drain():
                    for f in rk:
                        f()
                rows[f"multicast send: Peer.send to k={k} (API)"] = alternate(mc_send, mc_drain)[0]
            rows.update(_batch_costs(a, mc_handles, mc_peers, payload, cfg.batch, max(20, n // cfg.batch // 8)))
        finally:
            gc.enable()
    return rows


def _batch_costs(a, handles, peers, payload, batch, rounds):
    """CPU ns per message of the batch calls in-process: `send_many` of `batch` messages to
    k = 1 and 8 receivers (per message sent), `recv_many` of `batch` (per message
    received); each the minimum over rounds of the mean, as `pair` takes it."""
    cpu = time.thread_time_ns
    chunk = [payload] * batch
    rows, recv_ns = {}, []
    for k in (1, 8):
        hk, rk = handles[:k], [p.recv_many for p in peers[:k]]
        sends = []
        for _ in range(rounds):
            t = cpu()
            sent = a.send_many(hk, chunk)
            sends.append((cpu() - t) / sent)
            for f in rk:
                got = 0
                t = cpu()
                while got < sent:
                    got += len(f(batch, 0))
                recv_ns.append((cpu() - t) / got)
        rows[f"batch send: Peer.send_many to k={k}, per message (API)"] = min(sends)
    rows["batch recv: Peer.recv_many, per message (API)"] = min(recv_ns)
    return rows


def _peer_pair_costs(n, payload, batch):
    """In-process write+read pair of the fastest peers, for scale (same loop shape)."""
    rows = {}
    size = len(payload)
    r, w = os.pipe()
    try:
        def t_pipe():
            pc, write, read = time.thread_time_ns, os.write, os.read
            t = pc()
            for _ in range(n):
                write(w, payload)
                read(r, size)
            return (pc() - t) / n
        rows["peer pair: os.write + os.read (os.pipe)"] = batch(t_pipe)
    finally:
        os.close(r)
        os.close(w)
    if posix_ipc is not None:
        mq = MQChannel(size)
        try:
            q = mq.qs[0]

            def t_mq():
                pc, send, receive = time.thread_time_ns, q.send, q.receive
                t = pc()
                for _ in range(n):
                    send(payload)
                    receive()
                return (pc() - t) / n
            rows["peer pair: MessageQueue.send + receive (posix_ipc)"] = batch(t_mq)
        finally:
            mq.close()
    return rows


def _profile_loop(seconds=4.0, size=64):
    """Target for `perf record`: the Python-API send+recv pair in a loop, in-process."""
    payload = bytes(size)
    with bus1py.Bus.create() as bus:
        a, b = bus.peer(), bus.peer()
        h = b.transfer(b.create_node(), a)
        hl = [h]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10_000):
                a.send(hl, payload)
                b.recv()


def _profile_raw(seconds=4.0, size=64):
    """Target for `perf record`: raw C send + recv_wait (RawOps) in a loop, in-process."""
    with bus1py.Bus.create() as bus:
        a, b = bus.peer(), bus.peer()
        ops = RawOps(bus, a, b, b.transfer(b.create_node(), a), bytes(size))
        send, recv = ops.send, ops.recv_wait
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(20_000):
                send()
                recv()


def _oneway_n(seconds):
    return int(400_000 * seconds), 2_000  # timed messages, warm-up messages


def _profile_oneway(seconds=4.0, size=64):
    """Target for `perf record`: bus1py one-way, 2 pinned processes, about `seconds` long."""
    ch = BusChannel(size)
    n, warm = _oneway_n(seconds)
    try:
        run_oneway(ch, size, n, warm, 0, (1,), timeout=seconds * 20 + 60)
    finally:
        ch.close()


