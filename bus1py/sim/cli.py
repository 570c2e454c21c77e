"""`bus1py simulate`: the Jang–Park–Cho–Yoon study (seed 001 section 6.2) for every protocol.

Invariants: bad arguments exit 2 with a message naming the argument, before any work starts;
the CSV gains a row as each run finishes; the table goes to stdout, progress to stderr (only
when stderr is a terminal, unless --progress says otherwise); exit 1 when a run lost a message
(a protocol that is not live), else 0.
"""
from __future__ import annotations

import argparse
import os
import time

from .. import causal
from ..cli.outcome import CommandError

DEFAULT_N = (10, 20, 30, 40, 50)


def _list(kind, name, check):
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{name}: empty list")
        out = []
        for x in items:
            try:
                v = kind(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{name}: {x!r} is not a {kind.__name__}")
            msg = check(v)
            if msg:
                raise argparse.ArgumentTypeError(f"{name}: {msg}")
            out.append(v)
        return out
    return parse


def _protocols(text):
    names = [x.strip() for x in text.split(",") if x.strip()]
    if names == ["all"]:
        return list(causal.PROTOCOLS)
    for x in names:
        if x not in causal.PROTOCOLS:
            raise argparse.ArgumentTypeError(
                f"unknown protocol {x!r}; choose from {', '.join(causal.PROTOCOLS)} or 'all'")
    if not names:
        raise argparse.ArgumentTypeError("empty list")
    return names


# Upper bounds: far above any study (the paper's n is 50, its runs 5, its deliveries 60,000
# per process), low enough that a typo is refused at once rather than run for days or
# exhaust memory (RST carries an n x n matrix on every message).
MAX_N, MAX_RUNS, MAX_DELIVERIES, MAX_RATE, MAX_DELAY = 1000, 1000, 10_000_000, 1e6, 3600.0


def _positive(kind, name, most):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a {kind.__name__}")
        if not 0 < v <= most:
            raise argparse.ArgumentTypeError(f"{name} must be positive and at most {most:g}, got {text}")
        return v
    return parse


def _nonneg_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if not 0 <= v <= MAX_DELIVERIES:
        raise argparse.ArgumentTypeError(f"must be >= 0 and at most {MAX_DELIVERIES:g}, got {v}")
    return v


def _vary(text):
    from .engine import CLOCKS
    from .sweep import FACTORS
    name, eq, levels = text.partition("=")
    if not eq or name not in FACTORS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected FACTOR=LEVELS with FACTOR one of {', '.join(FACTORS)}")
    if name == "clock":
        return name, _list(str, "--vary clock", lambda v: None if v in CLOCKS else
                           f"clock must be one of {', '.join(CLOCKS)}, got {v!r}")(levels)
    return name, _list(float, f"--vary {name}", lambda v: None if 0 < v <= MAX_DELAY else
                       f"must be positive and at most {MAX_DELAY:g}, got {v}")(levels)


def register(subparsers):
    p = subparsers.add_parser(
        "simulate", help="run the causal-order protocols in a discrete-event simulator "
                         "(the Jang-Park-Cho-Yoon study) as a Spark job",
        description="Simulate every causal-order protocol over a non-FIFO network with "
                    "Poisson senders and measure its overhead per message (seed 001 "
                    "section 6.2). One Spark task per protocol x n x mode x run.")
    p.add_argument("--protocols", type=_protocols, default=list(causal.PROTOCOLS),
                   help=f"comma list from {','.join(causal.PROTOCOLS)} (default all)")
    p.add_argument("--n", type=_list(int, "--n", lambda v: None if 2 <= v <= MAX_N else
                                     f"n must be at least 2 and at most {MAX_N}, got {v}"),
                   default=list(DEFAULT_N), help="process counts (default 10,20,30,40,50)")
    p.add_argument("--mode", choices=("unicast", "multicast", "both"), default="both")
    p.add_argument("--runs", type=_positive(int, "--runs", MAX_RUNS), default=None,
                   help="runs per cell (default: 5 at paper scale, 1 at quick scale)")
    p.add_argument("--scale", choices=("paper", "quick"), default="quick",
                   help="paper: warm up 10,000 then measure 50,000 deliveries per process; "
                        "quick: 10 then 80 (default)")
    p.add_argument("--warmup", type=_nonneg_int, default=None,
                   help="override the scale's warm-up deliveries per process")
    p.add_argument("--measure", type=_positive(int, "--measure", MAX_DELIVERIES), default=None,
                   help="override the scale's measured deliveries per process")
    p.add_argument("--rate", type=_positive(float, "--rate", MAX_RATE), default=10.0,
                   help="sends per second per process (default 10: mean interval 0.1 s)")
    p.add_argument("--net-delay", type=_list(float, "--net-delay", lambda v: None if 0 < v <= MAX_DELAY
                                             else f"delay must be positive and at most {MAX_DELAY:g}, got {v}"),
                   default=[0.05], metavar="LIST",
                   help="mean network delay in seconds, exponential (default 0.05); several "
                        "values add the net_delay.png figure")
    p.add_argument("--vary", type=_vary, action="append", default=[], metavar="FACTOR=LEVELS",
                   help="a sensitivity study: the same cells again with one factor changed, "
                        "one factor at a time (repeatable): net_delay=0.01,0.2 or clock=system "
                        "(one send clock for the whole system instead of one per process); "
                        "JPCY's sender-indexed encoding and literal S4/S5 order are computed "
                        "from every jpcy run and need no flag")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", metavar="CSV", default=os.path.join("bus1py-sim", "results.csv"),
                   help="CSV of one row per run (default bus1py-sim/results.csv)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in --out and run only the missing ones")
    p.add_argument("--plots", metavar="DIR", default=None,
                   help="PNG figures here (default: beside the CSV)")
    p.add_argument("--trace", metavar="DIR", default=None,
                   help="write each run as a SPEC section-7 trace under DIR (large at "
                        "paper scale)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=run)


def run(a) -> int:
    from rich.console import Console

    from .report import (aggregate, baseline, markdown, markdown_crossovers, markdown_per_copy,
                         print_tables, write_plots)
    from .sensitivity import table
    from .sweep import plan, run_sweep

    err = Console(stderr=True)
    runs = a.runs or (5 if a.scale == "paper" else 1)
    modes = ["unicast", "multicast"] if a.mode == "both" else [a.mode]
    try:
        specs = plan(a.protocols, a.n, modes, runs, a.scale, a.seed, 1.0 / a.rate,
                     a.net_delay, a.warmup, a.measure, a.vary)
    except ValueError as e:
        raise CommandError(str(e)) from None
    show = a.progress == "always" or (a.progress == "auto" and err.is_terminal)
    t0 = time.monotonic()
    err.print(f"{len(specs)} runs: {', '.join(a.protocols)}; n = {a.n}; {', '.join(modes)}; "
              f"{runs} run(s) each; {a.scale} scale")

    from ..spark_session import get_session
    spark = get_session(a.master, app_name="bus1py-simulate")
    with _Progress(err, show, len(specs)) as prog:
        rows = run_sweep(specs, spark, a.out, a.resume, a.trace, on_done=prog.update)
    agg = aggregate(rows)
    out = Console()
    print_tables(baseline(agg), out)
    plots = write_plots(agg, a.plots or os.path.dirname(os.path.abspath(a.out)))
    md = os.path.splitext(a.out)[0] + ".md"
    with open(md, "w") as f:
        f.write(markdown(baseline(agg)) + "\n" + markdown_per_copy(baseline(agg)) + "\n"
                + markdown_crossovers(agg))
        if any(x["protocol"] == "jpcy" for x in agg):
            f.write("\n**Sensitivity**: which of seed 001's conclusions hold at each level\n\n"
                    + table(agg))
    out.print(f"CSV: {a.out}; tables as Markdown: {md}")
    out.print("plots: " + ", ".join(plots))
    lost = [r for r in rows if int(r["undelivered"])]
    out.print(f"{len(rows)} runs in {time.monotonic() - t0:.1f} s")
    for r in lost:
        out.print(f"[red]{r['protocol']} n={r['n']} {r['mode']} run {r['run']}: "
                  f"{r['undelivered']} messages never delivered[/red]")
    return 1 if lost else 0


class _Progress:
    def __init__(self, console, enabled, total):
        self.console, self.enabled, self.total = console, enabled, total
        self.prog = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self.prog = Progress(TextColumn("simulate"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console)
            self.prog.start()
            self.task = self.prog.add_task("", total=self.total)
        return self

    def update(self, row, finished, total):
        if self.prog:
            what = "" if row is None else f"last: {row['protocol']} n={row['n']} {row['mode']}"
            self.prog.update(self.task, completed=finished, description=what)

    def __exit__(self, *exc):
        if self.prog:
            self.prog.stop()

