"""The study as a Spark job: one task per protocol x n x mode x run (x network delay), and
for a sensitivity study the same cells again with one factor changed at a time (`vary`).

Each task is one `engine.run` on an executor; the driver only plans, collects rows and writes
the CSV. Tasks are submitted as one single-task Spark job each, from a pool of as many driver
threads as the cluster has cores, one n at a time from the smallest, and within one n longest
first: a study stopped part-way (the paper scale takes many CPU-hours) leaves every protocol
and mode complete for the smaller n, which is a usable partial figure, and each n's slowest runs
start early instead of ending its wave. Every finished row is appended to the CSV as it
arrives (so a long study survives an interruption and `--resume` skips what is done), and the
progress bar counts real tasks.

Invariants:
  - A task's seed depends on (base seed, n, mode, run, delay) but not on the protocol or the
    send clock, so every protocol, and both readings of the clock, start from the same random
    numbers for the same cell of the study.
  - The CSV holds exactly one row per finished spec; rows already in it for the same spec are
    reused, never recomputed, when resuming.
"""
from __future__ import annotations

import csv
import os
import threading
import zlib
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from .. import causal
from .engine import RunSpec, run

#: (warm-up, measured) deliveries per process
SCALES = {"paper": (10_000, 50_000), "quick": (10, 80)}
#: the spec fields that identify a row in the CSV
KEY = ("protocol", "n", "mode", "run", "seed", "warmup", "measure", "send_mean", "net_delay",
       "clock")
#: a column's value in rows written before the column existed
_KEY_DEFAULT = {"clock": "process"}
#: the factors a sensitivity study varies one at a time, and how their levels parse
FACTORS = {"net_delay": float, "clock": str}


def plan(protocols, ns, modes, runs, scale="quick", seed=1, send_mean=0.1,
         net_delays=(0.05,), warmup=None, measure=None, vary=()) -> list[RunSpec]:
    """Every protocol x n x mode x run x network delay (the baseline, clock "process"); then,
    for each (factor, levels) in `vary`, the baseline cells of the first network delay again
    with that factor at each level that differs from the baseline's (one factor at a time)."""
    w, m = SCALES[scale]
    w = w if warmup is None else warmup
    m = m if measure is None else measure

    def cells(delay, clock):
        out = []
        for n in ns:
            for mode in modes:
                for r in range(runs):
                    cell = f"{seed}/{n}/{mode}/{r}/{delay}".encode()
                    s = zlib.crc32(cell)
                    for proto in protocols:
                        out.append(RunSpec(proto, n, mode, r, s, w, m, send_mean, delay, clock))
        return out

    specs = [s for delay in net_delays for s in cells(delay, "process")]
    base = {"net_delay": net_delays[0], "clock": "process"}
    seen = {(delay, "process") for delay in net_delays}
    for factor, levels in vary:
        if factor not in FACTORS:
            raise ValueError(f"cannot vary {factor!r}; choose from {', '.join(FACTORS)}")
        for level in levels:
            at = dict(base, **{factor: FACTORS[factor](level)})
            if (at["net_delay"], at["clock"]) not in seen:
                seen.add((at["net_delay"], at["clock"]))
                specs += cells(at["net_delay"], at["clock"])
    for s in specs:
        s.check()
    return specs


def _key(row) -> tuple:
    return tuple(str(_value(row, k)) for k in KEY)


def _value(row, k):
    """row[k], or the column's default where the row predates it (absent, or an empty cell
    of a CSV rewritten with the column)."""
    v = row.get(k)
    return _KEY_DEFAULT.get(k) if v is None or v == "" else v


def _order(spec: RunSpec) -> tuple:
    """Submission order: smaller n first, then longest first."""
    return spec.n, -_cost(spec)


def _cost(spec: RunSpec) -> float:
    fan = spec.n / 2 if spec.mode == "multicast" else 1
    return causal.protocol_class(spec.protocol).weight * spec.n * spec.n * (spec.warmup + spec.measure) / fan


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(path) -> list[dict]:
    """Rows of a study CSV, numbers as numbers."""
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


class _CsvSink:
    """Appends rows as they arrive. A row with a column the file lacks (rows kept from an
    older CSV by --resume) rewrites the file once with every column; missing cells are empty."""

    def __init__(self, path, keep):
        self.path = path
        self.lock = threading.Lock()
        self.rows = list(keep)
        self.fields = list(dict.fromkeys(k for r in keep for k in r))
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._rewrite()

    def _rewrite(self):
        with open(self.path, "w", newline="") as f:
            if self.fields:
                w = csv.DictWriter(f, self.fields)
                w.writeheader()
                w.writerows(self.rows)

    def add(self, row):
        if not self.path:
            return
        with self.lock:
            self.rows.append(row)
            if any(k not in self.fields for k in row):
                self.fields += [k for k in row if k not in self.fields]
                self._rewrite()
                return
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.fields).writerow(row)


def _task(spec: RunSpec, trace_dir: str | None):
    from .. import schema
    rows = [] if trace_dir else None
    result = run(spec, trace=rows)
    if trace_dir:
        name = f"{spec.protocol}-n{spec.n}-{spec.mode}-r{spec.run}-d{spec.net_delay:g}"
        if spec.clock != "process":
            name += f"-{spec.clock}"
        path = os.path.join(trace_dir, name)
        schema.write_rows(rows, path, files=max(1, spec.n // 8))
        result["trace"] = path
    return result


def run_sweep(specs, spark=None, out_csv=None, resume=False, trace_dir=None,
              on_done=None) -> list[dict]:
    """Run every spec as a Spark task and return the rows (in `specs` order).

    `on_done(row, finished, total)` is called from driver threads as each row arrives.
    """
    done = {}
    if resume and out_csv and os.path.exists(out_csv):
        for row in read_csv(out_csv):
            done[_key(row)] = row
    todo = [s for s in specs if _key(s.__dict__) not in done]
    sink = _CsvSink(out_csv, list(done.values()))
    results = dict(done)
    total, finished = len(specs), len(specs) - len(todo)
    if on_done:
        on_done(None, finished, total)
    if todo:
        if spark is None:
            from ..spark_session import get_session
            spark = get_session(app_name="bus1py-simulate")
        sc = spark.sparkContext
        todo.sort(key=_order)
        workers = max(1, sc.defaultParallelism)

        def one(spec):
            sc.setLocalProperty("callSite.short", f"{spec.protocol} n={spec.n} {spec.mode}")
            return sc.parallelize([spec], 1).map(lambda s: _task(s, trace_dir)).collect()[0]

        with ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(one, s) for s in todo}
            try:
                while futures:
                    ready, futures = wait(futures, return_when=FIRST_COMPLETED)
                    for fut in ready:
                        row = fut.result()
                        results[_key(row)] = row
                        sink.add(row)
                        finished += 1
                        if on_done:
                            on_done(row, finished, total)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                sc.cancelAllJobs()
                raise
    return [results[_key(s.__dict__)] for s in specs]
