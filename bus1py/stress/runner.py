"""The parent of a stress run: builds the bus and wiring, forks the processes, watches them.

Invariants:
  - All wiring happens here, before any child exists: every peer, every process's primary
    node, every handle transfer (peer.transfer in the parent, as bus1's bootstrap
    HANDLE_TRANSFER), every side-channel pipe.  Children inherit it by fork and only
    ever touch their own peer.
  - The parent never uses pyarrow before forking (only afterwards, to summarise), so no
    child inherits a half-held lock of pyarrow's thread pools.
  - Children start together: each waits on one Event the parent sets once every child is
    up, so startup of 256 processes does not eat into the measured duration.
  - The run always ends with no child left and the bus unlinked: on success, on a child
    failure (the rest are told to abort, then killed after a grace period), on the
    watchdog, and on KeyboardInterrupt.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from ..bus import Bus
from .workload import (DEFAULT_MIX, PayloadSizes, Topology, capabilities, effective_mix,
                       transport_mix)
from .worker import (CTL_ABORT, CTL_DRAIN, ST_DONE, ST_FAILED, ST_SENT, ST_START, STATE, STRIDE,
                     WIRES_IN, WIRES_OUT, child_main)


@dataclass
class StressConfig:
    processes: int = 16
    duration: float | None = None      # seconds of workload per process ...
    messages: int | None = None        # ... or this many message-sending actions per process
    seed: int = 0
    rate: float | None = None          # actions per second per process (None: as fast as possible)
    trace_dir: str | None = None       # None: no trace (raw speed)
    inject: str | None = None          # a bus1py.INJECT_KINDS key
    inject_pause_ns: int = 200_000     # pause between destinations in injected modes
    fanout: int = 4                    # most destinations of one multicast
    reach: int = 8                     # how many other processes each process can send to
    sizes: PayloadSizes = field(default_factory=PayloadSizes)
    mix: dict = field(default_factory=lambda: dict(DEFAULT_MIX))
    spin_ns: int = 2000                # receivers spin little: spinning starves senders on few cores
    batch_rows: int = 50_000           # trace rows buffered per process before a file is written
    max_extra_nodes: int = 16          # nodes a process may create beyond its primary one
    recv_wait: float = 0.005           # how long recv_signal waits for a message to react to
    max_peers: int | None = None       # default: processes + 8
    timeout: float | None = None       # watchdog for the whole run; default from the workload
    transport: str = "bus"             # a transports.TRANSPORTS kind
    protocol: str | None = None        # a bus1py.causal protocol run in every process
    chaos_delay: float = 0.0           # seconds: most delay of the sending-side delay line

    def __post_init__(self):
        if self.processes < 1:
            raise ValueError("need at least one process")
        if self.duration is None and self.messages is None:
            self.duration = 10.0
        if self.duration is not None and self.messages is not None:
            raise ValueError("give a duration or a message count, not both")
        if self.duration is not None and self.duration <= 0:
            raise ValueError("duration must be positive")
        if self.messages is not None and self.messages < 0:
            raise ValueError("message count must be >= 0")
        if self.max_peers is not None and self.max_peers < self.processes:
            raise ValueError(f"max_peers={self.max_peers} is below processes={self.processes}")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be positive")
        from .transports import TRANSPORTS
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {self.transport!r}; choose from {', '.join(TRANSPORTS)}")
        if self.protocol is not None:
            from ..causal import PROTOCOLS
            if self.protocol not in PROTOCOLS:
                raise ValueError(f"unknown protocol {self.protocol!r}; choose from {', '.join(PROTOCOLS)}")
            if self.processes < 2:
                raise ValueError("a protocol needs at least 2 processes")
        if self.chaos_delay < 0:
            raise ValueError("chaos delay must be >= 0 seconds")
        if self.inject and not self.direct_bus:
            raise ValueError("--inject breaks the bus's own ordering: only with --transport bus "
                             "and no --protocol")

    @property
    def direct_bus(self) -> bool:
        """The bus with its whole API (nodes, handles, destroy): worker.py; everything else
        runs the message workload over a transport: ipc_worker.py."""
        return self.transport == "bus" and self.protocol is None and not self.chaos_delay


@dataclass
class StressResult:
    config: StressConfig
    ok: bool
    results: list           # per-process result dicts (worker.run)
    failures: list          # human-readable reasons the run is not ok
    wall: float             # seconds from go to the last process done
    bus_name: str
    capabilities: dict
    mix: dict
    samples: dict = field(default_factory=dict)  # psutil peaks: cpu/rss
    skipped: dict = field(default_factory=dict)  # action kind left out -> why


def _bus_limits(cfg: StressConfig) -> dict:
    n = cfg.processes
    peers = cfg.max_peers or n + 8
    return dict(
        max_peers=peers,
        max_nodes=max(1024, n * (cfg.max_extra_nodes + 2)),
        max_handles=max(4096, n * (cfg.reach + 2 * cfg.max_extra_nodes + 4)),
        max_entries=262144,
        max_payload=max(1 << 16, cfg.sizes.b + 64),
        max_dests=max(16, cfg.fanout + 1),
        spin_ns=cfg.spin_ns,
        pool_size=128 << 20,
    )


def _default_timeout(cfg: StressConfig) -> float:
    if cfg.duration:
        return cfg.duration * 3 + 60 + cfg.processes * 0.25
    return 60 + (cfg.messages or 0) * cfg.processes * 0.002 + cfg.processes * 0.25


class Run:
    """One stress run's live state, for the monitor."""

    def __init__(self, cfg: StressConfig):
        self.cfg = cfg
        n = cfg.processes
        if cfg.direct_bus:
            self.caps = capabilities()
            self.mix = effective_mix(cfg.mix, self.caps)
            self.skipped = {k: "bus lacks API" for k, w in cfg.mix.items() if w and not self.mix[k]}
        else:
            self.caps = {}
            self.mix, self.skipped = transport_mix(cfg.mix, cfg.protocol)
        self.transport = None
        self.quiet_since = None  # (wires out, wires in) at the last look, for quiescence
        self.topology = Topology.ring(n, cfg.reach)
        ctx = mp.get_context("fork")
        self.ctx = ctx
        self.counters = ctx.RawArray("q", n * STRIDE)
        self.control = ctx.RawArray("q", 2)
        self.go = ctx.Event()
        self.result_dir = tempfile.mkdtemp(prefix="bus1py-stress-")
        self.procs = []
        self.pipe_fds = []
        self.bus = None
        self.bus_name = ""
        self.t_go = None

    # ---- setup ----

    def setup(self):
        cfg, n = self.cfg, self.cfg.processes
        if cfg.trace_dir:
            os.makedirs(cfg.trace_dir, exist_ok=True)
            stale = [f for f in os.listdir(cfg.trace_dir) if f.endswith(".parquet")]
            if stale:
                raise FileExistsError(17, f"trace directory {cfg.trace_dir!r} already holds "
                                          f"{len(stale)} Parquet files; give an empty one")
        if not cfg.direct_bus:
            return self.setup_transport()
        kw = _bus_limits(cfg)
        if cfg.inject:
            kw.update(inject=cfg.inject, inject_pause_ns=cfg.inject_pause_ns)
        self.bus = bus = Bus.create(**kw)
        peers = [bus.peer() for _ in range(n)]
        own = [p.create_node() for p in peers]
        reach = self.topology.reach
        handles = [{i: own[i] if i == j else peers[i].transfer(own[i], peers[j]) for i in reach[j]}
                   for j in range(n)]
        pipes = self.signal_pipes()
        self.specs = [SimpleNamespace(
            index=j, peer=peers[j], own_handle=own[j], handles=handles[j],
            signal_read_fd=pipes[j][0], signal_write_fds={t: pipes[t][1] for t in reach[j]},
            all_pipe_fds=self.pipe_fds, config=cfg, topology=self.topology, mix=self.mix,
            counters=self.counters, control=self.control, go=self.go,
            trace_dir=cfg.trace_dir, result_dir=self.result_dir) for j in range(n)]
        self.peers = peers

    def signal_pipes(self):
        """One pipe per process for side-channel signals (read end theirs, write ends for the
        processes that reach it)."""
        pipes = [os.pipe() for _ in range(self.cfg.processes)]
        for r, w in pipes:  # O_NONBLOCK lives on the shared open file: set once, here
            os.set_blocking(r, False)
            os.set_blocking(w, False)
        self.pipe_fds = [fd for pair in pipes for fd in pair]
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
        target = child_main
        if self.transport is not None:
            from .ipc_worker import child_main as target
        for spec in self.specs:
            p = self.ctx.Process(target=target, args=(spec,), name=f"bus1py-stress-{spec.index}")
            p.start()
            self.procs.append(p)
        for fd in self.pipe_fds:  # the children hold what they need
            os.close(fd)
        self.pipe_fds = []

    def states(self):
        c = self.counters
        return [c[i * STRIDE + STATE] for i in range(self.cfg.processes)]

    def wait_ready(self, timeout):
        """Every child has its peer and planner and waits at the start line."""
        deadline = time.monotonic() + timeout
        from .worker import PID
        while time.monotonic() < deadline:
            if all(self.counters[i * STRIDE + PID] for i in range(self.cfg.processes)):
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
            self.bus.close()
            try:
                self.bus.unlink()
            except FileNotFoundError:
                pass
            self.bus_name = name
            self.bus = None

    def results(self):
        out = []
        for i in range(self.cfg.processes):
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
    timeout = cfg.timeout or _default_timeout(cfg)
    t0 = time.monotonic()
    wall = 0.0
    try:
        run.setup()
        run.start()
        if not run.wait_ready(60 + cfg.processes * 0.5):
            failures.append("processes did not all start")
            run.abort()
        else:
            run.release()
            drained = False
            while True:
                states = run.states()
                if monitor:
                    monitor(run, "drain" if drained else "run")
                dead = [p for p in run.procs if p.exitcode not in (None, 0)]
                if dead or ST_FAILED in states:
                    failures.append(f"process(es) failed: "
                                    f"{sorted(i for i, s in enumerate(states) if s == ST_FAILED) or [p.name for p in dead]}")
                    run.abort()
                    break
                if not drained and all(s >= ST_SENT for s in states) and (
                        cfg.direct_bus or run.quiescent()):
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
        shutil.rmtree(run.result_dir, ignore_errors=True)
        raise
    finally:
        run.reap(grace=5.0 if not failures else 3.0)
        run.close()
    results = run.results()
    for r in results:
        if "failed" in r:
            failures.append(f"process {r['index']}: {r['failed']}")
    bad_exit = [p.name for p in run.procs if p.exitcode not in (0,)]
    if bad_exit and not failures:
        failures.append(f"processes exited badly: {bad_exit[:8]}")
    return StressResult(config=cfg, ok=not failures, results=results, failures=failures,
                        wall=wall, bus_name=getattr(run, "bus_name", ""), capabilities=run.caps,
                        mix=run.mix, samples=getattr(monitor, "peaks", {}) if monitor else {},
                        skipped=run.skipped)
