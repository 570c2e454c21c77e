"""How fast the simulator runs each protocol, and what the paper-scale study would cost.

    python tools/bench_sim.py [--n 10,50] [--measure 5000] [--protocols all] [--python]
                              [--compare] [--md]

For each protocol, n and mode it runs one `engine.run` in this process (no Spark): the C loop
and C machines (csrc/sim/) for a protocol that has them, else (or with `--python`) the Python
loop and machines, with `--py-measure` deliveries. It measures receive events per CPU second
(a receive event = one wire handed to a protocol machine, control wires included; CPU time
of this process, so other work on a shared machine moves the figures less than it would move
wall time) and extrapolates the CPU time of the paper-scale cell: (10,000 + 50,000)
deliveries per process, 5 runs, from the measured receive events per delivery. The sum over
n = 10..50 (seconds per delivery interpolated linearly in n between the measured points) and
both modes, divided by the cores, is the wall time the whole study needs here. `--compare`
also runs each cell on the Python loop (`--py-measure` deliveries) and reports the ratio of
the two rates, measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bus1py import causal  # noqa: E402
from bus1py.sim import fast  # noqa: E402
from bus1py.sim.engine import RunSpec, run  # noqa: E402

PAPER_DELIVERIES = 60_000
PAPER_RUNS = 5
PAPER_N = (10, 20, 30, 40, 50)


def measure_cell(proto, n, mode, warmup, measure, use_c):
    t0 = time.process_time()
    r = run(RunSpec(proto, n, mode, seed=7, warmup=warmup, measure=measure), fast=use_c)
    cpu_s = time.process_time() - t0
    per_delivery = r["receive_events"] / (n * (warmup + measure))
    return r["receive_events"] / cpu_s, per_delivery


def paper_cpu(cells, ns, mode) -> float:
    """CPU seconds of one mode's paper-scale cells, n = 10..50, 5 runs."""
    cpu = 0.0
    for n in PAPER_N:
        lo = max([x for x in ns if x <= n], default=min(ns))
        hi = min([x for x in ns if x >= n], default=max(ns))
        s_lo = cells[(mode, lo)][1] / cells[(mode, lo)][0]
        s_hi = cells[(mode, hi)][1] / cells[(mode, hi)][0]
        s = s_lo if hi == lo else s_lo + (s_hi - s_lo) * (n - lo) / (hi - lo)
        cpu += s * n * PAPER_DELIVERIES * PAPER_RUNS
    return cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="10,50")
    ap.add_argument("--measure", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--py-measure", type=int, default=300,
                    help="measured deliveries per process on the Python loop")
    ap.add_argument("--py-warmup", type=int, default=100)
    ap.add_argument("--protocols", default="all")
    ap.add_argument("--python", action="store_true", help="the Python loop for every protocol")
    ap.add_argument("--compare", action="store_true",
                    help="also the Python loop on each cell, and the ratio")
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
        use_c = proto in fast.NAMES and not a.python
        loop = "C" if use_c else "Python"
        w, m = (a.warmup, a.measure) if use_c else (a.py_warmup, a.py_measure)
        cells = {}
        for mode in ("unicast", "multicast"):
            for n in ns:
                cells[(mode, n)] = measure_cell(proto, n, mode, w, m, use_c)
                py = (measure_cell(proto, n, mode, a.py_warmup, a.py_measure, False)[0]
                      if a.compare and use_c else None)
                rows.append((proto, loop, mode, n, *cells[(mode, n)], py))
        cpu = sum(paper_cpu(cells, ns, mode) for mode in ("unicast", "multicast"))
        rows.append((proto, loop, "paper-scale CPU", None, cpu, None, None))
        total += cpu
        print(f"{proto} ({loop} loop): paper-scale CPU {cpu / 3600:.2f} h", file=sys.stderr)
    cmp_head, cmp_rule = (" Python loop | C / Python |", "---:|---:|") if a.compare else ("", "")
    if a.md:
        print("| protocol | loop | mode | n | receive events per CPU s | "
              "receive events per delivery |" + cmp_head)
        print("|---|---|---|---:|---:|---:|" + cmp_rule)
    for proto, loop, mode, n, eps, per, py in rows:
        extra = (f" {py:,.0f} | {eps / py:.0f}x |" if py else " | |") if a.compare else ""
        if n is None:
            line = (f"| {proto} | {loop} | paper scale, both modes | 10..50 | "
                    f"{eps / 60:.1f} CPU-minutes | |" + extra if a.md else
                    f"{proto:7s} {loop:6s} paper-scale study: {eps / 60:8.1f} CPU-minutes")
        else:
            line = (f"| {proto} | {loop} | {mode} | {n} | {eps:,.0f} | {per:.2f} |" + extra
                    if a.md else f"{proto:7s} {loop:6s} {mode:9s} n={n:3d} {eps:12,.0f} receive "
                    f"events per CPU s ({per:.2f} per delivery)" +
                    (f", Python loop {py:,.0f} ({eps / py:.0f}x)" if py else ""))
        print(line)
    print(f"\nwhole paper-scale study: {total / 60:.1f} CPU-minutes, "
          f"{total / 60 / a.cores:.1f} min on {a.cores} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
