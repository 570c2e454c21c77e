"""Running the sections with rich progress, printing the tables, writing the report."""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from . import inproc, prose
from .common import ROOT, SIZES, Config, finish_machine_info, fmt_rate, fmt_ratio, fmt_size, machine_info, raise_mq_rlimit
from .calls import ROWS as CALL_ROWS, bench_calls
from .drain import bench_drain
from .perfprof import bench_futex, bench_perf
from .plots import make_plots
from .report import MAKE_CMD, write_markdown
from .sections import OBJ_KS, bench_memory, bench_multicast, bench_objects, bench_sweep, bench_unicast, best, unicast_jobs
from .rows import multicast_variants, object_variants
from .peer_targets import peer_targets

ALL = ("unicast", "sweep", "drain", "calls", "multicast", "objects", "queue", "memory", "profile")


def render_tables(console, res):
    from rich.table import Table

    uni = res.get("unicast")
    if uni:
        for size in SIZES:
            b = best(uni["rows"], size, name="bus1py")
            tb = Table(title=f"Two processes, {fmt_size(size)}")
            for col in ("transport", "placement", "one-way msg/s", "bus1py best / it", "RTT median us", "RTT p99 us"):
                tb.add_column(col, justify="left" if col in ("transport", "placement") else "right")
            for (name, pl, s), r in uni["rows"].items():
                if s == size:
                    tb.add_row(name, pl, fmt_rate(r["rate"]), fmt_ratio(b[1]["rate"] / r["rate"]) if b else "-",
                               f"{r['rtt_med']:.1f}" if "rtt_med" in r else "-",
                               f"{r['rtt_p99']:.1f}" if "rtt_p99" in r else "-")
            console.print(tb)
    sweep = res.get("sweep")
    if sweep:
        tb = Table(title="Payload sweep: one-way msg/s, better placement")
        tb.add_column("transport")
        for s in sweep["sizes"]:
            tb.add_column(fmt_size(s), justify="right")
        for name in dict.fromkeys(k[0] for k in sweep["rows"]):
            tb.add_row(name, *[fmt_rate(bk[1]["rate"]) if (bk := best(sweep["rows"], s, name=name)) else "-"
                               for s in sweep["sizes"]])
        console.print(tb)
    for title, key in (("Targets: batches, zero-copy receive, a fair benchmark", "targets_batch"),
                       ("Targets: the standing per-message targets", "targets_message"),
                       ("Targets: against pyzmq and iceoryx2", "targets_peers")):
        if res.get(key):
            tb = Table(title=title)
            for col in ("target", "measured", "status"):
                tb.add_column(col)
            for name, val, ok in res[key]:
                tb.add_row(name, val, "[yellow]n/a[/]" if ok is None else "[green]met[/]" if ok else "[red]not met[/]")
            console.print(tb)


def run_all(cfg, out: Path, cmd: str, console=None, sections=ALL, strict=False):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = console or Console()
    raise_mq_rlimit()
    mi = machine_info()
    t_start = time.monotonic()
    res, errors = {}, []

    def guarded(what, fn, *args):
        """A failing section is reported, not fatal to the others, unless strict (the tests)."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - reported in the output and the markdown
            if strict:
                raise
            errors.append((what, f"{type(e).__name__}: {e}", traceback.format_exc(limit=4)))
            console.print(f"[red]section {what} failed: {type(e).__name__}: {e}[/]")
            return None

    jobs = unicast_jobs(cfg)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        if "unicast" in sections:
            t = progress.add_task("1. two processes, every placement", total=jobs["unicast"])
            res["unicast"] = guarded("1 (two processes)", bench_unicast, cfg, progress, t)
        if "sweep" in sections:
            t = progress.add_task("1b. payload sweep", total=jobs["sweep"] if res.get("unicast") else
                                  jobs["sweep"] + jobs["unicast"])
            res["sweep"] = guarded("1b (payload sweep)", bench_sweep, cfg, res.get("unicast"), progress, t)
        if "drain" in sections:
            t = progress.add_task("1c. receive cost, a ready queue drained", total=1)
            res["drain"] = guarded("1c (receive cost)", bench_drain, cfg, progress, t)
        if "calls" in sections:
            t = progress.add_task("1d. a call's round trip", total=cfg.lat_reps * len(CALL_ROWS))
            res["calls"] = guarded("1d (calls)", bench_calls, cfg, progress, t)
        if "multicast" in sections:
            t = progress.add_task("2. multicast k receivers",
                                  total=len(cfg.mc_ks) * len(multicast_variants()) * cfg.mc_reps)
            res["multicast"] = guarded("2 (multicast)", bench_multicast, cfg, progress, t)
        if "objects" in sections:
            t = progress.add_task("2b. a numpy array to k receivers", total=len(OBJ_KS) * len(object_variants()) * cfg.mc_reps)
            res["objects"] = guarded("2b (objects)", bench_objects, cfg, progress, t)
        if "queue" in sections:
            t = progress.add_task("3. queue op cost vs m", total=cfg.qc_reps)
            res["queue"] = guarded("3 (queue cost)", inproc.bench_queue_cost, cfg, progress, t)
        if "memory" in sections:
            res["memory"] = guarded("4 (memory)", bench_memory)
        if "profile" in sections:
            t = progress.add_task("5. profile", total=2)
            res["profile"] = guarded("5 (profile)", inproc.bench_profile, cfg)
            progress.advance(t)
            if cfg.perf:
                res["perf"] = []
                for kind, secs in (("loop", 4.0), ("raw", 4.0), ("oneway", 3.0)):
                    pr = guarded(f"5 (perf {kind})", bench_perf, kind, secs)
                    if pr:
                        res["perf"].append({**pr, "seconds": int(secs)})
                res["futex"] = guarded("5 (futex trace)", bench_futex, 1.0)
            progress.advance(t)
    finish_machine_info(mi)
    res["targets_batch"] = prose.batch_targets(res.get("unicast"), res.get("sweep"), res.get("multicast"),
                                             res.get("profile"), res.get("drain"))
    res["targets_peers"] = peer_targets(res.get("unicast"), res.get("sweep"), res.get("multicast"), res.get("objects"))
    res["targets_message"] = prose.message_targets(res.get("unicast"), res.get("multicast"), res.get("queue"),
                                           res.get("memory"))
    render_tables(console, res)
    out.mkdir(parents=True, exist_ok=True)
    res["plots"] = make_plots(out, res)
    elapsed = time.monotonic() - t_start
    md = out / "BENCHMARKS.md"
    write_markdown(md, cmd, mi, cfg, res, elapsed, errors)
    console.print(f"wrote {md} and {', '.join(p.name for p in res['plots'])} in {elapsed:.0f} s")
    return {**res, "markdown": md, "errors": errors}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tools/bench", description="bus1py against the usual local IPC, in one run")
    ap.add_argument("--quick", action="store_true", help="smoke mode: toy sizes, a minute or so")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where BENCHMARKS.md and the plots go")
    ap.add_argument("--no-pin", action="store_true", help="run every row unpinned only")
    ap.add_argument("--no-perf", action="store_true", help="skip the perf profiles")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated sections of: {','.join(ALL)}")
    for flag in ("--profile-loop", "--profile-oneway", "--profile-raw"):
        ap.add_argument(flag, type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for flag, fn in ((args.profile_loop, inproc._profile_loop), (args.profile_raw, inproc._profile_raw),
                     (args.profile_oneway, inproc._profile_oneway)):
        if flag:
            fn(flag)
            return 0
    cfg = Config.quick_config() if args.quick else Config()
    cfg.pin = not args.no_pin
    cfg.perf = cfg.perf and not args.no_perf
    cmd = MAKE_CMD + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    res = run_all(cfg, args.out, cmd, sections=tuple(args.only.split(",")))
    return 1 if res["errors"] else 0
