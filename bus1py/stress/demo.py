"""`bus1py demo` (what `make run` runs): a 16-process stress run, then the checker on its trace.

Invariants:
  - The demo uses every action kind the bus supports (kinds it lacks are listed as
    skipped, never silently dropped) and side channels, for about 20 s.
  - It judges what it shows: exit 0 only if the run worked and the checker accepted the
    trace.  The checker runs as its own process through the `bus1py check` command line,
    so the demo depends only on that interface (exit status, --report FILE), not on the
    checker's Python internals.
  - Output goes to a fresh directory (a temporary one unless --out), never into the
    source tree.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from ..cli.options import above, at_least, trace_dir
from ..cli.outcome import CommandError
from ..cli.term import console as make_console, rule

from .runner import StressConfig
from .workload import DEFAULT_MIX, PayloadSizes


def run_checker(trace_dir: str, report: str | None = None, json_out: str | None = None,
                timeout: float | None = None, extra=(),
                stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """`bus1py check TRACE_DIR [--report FILE] [--json FILE]` in a child process; its
    stderr captured, or (stderr=None) shared with this process's."""
    cmd = [sys.executable, "-m", "bus1py.cli", "check", trace_dir]
    if report:
        cmd += ["--report", report]
    if json_out:
        cmd += ["--json", json_out]
    cmd += list(extra)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                          timeout=timeout)


# Paced, so the trace stays a size the checker digests in a few minutes on a small machine
# (16 x 150 actions/s x 20 s is ~50k actions, ~150k trace rows); --rate 0: full speed.
DEMO_RATE = 150.0


def run_demo(processes=16, duration=20.0, seed=None, out=None, console=None, rate=DEMO_RATE) -> int:
    from .cli import run_and_report

    console = console or make_console()
    seed = int(time.time()) % 100_000 if seed is None else seed
    out = out or tempfile.mkdtemp(prefix="bus1py-demo-")
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "trace")
    report = os.path.join(out, "report.html")
    cfg = StressConfig(processes=processes, duration=duration, seed=seed, trace_dir=trace, rate=rate or None,
                       mix=dict(DEFAULT_MIX), sizes=PayloadSizes("lognormal", 64, 4096))
    rule(console, f"bus1py demo: {processes} processes for {duration:g} s, seed {seed}"
                 + (f", {rate:g} actions/s each" if rate else ", full speed"))
    res, summary = run_and_report(cfg, console, progress=True, json_path=os.path.join(out, "stress.json"))
    if not res.ok:
        console.print("[red]the stress run failed; not checking its trace[/red]")
        return 1
    rule(console, "checking the trace")
    t = time.monotonic()
    if console.is_terminal:
        with console.status("bus1py check ..."):
            cp = run_checker(trace, report=report)
    else:   # a log: the checker's own timestamped progress lines go straight to it
        cp = run_checker(trace, report=report, stderr=None)
    console.print(cp.stdout.rstrip())
    if cp.returncode not in (0, 1) and cp.stderr:
        console.print(cp.stderr.rstrip()[-3000:])
    verdict = {0: "[green]no violations[/green]", 1: "[red]violations found[/red]"}.get(
        cp.returncode, f"[red]checker failed (exit {cp.returncode})[/red]")
    console.print(f"checker: {verdict} in {time.monotonic() - t:.1f} s")
    if os.path.exists(report):
        console.print(f"HTML report: {report}")
    console.print(f"trace: {trace}")
    return cp.returncode


def register(sub):
    p = sub.add_parser("demo", help="a 16-process stress run of ~20 s, then the checker on its trace")
    p.add_argument("--processes", "-n", type=at_least(1), default=16)
    p.add_argument("--duration", type=above(0), default=20.0)
    p.add_argument("--seed", type=int, help="default: from the clock (printed)")
    p.add_argument("--rate", type=at_least(0, float), default=DEMO_RATE,
                   help=f"actions per second per process (default {DEMO_RATE:g}; 0: as fast as possible)")
    p.add_argument("--out", metavar="DIR", help="where the trace and report go (default: a new temp dir)")
    p.add_argument("--compare", action="store_true",
                   help="the same short workload over the bus, pipe and mp-queue, all checked: "
                        "one table of messages/s and verdicts (--processes, --messages, --seed)")
    p.add_argument("--messages", type=at_least(1), default=300,
                   help="with --compare: messages per process (default 300)")
    p.set_defaults(func=_main)


def _main(a) -> int:
    if a.compare:
        from .compare import run_compare
        if a.processes < 2 or a.messages < 1:
            raise CommandError("--compare needs --processes >= 2 and --messages >= 1")
        return run_compare(a.processes, a.messages, 1 if a.seed is None else a.seed, a.out)[0]
    problem = a.out and trace_dir("--out", os.path.join(a.out, "trace"))
    if problem:
        raise CommandError(problem)
    return run_demo(a.processes, a.duration, a.seed, a.out, rate=a.rate)
