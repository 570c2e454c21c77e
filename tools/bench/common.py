"""What every part of the benchmark shares: the process context, CPU placement, the run's
configuration, formatting and the machine description."""
from __future__ import annotations

import ctypes
import datetime as _dt
import multiprocessing as mp
import os
import platform
import resource
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(__file__).resolve().parent
# forked, not spawned: channels hold open fds, mappings and cffi objects that a pickling
# start method could not hand to the child
CTX = mp.get_context("fork")
NCPU = os.cpu_count() or 1
SIZES = (64, 4096)  # the sizes with a round trip and every placement at full repetitions
SWEEP_SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20)
PLACEMENTS = ("pinned", "unpinned")


@dataclass
class Config:
    quick: bool = False
    reps: int = 7
    lat_reps: int = 3
    n_small: int = 60_000        # one-way messages per repetition, 64 B
    n_big: int = 20_000          # one-way messages per repetition, 4 KiB
    n_rtt: int = 5_000           # round trips per repetition
    sweep_reps: int = 3
    sweep_bytes: int = 256 << 20  # payload bytes per sweep repetition (fewer messages as they grow)
    sweep_min_n: int = 200
    drain_rounds: int = 15       # batches drained per receive call and size (section 1c)
    batch: int = 64              # messages per call in the batch rows
    mc_ks: tuple = (1, 2, 4, 8)
    mc_n: int = 30_000           # messages per receiver per repetition (multicast)
    mc_reps: int = 5
    qc_ms: tuple = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
    qc_pairs: int = 10_000
    qc_reps: int = 9
    prof_n: int = 50_000
    perf: bool = True
    pin: bool = True
    sweep_sizes: tuple = SWEEP_SIZES

    @classmethod
    def quick_config(cls):
        return cls(quick=True, reps=2, lat_reps=1, n_small=3_000, n_big=1_000, n_rtt=500,
                   sweep_reps=1, sweep_bytes=8 << 20, sweep_min_n=20,
                   mc_ks=(1, 2, 4, 8), mc_n=1_000, mc_reps=1, qc_ms=(10, 100, 1_000, 10_000),
                   qc_pairs=1_000, qc_reps=2, prof_n=5_000, perf=False, drain_rounds=5)

    @classmethod
    def tiny_config(cls):
        """For the smoke test: everything, at toy sizes."""
        return cls(quick=True, reps=1, lat_reps=1, n_small=300, n_big=100, n_rtt=100,
                   sweep_reps=1, sweep_bytes=1 << 20, sweep_min_n=10, batch=16,
                   sweep_sizes=(64, 65536, 1 << 20),
                   mc_ks=(1, 2), mc_n=200, mc_reps=1, qc_ms=(10, 100), qc_pairs=200, qc_reps=1,
                   prof_n=500, perf=False, drain_rounds=2)

    def n_for(self, size):
        """One-way messages per repetition at `size`: the fixed counts at 64 B and 4 KiB, a
        byte budget for the sweep (so a 1 MiB repetition does not take minutes)."""
        if size <= 64:
            return self.n_small
        if size == 4096:
            return self.n_big
        return max(self.sweep_min_n, min(self.n_small, self.sweep_bytes // size))


def cpus(cfg, placement, n):
    """The CPU of each of n processes: pinned round-robin, or None (the scheduler places it)."""
    if placement != "pinned" or not cfg.pin or NCPU < 2:
        return [None] * n
    return [i % NCPU for i in range(n)]


def pin(cpu):
    """Pin this process to one CPU (None: leave it alone)."""
    if cpu is None or NCPU < 2:
        return
    try:
        os.sched_setaffinity(0, {cpu % NCPU})
    except OSError:
        pass


def set_comm(name):
    """Name this process (what perf and top show) so a profile tells sender from receiver."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def payload_of(size):
    return bytes(range(256)) * (size // 256) + bytes(size % 256)


def pct(sorted_vals, q):
    """The q-quantile (0..1) of an already sorted list, nearest rank."""
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def raise_mq_rlimit():
    """posix_ipc queues deeper than 10 need RLIMIT_MSGQUEUE room (root may raise it)."""
    try:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError, AttributeError):
        pass


def fmt_rate(r):
    if r >= 1e6:
        return f"{r / 1e6:.2f} M"
    if r >= 1e3:
        return f"{r / 1e3:.1f} k"
    return f"{r:.0f} "


def fmt_ratio(x):
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def fmt_size(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def cpu_times():
    """(busy, steal, total) jiffies of all CPUs, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    steal = v[7] if len(v) > 7 else 0
    total = sum(v[:8])
    return total - idle - steal, steal, total


def loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def machine_info():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": NCPU, "cpu": model, "cpu_times": cpu_times(), "kernel": platform.release(),
            "python": platform.python_version(), "load": loadavg(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def finish_machine_info(mi):
    """Add the load at the end and how busy the CPUs were during the run."""
    mi["load_end"] = loadavg()
    end, start = cpu_times(), mi.get("cpu_times")
    if end and start and end[2] > start[2]:
        mi["busy"] = (end[0] - start[0]) / (end[2] - start[2])
        mi["steal"] = (end[1] - start[1]) / (end[2] - start[2])
    return mi
