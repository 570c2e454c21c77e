#!/usr/bin/env python3
"""Benchmark `bus1py check` on generated traces: events/s for the whole check.

Invariants: the timed part is exactly what `bus1py check --spark TRACE` does after the JVM
is up (footers, then the path by message -- which reads and validates every row -- and all
five properties; `load_validate_s` is the footer part only, `check_s` the rest, `timings` the
checker's phases); session start-up is reported separately because it
is a fixed ~5-15 s cost, not a per-event one. Traces come from tools/gen_trace.py and are
reused when already present with the same parameters (generation is not timed).

    tools/bench_checker.py --events 1e6 10e6 --procs 64 [--exact | --vclock | --vclock-bin]
    # (--exact: traces without stamps; the check itself never reads stamps)
    tools/bench_checker.py --events 1e7 --floor      # the scan and the shuffles alone
    tools/bench_checker.py --wall TRACE_DIR ... [--repeat 3] [--spark]  # `check` wall time

--wall times the command a user runs, JVM start included: `bus1py check TRACE` as a child
process, with the 1-minute load average before and after each run (the machine may be
shared: a figure taken under load says so).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=float, nargs="+", default=[1e6])
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--exact", action="store_true",
                    help="traces without stamps")
    ap.add_argument("--vclock", action="store_true",
                    help="traces without stamps but with a vclock column (tools/add_vclock.py),"
                         " so the vector-clock witness decides causal")
    ap.add_argument("--vclock-bin", action="store_true",
                    help="the same with the flat vclock_bin column (add_vclock.py --bin)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--dir", default="/tmp/bus1py-bench-traces")
    ap.add_argument("--out", default=None, help="append JSON lines with results here")
    ap.add_argument("--floor", action="store_true",
                    help="instead of checking, time what any check needs at least: a scan, "
                         "a shuffle by message id, a sort by process, and the one-exchange "
                         "alternative to the two")
    ap.add_argument("--wall", nargs="+", metavar="TRACE_DIR",
                    help="time `bus1py check TRACE_DIR` (JVM start included) instead")
    ap.add_argument("--repeat", type=int, default=1, help="runs per trace with --wall")
    ap.add_argument("--spark", action="store_true",
                    help="with --wall: `bus1py check --spark` (Spark even for small traces)")
    a = ap.parse_args(argv)
    if a.wall:
        return wall(a.wall, a.repeat, a.out, ["--spark"] if a.spark else [])

    import gen_trace
    from bus1py.check.load import load_trace
    from bus1py.check.spark.checker import check_trace
    from bus1py.check.load import read_footers
    from bus1py.check.spark.session import plan_for_trace
    from bus1py.spark_session import get_session

    t = time.perf_counter()
    spark = get_session(a.master, driver_memory=a.driver_memory)
    spark.range(1).count()
    startup = time.perf_counter() - t
    print(f"session start-up: {startup:.1f} s", flush=True)
    for ev in a.events:
        n = int(ev)
        stamps = not (a.exact or a.vclock or a.vclock_bin)
        path = os.path.join(a.dir, f"e{n}-p{a.procs}-{'stamps' if stamps else 'nostamps'}")
        _generate(path, lambda: gen_trace.generate(path, n, a.procs, stamps=stamps, quiet=True))
        if a.vclock or a.vclock_bin:
            import add_vclock
            src = path
            path = path.replace("-nostamps", "-vclockbin" if a.vclock_bin else "-vclock")
            _generate(path, lambda: add_vclock.add_vclock(src, path, flat=a.vclock_bin))
        parts = plan_for_trace(spark, read_footers(path), a.partitions)
        if a.floor:
            floor(spark, path)
            continue
        t = time.perf_counter()
        trace = load_trace(spark, path)
        t_load = time.perf_counter() - t
        summary, checker = check_trace(spark, trace)
        total = time.perf_counter() - t
        res = {"events": trace.rows, "procs": a.procs, "exact": a.exact,
               "vclock": "bin" if a.vclock_bin else "list" if a.vclock else None,
               "causal_method": summary["properties"]["causal"].get("method"),
               "master": a.master,
               "partitions": parts,
               "load_validate_s": round(t_load, 2), "check_s": round(total - t_load, 2),
               "total_s": round(total, 2), "events_per_s": round(trace.rows / total),
               "ok": summary["ok"],
               "timings": {k: round(v, 2) for k, v in checker.timings.items()}}
        print(json.dumps(res), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(res) + "\n")


def _generate(path, make):
    """make() the trace at path unless a finished one is there (generation is not timed)."""
    stamp = os.path.join(path, "_GENERATED")
    if not os.path.exists(stamp):
        t = time.perf_counter()
        make()
        open(stamp, "w").write("ok\n")
        print(f"generated {path} in {time.perf_counter() - t:.1f} s", flush=True)


def wall(traces, repeat, out=None, extra=()):
    """Wall time of `bus1py check TRACE` in a child process, with the load around it."""
    import subprocess
    for trace in traces:
        for _ in range(repeat):
            load0 = os.getloadavg()[0]
            t = time.perf_counter()
            cp = subprocess.run([sys.executable, "-m", "bus1py.cli", "check", trace,
                                 "--progress", "never", *extra], capture_output=True,
                                text=True)
            secs = time.perf_counter() - t
            verdict = cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else ""
            res = {"trace": trace, "engine": "spark" if extra else "auto",
                   "wall_s": round(secs, 2), "exit": cp.returncode,
                   "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
                   "verdict": verdict, "stderr": cp.stderr.strip()[-300:]}
            print(json.dumps(res), flush=True)
            if out:
                with open(out, "a") as f:
                    f.write(json.dumps(res) + "\n")


def floor(spark, path):
    """The cost of reading the rows and of the two shuffles that deriving happened-before
    needs (deliveries to their sends; each process in seq order), with nothing else; and of
    the one-exchange alternative: every row keyed by its process plus a copy of each send
    keyed by each destination, so deliveries meet their sends in one sort by process."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    df = spark.read.parquet(path)
    wp = Window.partitionBy("process").orderBy("seq")
    own = df.select(F.col("process").alias("k"), "seq", "msg")
    copies = df.where(F.col("kind") == "send").select(
        F.explode("dests").alias("k"), F.lit(-1).cast("long").alias("seq"), "msg")
    wk = Window.partitionBy("k").orderBy("seq", "msg")
    for name, q in (
            ("scan + global aggregation", df.agg(F.sum("seq"), F.max("stamp_ts"),
                                                 F.sum(F.size("dests")))),
            ("shuffle by message id", df.groupBy("msg").count().agg(F.max("count"))),
            ("sort by process", df.select((F.col("seq") - F.lag("seq").over(wp)).alias("d"))
             .agg(F.max("d"))),
            ("one exchange by process, sends copied to destinations",
             own.unionByName(copies).select((F.col("seq") - F.lag("seq").over(wk)).alias("d"))
             .agg(F.max("d"), F.count(F.lit(1))))):
        t = time.perf_counter()
        q.collect()
        print(json.dumps({"floor": name, "seconds": round(time.perf_counter() - t, 2)}),
              flush=True)


if __name__ == "__main__":
    main()
