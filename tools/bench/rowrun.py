"""A few rows of the two-process sections, for a quick A/B.  One-way rows (section 1): the
named rows at the named sizes, each placement, repetitions interleaved as the full run
does, then each row's best placement as a ratio to os.pipe and faster_fifo's rows measured
in the same run.  Multicast rows (section 2, `--mc`): the named variants at 64 B to each k
of --ks, unpinned, interleaved, each as a ratio to pyzmq PUB/SUB measured in the same run.

    python tools/bench/rowrun.py [--rows "bus1py,os.pipe"] [--sizes 64,65536] [--n 100000] [--reps 3]
    python tools/bench/rowrun.py --mc [--rows "bus1py multicast send_many/recv_many,pyzmq PUB/SUB"] [--ks 4]

It writes no report: docs/BENCHMARKS.md comes from `python tools/bench`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# bus1py from PYTHONPATH when it names a tree (the A/B: this bench against that tree's bus1py)
sys.path.append(str(Path(__file__).resolve().parent.parent.parent))

from bench.common import Config, cpus  # noqa: E402
from bench.harness import run_oneway  # noqa: E402
from bench.rows import multicast_variants, unicast_transports  # noqa: E402
from bench.sections import fanout  # noqa: E402

PEERS = ("os.pipe", "faster_fifo get_many", "faster_fifo put_many/get_many")
DEFAULT = ("bus1py", "bus1py send_many/recv_many", "bus1py recv(copy=False)") + PEERS
MC_PEER = "pyzmq PUB/SUB"
MC_DEFAULT = ("bus1py multicast send_many/recv_many", "bus1py multicast", MC_PEER)


def multicast(cfg, names, ks, n, reps):
    """The multicast variants `names` to each k of `ks`: per-receiver rates and ratios."""
    variants = {name: make for name, make in multicast_variants(cfg.batch).items() if name in names}
    missing = set(names) - set(variants)
    if missing:
        raise SystemExit(f"rowrun: no multicast variant {sorted(missing)[0]!r} (see tools/bench/rows.py)")
    res = fanout(cfg, variants, ks, 64, n or cfg.mc_n, reps)
    print(f"-- multicast 64 B, {n or cfg.mc_n} messages per receiver x {reps}; load",
          " ".join(f"{x:.1f}" for x in os.getloadavg()))
    for (name, k), r in res.items():
        peer = res.get((MC_PEER, k))
        vs = f" {r['rate'] / peer['rate']:6.2f}x {MC_PEER}" if peer else ""
        print(f"{name:40s} k={k} {r['rate'] / 1e3:9.1f}k msg/s per receiver  tx {r['tx_cpu_ns']:6.0f} ns/msg"
              f"  rx {r['rx_cpu_ns']:6.0f} ns/msg  reps " + " ".join(f"{x / 1e3:.0f}k" for x in r["rates"]) + vs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=None, help="comma-separated row names of tools/bench")
    ap.add_argument("--sizes", default="64", help="comma-separated payload sizes in bytes")
    ap.add_argument("--n", type=int, default=0, help="messages per repetition (per receiver with --mc; "
                                                     "default: the full run's)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mc", action="store_true", help="multicast rows (section 2) instead of one-way rows")
    ap.add_argument("--ks", default="4", help="with --mc: comma-separated receiver counts")
    ap.add_argument("--batch", type=int, default=0, help="messages per call of the batch rows (default: the full run's)")
    a = ap.parse_args(argv)
    cfg = Config()
    if a.batch:
        cfg.batch = a.batch
    if a.mc:
        print("load", " ".join(f"{x:.1f}" for x in os.getloadavg()))
        names = a.rows.split(",") if a.rows else list(MC_DEFAULT)
        return multicast(cfg, names, [int(k) for k in a.ks.split(",")], a.n, a.reps)
    names = (a.rows or ",".join(DEFAULT)).split(",")
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
