"""`bus1py demo --compare`: one short seeded workload over the bus and two everyday
transports, every trace judged by the checker, one table.

Invariants:
  - The three runs share everything but the transport: processes, seed, message budget and
    the message mix (unicast, multicast, side-channel signals; no nodes, which only the
    bus has), so their plans are identical (same plan digests) and only how messages
    travel differs.
  - The verdicts are the checker's: all traces are judged in one child process
    (`python -m bus1py.stress.compare TRACE REPORT JSON ...`) that runs the checker's own
    command-line entry point (`bus1py check TRACE --report --json`) once per trace, so
    they share one JVM and each gets exactly what `bus1py check` writes.  The exit status is 0
    when everything ran, was judged, and the bus passed; 1 when the bus did not; 2 when a
    run or the checker failed.
  - Output goes to a fresh directory (a temporary one unless --out): DIR/TRANSPORT/trace,
    report.html, check.json; never into the source tree.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from rich.table import Table

from ..cli.term import console as make_console, rule
from .cli import promised
from .runner import StressConfig, run_stress

COMPARE_TRANSPORTS = ("bus", "pipe", "mp-queue")
COMPARE_MIX = {"unicast": 30, "multicast": 30, "signal": 8, "recv_signal": 12}
PROPERTIES = ("exactly_once", "fifo", "causal", "consistent")


def messages_per_s(results) -> float:
    rs = [r for r in results if "failed" not in r]
    sent = sum(r["sent"] for r in rs)
    active = max(r["sent_at"] for r in rs) - min(r["start"] for r in rs)
    return sent / active if active > 0 else 0.0


def run_compare(processes=16, messages=300, seed=1, out=None, console=None,
                transports=COMPARE_TRANSPORTS, timeout=900, in_process=False) -> tuple[int, list]:
    """Run, check, print the table; returns (exit status, rows).  in_process: check in
    this process (the tests, which already have a Spark session) instead of a child."""
    console = console or make_console()
    out = out or tempfile.mkdtemp(prefix="bus1py-compare-")
    os.makedirs(out, exist_ok=True)
    rule(console, f"bus1py demo --compare: {processes} processes x {messages} messages, seed {seed}, "
                 f"over {', '.join(transports)}")
    rows = []
    for t in transports:
        d = os.path.join(out, t)
        cfg = StressConfig(processes=processes, messages=messages, seed=seed, transport=t,
                           trace_dir=os.path.join(d, "trace"), mix=dict(COMPARE_MIX))
        with console.status(f"running over {t} ..."):
            res = run_stress(cfg)
        if not res.ok:
            console.print(f"[red]the run over {t} failed: {'; '.join(res.failures[:3])}[/red]")
            return 2, rows
        rate = messages_per_s(res.results)
        console.print(f"{t}: {sum(r['sent'] for r in res.results):,} messages, {rate:,.0f} messages/s")
        rows.append({"transport": t, "messages_per_s": rate, "trace": cfg.trace_dir,
                     "report": os.path.join(d, "report.html"), "json": os.path.join(d, "check.json"),
                     "promised": promised(cfg)})
    t0 = time.monotonic()
    if in_process:
        codes = [check_one(r["trace"], r["report"], r["json"]) for r in rows]
        if max(codes) > 1:
            console.print(f"[red]the checker failed (exit {max(codes)})[/red]")
            return 2, rows
    else:
        cmd = [sys.executable, "-m", "bus1py.stress.compare"]
        for r in rows:
            cmd += [r["trace"], r["report"], r["json"]]
        with console.status("checking the three traces (one Spark session) ..."):
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if cp.returncode != 0:
            console.print(f"[red]the checker failed (exit {cp.returncode})[/red]\n"
                          f"{cp.stderr[-3000:]}")
            return 2, rows
    console.print(f"checked in {time.monotonic() - t0:.0f} s")
    for r in rows:
        with open(r["json"]) as f:
            props = json.load(f)["properties"]
        r["violations"] = {k: props[k]["violations"] for k in PROPERTIES}
    console.print(compare_table(rows))
    for r in rows:
        console.print(f"HTML report ({r['transport']}): {r['report']}")
    console.print("each judged on what it promises:")
    for r in rows:
        props = f" --properties {','.join(r['promised'])}" if r["promised"] else ""
        console.print(f"  bus1py check {r['trace']}{props}")
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(rows, f, indent=1)
    # the demo worked if everything ran and was judged; the bus must pass, the others may not
    bus = [r for r in rows if r["transport"] == "bus"]
    return (0 if all(not any(r["violations"].values()) for r in bus) else 1), rows


def verdict(n: int) -> str:
    return "ok" if n == 0 else f"✗ {n:,}"


def compare_table(rows, markdown=False):
    """Verdicts per property: "ok", or "✗ N" (N violations); report paths follow the table."""
    if markdown:
        lines = ["| transport | messages/s | " + " | ".join(PROPERTIES) + " |",
                 "|---|---:|" + "---|" * len(PROPERTIES)]
        for r in rows:
            v = r["violations"]
            lines.append(f"| `{r['transport']}` | {r['messages_per_s']:,.0f} | "
                         + " | ".join(verdict(v[k]) for k in PROPERTIES) + " |")
        return "\n".join(lines)
    t = Table(title="Is my IPC causal?  (the checker's verdict; ✗ N: N violations)")
    t.add_column("transport")
    t.add_column("messages/s", justify="right")
    for k in PROPERTIES:
        t.add_column(k, justify="right")
    for r in rows:
        v = r["violations"]
        t.add_row(r["transport"], f"{r['messages_per_s']:,.0f}",
                  *[("[green]ok[/green]" if not v[k] else f"[red]{verdict(v[k])}[/red]")
                    for k in PROPERTIES])
    return t


def check_one(trace_dir, report, json_out) -> int:
    """`bus1py check TRACE --report REPORT --json JSON --progress never`, run in this
    process through the command line's own entry point (its refusals one line, its exit
    codes); its exit status.  The checker keeps one SparkSession per process, so checks
    after the first reuse its JVM."""
    import contextlib
    import io

    from ..cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):  # the table shows the verdicts
        return main(["check", trace_dir, "--report", report, "--json", json_out,
                     "--progress", "never"])


def _check_all(argv) -> int:
    """Child process: check each (trace, report, json) triple, one JVM for all."""
    worst = 0
    for i in range(0, len(argv), 3):
        worst = max(worst, check_one(*argv[i:i + 3]))
    return 0 if worst <= 1 else worst


if __name__ == "__main__":
    sys.exit(_check_all(sys.argv[1:]))
