"""Section 1c: what a receive costs against payload size, waiting excluded.

A one-way run's receiver CPU counts its spinning while the sender is still copying a
large payload in, so it grows with the size even when the receive itself does not.  Here
the sender fills the queue with a batch of messages first and only then does the
receiver take them, timing the thread CPU of the receive calls alone (with
`release()` for zero-copy messages): the cost of a receive whose message is ready, taken
from a queue another CPU filled (its lines come from that CPU's cache, as in a pipeline).

Invariants: both processes are forked children, pinned to different CPUs when the run
pins; the receiver's quota holds a whole batch of the largest size, so the sender never
waits; the figure of an (api, size) is the median over rounds of CPU ns per message, and
each round measures every (api, size) once, after a warm-up drain that is not counted and
starting at a different one each round, so the ratios between sizes come from the same
stretches of time and no size is always the first.
"""
from __future__ import annotations

import json
import os
import statistics
import time

import bus1py

from .common import NCPU, pin

BATCH = 32
APIS = ("recv(copy=False)", "recv_many(copy=False)", "recv()")


def spread(drain, api):
    """((ns, size) of the cheapest size, (ns, size) of the dearest) of `api`'s receives, or
    None when it was not measured: the receive-cost target's "within 2x" is their ratio."""
    got = [(ns, size) for (a, size), ns in drain.items() if a == api]
    return (min(got), max(got)) if got else None


def _drain(peer, api, n):
    """Receive n ready messages with `api`; the thread CPU ns it took."""
    t = time.thread_time_ns()
    if api == "recv(copy=False)":
        for _ in range(n):
            peer.recv(0, copy=False).release()
    elif api == "recv_many(copy=False)":
        got = 0
        while got < n:
            ms = peer.recv_many(n - got, 0, copy=False)
            for m in ms:
                m.release()
            got += len(ms)
    else:
        for _ in range(n):
            peer.recv(0)
    return time.thread_time_ns() - t


def _order(jobs, r):
    """Round r's order: a warm-up (the receiver was idle, its first drain is slower; its
    figure is dropped), then every job, starting at a different one each round."""
    k = r % len(jobs)
    return [jobs[k - 1]] + jobs[k:] + jobs[:k]


def _child(fn):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    return pid


def bench_drain(cfg, progress=None, task=None):
    """{(api, size): median CPU ns per received message} for bus1py's receive calls."""
    sizes, rounds = list(cfg.sweep_sizes), cfg.drain_rounds
    jobs = [(api, s) for s in sizes for api in APIS]
    quota = BATCH * (max(sizes) + 4096)
    with bus1py.Bus.create(pool_size=max(64 << 20, 2 * quota)) as bus:
        tx, rx = bus.peer(), bus.peer(quota_bytes=2 * quota)  # the one sender holds half (fair shares)
        h = rx.transfer(rx.create_node(), tx)
        go_r, go_w = os.pipe()      # receiver -> sender: fill the queue
        full_r, full_w = os.pipe()  # sender -> receiver: the batch is queued
        out_r, out_w = os.pipe()    # receiver -> bench: the figures

        # each round takes every (call, size) once: a stretch of load hits all of them alike
        def sender():
            pin(0 if cfg.pin and NCPU > 1 else None)
            payloads = {s: os.urandom(s) for s in sizes}
            for r in range(rounds):
                for _, size in _order(jobs, r):
                    if os.read(go_r, 1) != b"g":
                        return
                    for _ in range(BATCH):
                        tx.send(h, payloads[size])
                    os.write(full_w, b"f")

        def receiver():
            pin(1 if cfg.pin and NCPU > 1 else None)
            per = {job: [] for job in jobs}
            for r in range(rounds):
                for n, job in enumerate(_order(jobs, r)):
                    os.write(go_w, b"g")
                    os.read(full_r, 1)
                    ns = _drain(rx, job[0], BATCH) / BATCH
                    if n:
                        per[job].append(ns)
            with os.fdopen(out_w, "w") as f:
                json.dump([[api, size, statistics.median(v)] for (api, size), v in per.items()], f)

        pids = [_child(sender), _child(receiver)]
        for fd in (go_r, go_w, full_r, full_w, out_w):
            os.close(fd)
        with os.fdopen(out_r) as f:
            text = f.read()
        codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
        if any(codes) or not text:
            raise RuntimeError(f"drain: a child failed (exit codes {codes})")
        if progress is not None:
            progress.advance(task)
    return {(api, size): ns for api, size, ns in json.loads(text)}
