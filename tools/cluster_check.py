"""Check a trace on a standalone Spark cluster started here, and report every process's
peak resident memory: the command docs/BENCHMARKS.md's cluster figures come from.

    python tools/cluster_check.py TRACE WORKERS OUT.json [--cores 1] [--memory 6g]
                                  [--event-log DIR]

Starts a master and WORKERS workers of --cores cores and --memory each
(tests/spark_cluster.py, as the tests start theirs), runs `bus1py check TRACE --master URL
--json OUT.json`, samples the resident memory of the check, its JVM, the cluster's JVMs
and their Python workers every 0.5 s, stops the cluster and prints: the exit code, the wall
time, the load before and after, the peak of the largest process of each kind, the CPU
seconds each kind used and the machine's idle share (where a check's time goes when it
does not scale), and the check's seconds and timings. --event-log DIR keeps Spark's event
log there (each task's executor, run, deserialization and GC times). Run it under
`flock /tmp/bus1py-bench.lock`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def kind_of(cmd):
    """The kind of a process of the check or the cluster, from its command line."""
    for word, kind in (("deploy.master", "master JVM"), ("deploy.worker.Worker", "worker JVM"),
                       ("CoarseGrainedExecutorBackend", "executor JVM"),
                       ("org.apache.spark", "driver JVM"), ("pyspark", "executor Python"),
                       ("bus1py", "check (driver Python)")):
        if word in cmd:
            return kind
    return cmd[:40]


def main():
    from spark_cluster import start_cluster
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("workers", type=int)
    ap.add_argument("out")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="6g")
    ap.add_argument("--event-log")
    a = ap.parse_args()
    t0 = time.time()
    url, stop = start_cluster(tempfile.mkdtemp(prefix="cluster-check-"), cores=a.cores,
                              memory=a.memory, workers=a.workers)
    print(f"cluster up in {time.time() - t0:.1f} s", flush=True)
    roots = [p for p in psutil.process_iter(["cmdline", "create_time"])
             if "org.apache.spark.deploy" in " ".join(p.info["cmdline"] or [])
             and p.info["create_time"] >= t0 - 1]
    peaks, cpu, done = {}, {}, threading.Event()

    def sample(check):
        while not done.is_set():
            for r in roots + [check]:
                try:
                    procs = [r] + r.children(recursive=True)
                except psutil.Error:
                    continue
                for p in procs:
                    try:
                        key = (kind_of(" ".join(p.cmdline())), p.pid)
                        peaks[key] = max(peaks.get(key, 0), p.memory_info().rss)
                        t = p.cpu_times()
                        cpu[key] = t.user + t.system
                    except psutil.Error:
                        pass
            time.sleep(0.5)
    env = dict(os.environ)
    if a.event_log:
        os.makedirs(a.event_log, exist_ok=True)
        where = os.path.abspath(a.event_log)
        env["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.eventLog.enabled=true --conf "
                                      f"spark.eventLog.dir=file:{where} pyspark-shell")
    load = os.getloadavg()[0]
    idle0 = psutil.cpu_times()
    t = time.time()
    try:
        check = subprocess.Popen([sys.executable, "-m", "bus1py", "check", a.trace, "--master",
                                  url, "--json", a.out, "--progress", "never"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env)
        th = threading.Thread(target=sample, args=(psutil.Process(check.pid),), daemon=True)
        th.start()
        _, err = check.communicate()
        wall = time.time() - t
        idle1 = psutil.cpu_times()
        done.set()
        th.join()
    finally:
        stop()
    print(f"exit {check.returncode}, wall {wall:.1f} s, load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    if err.strip():
        print(err[-3000:])
    by = {}
    for (kind, _), rss in peaks.items():
        by.setdefault(kind, []).append(rss)
    used = {}
    for (kind, _), secs in cpu.items():
        used[kind] = used.get(kind, 0) + secs
    for kind, v in sorted(by.items()):
        print(f"{kind}: {len(v)} process(es), largest peak {max(v) / 2**30:.2f} GiB, "
              f"{used.get(kind, 0):.1f} CPU s")
    idle = (idle1.idle - idle0.idle) / (psutil.cpu_count() * wall)
    print(f"machine idle {100 * idle:.0f}% of {psutil.cpu_count()} cores over the check")
    s = json.loads(Path(a.out).read_text())
    print("seconds", s.get("seconds"), "ok", s.get("ok"))
    print("timings", json.dumps(s.get("timings")))


if __name__ == "__main__":
    main()
