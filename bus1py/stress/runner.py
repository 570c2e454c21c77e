"""The parent of a stress run: builds the bus and wiring, forks the processes, watches them.

Invariants:
  - All wiring happens here, before any child exists: every peer, every process's primary
    node, every handle transfer (peer.transfer in the parent, as bus1's bootstrap
    HANDLE_TRANSFER), every side-channel pipe.  Children inherit it by fork and only
    ever touch their own peer.  With --churn the mortal processes are the exception:
    they come later and create their own peers; churn.py hands them their handles.
  - The parent never uses pyarrow before forking (only afterwards, to summarise), so no
    child inherits a half-held lock of pyarrow's thread pools.
  - Children start together: each waits on one Event the parent sets once every child is
    up, so startup of 256 processes does not eat into the measured duration.
  - The run always ends with no child left and the bus unlinked: on success, on a child
    failure (the rest are told to abort, then killed after a grace period), on the
    watchdog, and on KeyboardInterrupt.  Children ignore SIGINT (a Ctrl-C reaches the
    whole process group): the parent alone takes it, and aborts them through the control
    array, so they leave as on any abort.  Before unlinking, once every process is gone and
    the parent has disconnected the peers it holds, the bus's use is read (`final_use`):
    all zero unless something leaked.
"""
from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

from ..bus import Bus
from .config import StressConfig, bus_limits, default_timeout
from .child import child_main
from .slots import (CTL_ABORT, CTL_DRAIN, ST_DONE, ST_FAILED, ST_SENT, STATE, STRIDE,
                    WIRES_IN, WIRES_OUT)
from .workload import Topology, bus_mix, transport_mix


@dataclass
class StressResult:
    config: StressConfig
    ok: bool
    results: list           # per-process result dicts (worker.run)
    failures: list          # human-readable reasons the run is not ok
    wall: float             # seconds from go to the last process done
    bus_name: str
    mix: dict
    samples: dict = field(default_factory=dict)  # psutil peaks: cpu/rss
    skipped: dict = field(default_factory=dict)  # action kind left out -> why
    final_use: dict | None = None  # bus.info() use counts once every process was gone
    final_problems: list = ()      # what Bus.check() found then (fsck), in words
    resources: dict = field(default_factory=dict)  # resources.Sampler.finish: flatness verdicts
    churn: dict = field(default_factory=dict)      # churn.Churn.stats: spawned/exited/killed/reaped


USE_KEYS = ("peers", "nodes", "handles", "entries_in_use", "pool_used")


@contextmanager
def children_ignore_sigint():
    """Processes forked inside this block never see SIGINT: it is blocked while they are
    forked, and a child keeps the mask it was forked with. The parent's SIGINT that arrives
    meanwhile stays pending and is taken when the block ends, never lost."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Run:
    """One stress run's live state, for the monitor."""

    def __init__(self, cfg: StressConfig):
        self.cfg = cfg
        n = cfg.processes
        if cfg.direct_bus:
            self.mix, self.skipped = bus_mix(cfg.mix), {}
        else:
            self.mix, self.skipped = transport_mix(cfg.mix, cfg.protocol)
        self.transport = None
        self.quiet_since = None  # (wires out, wires in) at the last look, for quiescence
        self.topology = Topology.ring(n - cfg.churn_slots if cfg.churn else n, cfg.reach)
        ctx = mp.get_context("fork")
        self.ctx = ctx
        self.counters = ctx.RawArray("q", n * STRIDE)
        self.control = ctx.RawArray("q", 3)
        self.n_stable = n - cfg.churn_slots if cfg.churn else n  # the rest come and go
        self.churn = None
        self.sampler = None
        self.final_use = None
        self.final_problems = []
        self.go = ctx.Event()
        self.result_dir = tempfile.mkdtemp(prefix="bus1py-stress-")
        self.procs = []
        self.pipe_fds = []
        self.peers = []
        self.bus = None
        self.bus_name = ""
        self.t_go = None

    # ---- setup ----

    def setup(self):
        cfg = self.cfg
        if cfg.trace_dir:
            os.makedirs(cfg.trace_dir, exist_ok=True)
            stale = [f for f in os.listdir(cfg.trace_dir) if f.endswith(".parquet")]
            if stale:
                raise FileExistsError(errno.EEXIST, f"trace directory {cfg.trace_dir!r} already holds "
                                          f"{len(stale)} Parquet files; give an empty one")
        if not cfg.direct_bus:
            return self.setup_transport()
        kw = bus_limits(cfg)
        if cfg.inject:
            kw.update(inject=cfg.inject, inject_pause_ns=cfg.inject_pause_ns)
        self.bus = bus = Bus.create(**kw)
        peers = [bus.peer() for _ in range(self.n_stable)]
        own = [p.create_node() for p in peers]
        self.own = own
        reach = self.topology.reach
        handles = [{i: own[i] if i == j else peers[i].transfer(own[i], peers[j]) for i in reach[j]}
                   for j in range(self.n_stable)]
        pipes = self.signal_pipes()
        self.specs = [SimpleNamespace(
            index=j, peer=peers[j], own_handle=own[j], handles=handles[j],
            signal_read_fd=pipes[j][0], signal_write_fds={t: pipes[t][1] for t in reach[j]},
            all_pipe_fds=self.pipe_fds, config=cfg, topology=self.topology, mix=self.mix,
            counters=self.counters, control=self.control, go=self.go,
            trace_dir=cfg.trace_dir, result_dir=self.result_dir) for j in range(self.n_stable)]
        self.peers = peers
        if cfg.churn:
            from .churn import Churn
            self.churn = Churn(self)

    def signal_pipes(self):
        """One pipe per process for side-channel signals (read end theirs, write ends for the
        processes that reach it)."""
        pipes = [os.pipe() for _ in range(len(self.topology.reach))]
        for r, w in pipes:  # O_NONBLOCK lives on the shared open file: set once, here
            os.set_blocking(r, False)
            os.set_blocking(w, False)
        self.pipe_fds = [fd for pair in pipes for fd in pair]
        self.pipes = pipes
        return pipes

    def setup_transport(self):
        from .transports import make
        cfg, n = self.cfg, self.cfg.processes
        self.transport = make(cfg.transport, n, cfg)
        self.transport.setup()
        pipes = self.signal_pipes()
        reach = self.topology.reach
        self.specs = [SimpleNamespace(
            index=j, transport=self.transport, signal_read_fd=pipes[j][0],
            signal_write_fds={t: pipes[t][1] for t in reach[j]}, all_pipe_fds=self.pipe_fds,
            config=cfg, topology=self.topology, mix=self.mix, counters=self.counters,
            control=self.control, go=self.go, trace_dir=cfg.trace_dir,
            result_dir=self.result_dir) for j in range(n)]

    def quiescent(self) -> bool:
        """Every wire handed out has been received, and was so at the last look too."""
        c, n = self.counters, self.cfg.processes
        out = sum(c[i * STRIDE + WIRES_OUT] for i in range(n))
        got = sum(c[i * STRIDE + WIRES_IN] for i in range(n))
        last, self.quiet_since = self.quiet_since, (out, got)
        return out == got and last == (out, got)

    def start(self):
        if self.cfg.trace_dir:
            # import (never use) pyarrow before forking: each child would otherwise spend
            # ~0.3 s of CPU importing it, which at 256 processes is over a minute of CPU.
            # pandas too: pa.array(list) imports it on first use (another 0.3 s per child).
            import pandas  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        with children_ignore_sigint():
            for spec in self.specs:
                p = self.ctx.Process(target=child_main, args=(spec,), name=f"bus1py-stress-{spec.index}")
                p.start()
                self.procs.append(p)
        keep = {w for _, w in self.pipes} if self.churn else set()  # for mortals to come
        for fd in self.pipe_fds:  # the children hold what they need
            if fd not in keep:
                os.close(fd)
        self.pipe_fds = sorted(keep)

    def states(self):
        c = self.counters
        return [c[i * STRIDE + STATE] for i in range(self.n_stable)]

    def wait_ready(self, timeout):
        """Every child has its peer and planner and waits at the start line."""
        deadline = time.monotonic() + timeout
        from .slots import PID
        while time.monotonic() < deadline:
            if all(self.counters[i * STRIDE + PID] for i in range(self.n_stable)):
                return True
            if any(p.exitcode not in (None, 0) for p in self.procs):
                return False
            time.sleep(0.02)
        return False

    def release(self):
        self.t_go = time.monotonic()
        self.go.set()

    # ---- teardown ----

    def abort(self):
        self.control[CTL_ABORT] = 1
        self.go.set()

    def reap(self, grace=5.0):
        deadline = time.monotonic() + grace
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5)
        if self.churn is not None:
            self.churn.kill_all()

    def close(self):
        for fd in self.pipe_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.pipe_fds = []
        if self.transport is not None:
            self.bus_name = getattr(self.transport, "name", "")
            self.transport.close()
            self.transport = None
        if self.bus is not None:
            name = self.bus.name
            # every process is gone: disconnect what the parent still holds, and the bus
            # must be back to zero use (nothing leaked over the whole run)
            for p in self.peers:
                try:
                    p.disconnect()
                except OSError:
                    pass
            self.bus.gc(sole=True)  # every process of the run is gone
            self.final_use = {k: v for k, v in self.bus.info().items() if k in USE_KEYS}
            # and every invariant of the segment whole (fsck): a broken one counts as use
            self.final_problems = self.bus.check()
            if self.final_problems:
                self.final_use["fsck_problems"] = len(self.final_problems)
            self.bus.close()
            try:
                self.bus.unlink()
            except FileNotFoundError:
                pass
            self.bus_name = name
            self.bus = None

    def results(self):
        out = []
        extra = [i for i in self.churn.indices if i >= self.cfg.processes] if self.churn else []
        for i in [*range(self.cfg.processes), *extra]:
            path = os.path.join(self.result_dir, f"{i}.json")
            try:
                with open(path) as f:
                    out.append(json.load(f))
            except FileNotFoundError:
                out.append({"index": i, "failed": "no result (killed or crashed)"})
        shutil.rmtree(self.result_dir, ignore_errors=True)
        return out


def run_stress(cfg: StressConfig, monitor=None) -> StressResult:
    """Run one stress run to the end.  `monitor(run, phase)` is called about every 0.25 s
    while it runs (the live display); it may be None."""
    run = Run(cfg)
    failures = []
    timeout = cfg.timeout or default_timeout(cfg)
    t0 = time.monotonic()
    wall = 0.0
    interrupted = False
    try:
        run.setup()
        run.start()
        if not run.wait_ready(60 + cfg.processes * 0.5):
            failures.append("processes did not all start")
            run.abort()
        else:
            run.release()
            if run.churn:
                with children_ignore_sigint():
                    run.churn.start()
            if cfg.sample_every or (cfg.churn and cfg.trace_dir):
                from .resources import Sampler
                run.sampler = Sampler(run, cfg.sample_every or 1.0)
            drained = False
            while True:
                states = run.states()
                if monitor:
                    monitor(run, "drain" if drained else "run")
                if run.sampler:
                    run.sampler.tick()
                if run.churn:
                    with children_ignore_sigint():  # it forks the mortals
                        run.churn.tick()
                    if run.churn.failures:
                        failures += run.churn.failures
                        run.abort()
                        break
                dead = [p for p in run.procs if p.exitcode not in (None, 0)]
                if dead or ST_FAILED in states:
                    failures.append(f"process(es) failed: "
                                    f"{sorted(i for i, s in enumerate(states) if s == ST_FAILED) or [p.name for p in dead]}")
                    run.abort()
                    break
                if not drained and run.churn and not run.churn.leaving and all(
                        s >= ST_SENT for s in states):
                    run.churn.leave()  # no new mortals; DRAIN once the last one is gone
                if not drained and all(s >= ST_SENT for s in states) and (
                        cfg.direct_bus or run.quiescent()) and not (
                        run.churn and (run.churn.live or run.churn.dying)):
                    # the bus: every send returned, all is committed; a transport: nothing is
                    # in flight (every wire handed out was received, twice in a row)
                    run.control[CTL_DRAIN] = 1
                    drained = True
                if all(s == ST_DONE for s in states):
                    break
                if time.monotonic() - t0 > timeout:
                    failures.append(f"watchdog: run exceeded {timeout:.0f} s "
                                    f"(states {dict((s, states.count(s)) for s in set(states))})")
                    run.abort()
                    break
                time.sleep(0.1 if monitor is None else 0.25)
            wall = time.monotonic() - run.t_go
            if monitor:
                monitor(run, "done")
    except BaseException:
        run.abort()
        interrupted = True
        raise
    finally:
        run.reap(grace=5.0 if not failures else 3.0)
        run.close()
        if interrupted:   # only now: aborted children still write their results there
            shutil.rmtree(run.result_dir, ignore_errors=True)
    resources = run.sampler.finish(run.final_use) if run.sampler else {}
    results = run.results()
    for r in results:
        if "failed" in r:
            failures.append(f"process {r['index']}: {r['failed']}")
    bad_exit = [p.name for p in run.procs if p.exitcode not in (0,)]
    if bad_exit and not failures:
        failures.append(f"processes exited badly: {bad_exit[:8]}")
    failures += [f"fsck: {p}" for p in run.final_problems]
    return StressResult(config=cfg, ok=not failures, results=results, failures=failures,
                        wall=wall, bus_name=getattr(run, "bus_name", ""),
                        mix=run.mix, samples=getattr(monitor, "peaks", {}) if monitor else {},
                        skipped=run.skipped, final_use=run.final_use,
                        final_problems=run.final_problems, resources=resources,
                        churn=dict(run.churn.stats) if run.churn else {})
