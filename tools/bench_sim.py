"""How fast the simulator runs each protocol, and what the paper-scale study would cost.

    python tools/bench_sim.py [--n 10,50] [--measure 400] [--protocols all] [--md]

For each protocol, n and mode it runs one `engine.run` in this process (no Spark), measures
receive events per CPU second (a receive event = one wire handed to a protocol machine,
control wires included; CPU time of this process, so other work on a shared machine moves the
figures less than it would move wall time) and extrapolates the CPU time of the paper-scale
cell: (10,000 + 50,000) deliveries per process, 5 runs, from the measured receive events per
delivery. The sum over n = 10..50 (interpolated linearly in n between the measured points) and
both modes, divided by the cores, is the wall time the whole study needs here.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bus1py import causal  # noqa: E402
from bus1py.sim.engine import RunSpec, run  # noqa: E402

PAPER_DELIVERIES = 60_000
PAPER_RUNS = 5
PAPER_N = (10, 20, 30, 40, 50)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="10,50")
    ap.add_argument("--measure", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--protocols", default="all")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--md", action="store_true", help="print a Markdown table")
    a = ap.parse_args(argv)
    ns = [int(x) for x in a.n.split(",")]
    protos = causal.PROTOCOLS if a.protocols == "all" else a.protocols.split(",")
    # one untimed run first: the first timed run would otherwise pay the one-time imports
    run(RunSpec("fifo", 2, "unicast", warmup=0, measure=1))
    rows = []
    total = 0.0
    for proto in protos:
        cpu = 0.0
        cells = {}
        for mode in ("unicast", "multicast"):
            for n in ns:
                t0 = time.process_time()
                r = run(RunSpec(proto, n, mode, seed=7, warmup=a.warmup, measure=a.measure))
                cpu_s = time.process_time() - t0
                deliveries = n * (a.warmup + a.measure)
                per_delivery = r["receive_events"] / deliveries
                eps = r["receive_events"] / cpu_s
                cells[(mode, n)] = (eps, per_delivery)
                rows.append((proto, mode, n, eps, per_delivery))
            for n in PAPER_N:         # interpolate seconds per delivery linearly in n
                lo = max([x for x in ns if x <= n], default=min(ns))
                hi = min([x for x in ns if x >= n], default=max(ns))
                s_lo = cells[(mode, lo)][1] / cells[(mode, lo)][0]
                s_hi = cells[(mode, hi)][1] / cells[(mode, hi)][0]
                s = s_lo if hi == lo else s_lo + (s_hi - s_lo) * (n - lo) / (hi - lo)
                cpu += s * n * PAPER_DELIVERIES * PAPER_RUNS
        rows.append((proto, "paper-scale CPU", None, cpu, None))
        total += cpu
        print(f"{proto}: paper-scale CPU {cpu / 3600:.1f} h", file=sys.stderr)
    if a.md:
        print("| protocol | mode | n | receive events per CPU s | receive events per delivery |")
        print("|---|---|---:|---:|---:|")
    for proto, mode, n, eps, per in rows:
        if n is None:
            line = (f"| {proto} | paper scale, both modes | 10..50 | "
                    f"{eps / 3600:.1f} CPU-hours | |" if a.md else
                    f"{proto:7s} paper-scale study: {eps / 3600:7.2f} CPU-hours")
        else:
            line = (f"| {proto} | {mode} | {n} | {eps:,.0f} | {per:.2f} |" if a.md else
                    f"{proto:7s} {mode:9s} n={n:3d} {eps:10,.0f} receive events per CPU s "
                    f"({per:.2f} per delivery)")
        print(line)
    print(f"\nwhole paper-scale study: {total / 3600:.1f} CPU-hours, "
          f"{total / 3600 / a.cores:.1f} h on {a.cores} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
