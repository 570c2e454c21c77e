"""`bus1py stress`: many OS processes, one bus, a seeded random workload, a Parquet trace.

Invariants:
  - The exit status says whether the run itself worked (every process started, ran its
    plan and drained, nothing left behind): 0 yes, 1 no.  It does not judge the ordering;
    that is the checker's job (`bus1py check TRACE_DIR`), except with --verify, where the
    producer-side self-check of the trace also counts.
  - Everything the run does is fixed by its options and --seed, except timing.
"""
from __future__ import annotations

from .. import INJECT_KINDS
from ..causal import PROTOCOLS
from ..cli.options import above, at_least, output_file, trace_dir
from ..cli.outcome import CommandError, add_json_option, write_json
from .transports import TRANSPORTS
from .runner import StressConfig, run_stress
from .workload import ACTION_KINDS, PayloadSizes, parse_mix


def add_workload_options(p):
    p.add_argument("--processes", "-n", type=at_least(1), default=16, help="OS processes, one peer each (default 16)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--duration", type=above(0), help="seconds of workload (default 10 unless --messages)")
    g.add_argument("--messages", type=at_least(0), help="message-sending actions per process")
    p.add_argument("--seed", type=int, default=0, help="fixes every process's action sequence")
    p.add_argument("--rate", type=above(0),
                   help="actions per second per process (default: as fast as possible; pacing "
                        "measures latency without saturating the CPUs)")
    p.add_argument("--fanout", type=at_least(1), default=4, help="most destinations of a multicast (default 4)")
    p.add_argument("--reach", type=at_least(1), default=8,
                   help="how many other processes each can send and signal to (a ring window; default 8)")
    p.add_argument("--payload", default="lognormal:64:4096", metavar="DIST",
                   help="payload sizes: fixed:N, uniform:LO:HI or lognormal:MEDIAN:MAX (default lognormal:64:4096)")
    p.add_argument("--mix", metavar="KIND=W,...",
                   help=f"action weights, kinds: {', '.join(ACTION_KINDS)} (unnamed kinds get 0)")
    p.add_argument("--inject", choices=sorted(INJECT_KINDS),
                   help="run on a deliberately broken ordering path (to prove the checker)")
    p.add_argument("--inject-pause-ns", type=at_least(0), default=200_000,
                   help="pause between destinations in injected modes (widens the race window)")
    p.add_argument("--spin-ns", type=at_least(0), default=2000, help="receiver spin before sleeping (default 2000)")
    p.add_argument("--max-peers", type=at_least(1), help="bus peer slots (default processes + 8)")
    p.add_argument("--transport", choices=TRANSPORTS, default="bus",
                   help="what carries the messages (default bus); other than the bus, the "
                        "workload is unicast, multicast (repeated sends) and signals")
    p.add_argument("--protocol", choices=PROTOCOLS,
                   help="run this causal-order protocol (bus1py.causal) in every process")
    p.add_argument("--chaos-delay", type=float, default=0.0, metavar="D",
                   help="delay each wire by a seeded random 0..D seconds on the sending side")
    p.add_argument("--churn", action="store_true",
                   help="mortal processes come and go: each leaves after its life, half of them "
                        "by SIGKILL (reaped through the bus), and a fresh process with a fresh peer "
                        "takes its place (docs/STRESS.md, Churn)")
    p.add_argument("--churn-slots", type=int, metavar="K",
                   help="with --churn: how many of the processes are mortal (default a quarter)")
    p.add_argument("--churn-life", type=int, metavar="N",
                   help="with --churn: mean message-sending actions of one mortal process (default 2000)")
    p.add_argument("--churn-kill", type=float, metavar="F",
                   help="with --churn: fraction of mortal processes SIGKILLed rather than exiting (default 0.5)")
    p.add_argument("--sample-every", type=float, metavar="S",
                   help="sample RSS and segment use every S seconds into the trace directory "
                        "(default 1 with --churn and --trace, else off)")


def config_from_args(a) -> StressConfig:
    given = [o for o, v in (("--churn-slots", a.churn_slots), ("--churn-life", a.churn_life),
                            ("--churn-kill", a.churn_kill)) if v is not None]
    if given and not a.churn:
        raise ValueError(f"{', '.join(given)} only with --churn")
    sizes = PayloadSizes.parse(a.payload)
    if min(sizes.a, sizes.b) < 0:
        raise ValueError(f"--payload {a.payload}: sizes must be >= 0")
    return StressConfig(
        processes=a.processes, duration=a.duration, messages=a.messages, seed=a.seed, rate=a.rate,
        trace_dir=None if getattr(a, "no_trace", False) else a.trace, inject=a.inject,
        inject_pause_ns=a.inject_pause_ns, fanout=a.fanout, reach=a.reach,
        sizes=sizes, mix=parse_mix(a.mix), spin_ns=a.spin_ns,
        max_peers=a.max_peers, transport=a.transport, protocol=a.protocol,
        chaos_delay=a.chaos_delay, churn=a.churn, churn_slots=a.churn_slots,
        churn_life=2000 if a.churn_life is None else a.churn_life,
        churn_kill=0.5 if a.churn_kill is None else a.churn_kill, sample_every=a.sample_every)


def run_and_report(cfg: StressConfig, console, progress: bool = True, verify: bool = False,
                   json_path: str | None = None):
    """Run, print the summary (to `console`, a rich Console); returns (StressResult, summary
    dict). With progress, a live view on a terminal, else timestamped lines on stderr."""
    from .display import LiveMonitor, errors_by_errno, summary_table

    monitor = LiveMonitor(console, enabled=progress)
    res = run_stress(cfg, monitor=monitor)
    lat = None
    problems = []
    if cfg.trace_dir and res.results and all("failed" not in r for r in res.results):
        from .analyze import latency_stats, wellformed

        lat = latency_stats(cfg.trace_dir)
        if verify:
            problems = wellformed(cfg.trace_dir)
    console.print(summary_table(res, lat))
    proto = {}
    if cfg.protocol and res.results:
        from .protocol_stats import live_figures, prediction, protocol_table
        live = live_figures(res.results)
        try:
            pred = prediction(cfg.protocol, cfg.processes, res.mix)
        except Exception as e:  # the summary must not fail for want of a prediction
            console.print(f"[yellow]no simulator prediction: {type(e).__name__}: {e}[/yellow]")
            pred = None
        console.print(protocol_table(cfg, live, pred))
        proto = {"live": live, "simulator": pred}
    if res.churn:
        c = res.churn
        console.print(f"churn: {c['spawned']:,} mortal processes, {c['exited']:,} exited, "
                      f"{c['killed']:,} SIGKILLed, {c['reaped']:,} of their peers reaped "
                      f"({c['reap_retries']:,} second tries)")
    if res.resources:
        from .display import resources_lines
        for line in resources_lines(res.resources):
            console.print(line)
    if verify and cfg.trace_dir:
        if problems:
            console.print(f"[red]trace self-check: {len(problems)} problem(s)[/red]")
            for line in problems[:20]:
                console.print("  " + line)
        else:
            console.print("trace self-check: well-formed (seq, ids, exactly-once delivery, signals)")
    for f in res.failures:
        console.print(f"[red]{f}[/red]")
        for r in res.results:
            if r.get("traceback"):
                console.print(r["traceback"])
                break
    rs = [r for r in res.results if "failed" not in r]
    summary = {
        "ok": res.ok and not problems and res.resources.get("back_to_zero", True), "failures": res.failures, "trace_problems": problems[:50],
        "processes": cfg.processes, "seed": cfg.seed, "inject": cfg.inject,
        "transport": cfg.transport, "protocol": cfg.protocol, "chaos_delay": cfg.chaos_delay,
        "protocol_figures": proto, "skipped": res.skipped,
        "sent": sum(r["sent"] for r in rs), "delivered": sum(r["delivered"] for r in rs),
        "signals": sum(r["signals_sent"] for r in rs), "wall": res.wall,
        "latency_us": lat, "errors": errors_by_errno(res.results),
        "max_depth": max((r["max_depth"] for r in rs), default=0),
        "plans": {r["index"]: r["plan_sha256"] for r in rs},
        "peaks": res.samples, "churn": res.churn, "resources": res.resources,
        "final_use": res.final_use,
        "final_problems": list(res.final_problems),
        "per_process": [{k: v for k, v in r.items() if k != "hold_ns"} for r in res.results],
    }
    if json_path:
        write_json(json_path, summary)
    return res, summary


def main(a) -> int:
    from ..cli.term import console as make_console
    # with --json -, stdout carries the JSON alone
    console = make_console(stderr=a.json == "-")
    if not a.no_trace and not a.trace:
        raise CommandError("give --trace DIR, or --no-trace to measure raw speed")
    try:
        cfg = config_from_args(a)
    except ValueError as e:
        raise CommandError(str(e))
    problem = output_file("--json", a.json) or (
        cfg.trace_dir and trace_dir("--trace", cfg.trace_dir, a.force))
    if problem:
        raise CommandError(problem)
    try:
        res, summary = run_and_report(cfg, console, progress=not a.quiet, verify=a.verify,
                                      json_path=a.json)
    except ValueError as e:  # what the transport cannot do with these options
        raise CommandError(str(e))
    if res.ok and cfg.trace_dir:
        judge = promised(cfg)
        props = "" if judge is None else f" --properties {','.join(judge)}"
        console.print(f"check what this run promises: bus1py check {cfg.trace_dir}{props} "
                      f"--report report.html")
    return 0 if summary["ok"] else 1


def promised(cfg: StressConfig):
    """The properties (bus1py check --properties) a run's transport and protocol promise;
    None for all of them (the bus)."""
    if cfg.transport == "bus" and not cfg.protocol:
        return None
    if cfg.protocol is None:   # a channel per pair: FIFO, unless delayed at random
        return ("exactly_once",) if cfg.chaos_delay else ("exactly_once", "fifo")
    from ..causal import protocol_class
    if cfg.protocol == "bus1":      # one order of every multicast at every receiver
        return ("exactly_once", "fifo", "causal", "consistent")
    if protocol_class(cfg.protocol).causal:
        return ("exactly_once", "fifo", "causal")
    return ("exactly_once", "fifo")


def register(sub):
    p = sub.add_parser("stress", help="many processes, random workload, Parquet trace for the checker",
                       description="Spawn N OS processes, each with its own peer, running a seeded random "
                                   "workload (unicast, multicast, side-channel signals, nodes); write a "
                                   "SPEC section 7 trace for `bus1py check`.")
    add_workload_options(p)
    t = p.add_mutually_exclusive_group()
    t.add_argument("--trace", metavar="DIR",
                   help="write the Parquet trace here (an empty or new directory; needs the "
                        "[check] extra)")
    p.add_argument("--force", action="store_true",
                   help="write the trace into a non-empty directory (its *.parquet files are removed)")
    t.add_argument("--no-trace", action="store_true", help="no trace: measure raw speed")
    p.add_argument("--verify", action="store_true",
                   help="after the run, self-check the trace is well-formed (seq, ids, exactly-once)")
    add_json_option(p, "the summary")
    p.add_argument("--quiet", "-q", action="store_true", help="no live progress")
    p.set_defaults(func=main)

