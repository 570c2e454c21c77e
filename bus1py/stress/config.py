"""What a stress run is asked to do: its options, checked, and the bus limits they imply.

Invariants: a StressConfig that constructs is one the runner can run; every refusal is a
ValueError naming the option (the CLI turns it into exit status 2, before anything starts).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .workload import DEFAULT_MIX, PayloadSizes


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
    churn: bool = False                # mortal processes come and go (churn.py)
    churn_slots: int | None = None     # how many of the processes are mortal (default a quarter)
    churn_life: int = 2000             # message-sending actions of one mortal (mean)
    churn_kill: float = 0.5            # fraction of mortals SIGKILLed rather than exiting
    sample_every: float | None = None  # seconds between resource samples (resources.py)

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
        if self.churn:
            from .churn import validate
            validate(self)
        if self.sample_every is not None and not (self.sample_every > 0 and self.trace_dir):
            raise ValueError(f"--sample-every must be a positive number of seconds, with --trace DIR "
                             f"(the samples go there), not {self.sample_every}")
        if self.inject and not self.direct_bus:
            raise ValueError("--inject breaks the bus's own ordering: only with --transport bus "
                             "and no --protocol")

    @property
    def direct_bus(self) -> bool:
        """The bus with its whole API (nodes, handles, destroy): worker.BusWorker; everything
        else runs the message workload over a transport: worker.TransportWorker."""
        return self.transport == "bus" and self.protocol is None and not self.chaos_delay


def bus_limits(cfg: StressConfig) -> dict:
    n = cfg.processes
    # churn: killed mortals keep their slots until reaped and unnamed, beside their successors
    peers = cfg.max_peers or n + 8 + (cfg.churn_slots if cfg.churn else 0)
    return dict(
        max_peers=peers,
        # churn: a destroyed node's slot stays taken while queued messages carry its
        # handle, so a receiver's backlog (tens of processes on two cores) pins nodes
        max_nodes=max(1024, n * (cfg.max_extra_nodes + 2)) * (2 if cfg.churn else 1),
        # each live node (a process's primary and extras) has its owner and at most `reach`
        # holders; 8 more processes for churn's killed ones awaiting reaping
        max_handles=max(4096, (n + 8) * (cfg.max_extra_nodes + 1) * (cfg.reach + 1)),
        max_entries=262144,
        max_payload=max(1 << 16, cfg.sizes.b + 64),
        max_dests=max(16, cfg.fanout + 1),
        spin_ns=cfg.spin_ns,
        pool_size=128 << 20,
    )


def default_timeout(cfg: StressConfig) -> float:
    if cfg.duration:
        return cfg.duration * 3 + 60 + cfg.processes * 0.25
    return 60 + (cfg.messages or 0) * cfg.processes * 0.002 + cfg.processes * 0.25
