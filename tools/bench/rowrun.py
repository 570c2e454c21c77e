"""A few rows of the two-process one-way section, for a quick A/B: the named rows at the
named sizes, each placement, repetitions interleaved as the full run does, then each row's
best placement as a ratio to os.pipe and faster_fifo's rows measured in the same run.

    python tools/bench/rowrun.py [--rows "bus1py,os.pipe"] [--sizes 64,65536] [--n 100000] [--reps 3]

It writes no report: docs/BENCHMARKS.md comes from `python tools/bench`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.common import Config, cpus  # noqa: E402
from bench.harness import run_oneway  # noqa: E402
from bench.rows import unicast_transports  # noqa: E402

PEERS = ("os.pipe", "faster_fifo get_many", "faster_fifo put_many/get_many")
DEFAULT = ("bus1py", "bus1py send_many/recv_many", "bus1py recv(copy=False)") + PEERS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(DEFAULT), help="comma-separated row names of tools/bench")
    ap.add_argument("--sizes", default="64", help="comma-separated payload sizes in bytes")
    ap.add_argument("--n", type=int, default=0, help="messages per repetition (default: the full run's)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    cfg = Config()
    names = a.rows.split(",")
    ts = [t for t in unicast_transports(cfg.batch) if t.name in names]
    print("load", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    for size in (int(s) for s in a.sizes.split(",")):
        n = a.n or cfg.n_for(size)
        res = {}
        for _ in range(a.reps):
            for t in ts:
                for pl in t.placements:
                    c = cpus(cfg, pl, 2)
                    ch = t.make(size)
                    try:
                        r = run_oneway(ch, size, n, max(10, n // 20), c[0], (c[1],), timeout=120 + n * size / 50e6)
                    finally:
                        ch.close()
                    res.setdefault((t.name, pl), []).append(r)
        best = {}
        print(f"-- {size} B, {n} messages x {a.reps}; load", " ".join(f"{x:.1f}" for x in os.getloadavg()))
        for (name, pl), rs in res.items():
            rate = statistics.median(r["rate"] for r in rs)
            best[name] = max(best.get(name, 0), rate)
            print(f"{name:32s} {pl:9s} {rate / 1e3:9.1f}k msg/s  rx {statistics.median(r['rx_cpu_ns'] for r in rs):7.0f}"
                  f" ns/msg  tx {statistics.median(r['tx_cpu_ns'] for r in rs):7.0f} ns/msg")
        for name, rate in best.items():
            print(f"best {name:32s} {rate / 1e3:9.1f}k " + " ".join(
                f"{rate / best[p]:6.2f}x {p}" for p in PEERS if best.get(p)))


if __name__ == "__main__":
    main()
