"""Resource use over a stress run: RSS of every process and the segment's use, sampled.

Invariants:
  - The coordinator samples every `every` seconds (between its other duties, so the period
    is a floor): psutil RSS of every live stress process and of itself, and `bus.info()`
    (peers, nodes, handles, queue entries, pool bytes in use).  Rows go straight to two
    CSV files in the trace directory (`resources-rss.csv`, `resources-bus.csv`; CSV, so the
    checker, which reads every `*.parquet` there, never mistakes them for trace), so a long
    run's samples do not pile up in memory beyond a few numbers per sample.
  - **Flat**, precisely: over the last 80% of the workload (the first 20% is warm-up:
    imports, the first trace batches filling; the workload ends when the first stable
    process is done with its plan, before the drain and the exits), the least-squares line through a series' samples
    rises by at most 10% of the series' median there plus a floor (RSS: 4 MiB; a segment
    table: 1% of its size).  Every stable process's RSS is one series; a mortal lives too
    briefly for a slope, so the series of its generations' peak RSS, in spawn order, is
    judged instead.  A series with fewer than 3 samples in the window is not judged.
  - `final_use` is `bus.info()` once every process is gone and the parent disconnected
    what it held: all five use counts must be zero (nothing leaked over the whole run).
"""
from __future__ import annotations

import os
import time

from .slots import PID, ST_SENT, STRIDE

SEGMENT = ("peers", "nodes", "handles", "entries_in_use", "pool_used")
WARMUP = 0.2       # fraction of the run left out of the flatness window
REL = 0.10         # growth allowed, as a fraction of the series' median
RSS_FLOOR = 4 << 20
TABLE_FLOOR = 0.01  # growth allowed for a segment series, as a fraction of its table


def growth(ts, ys, t_end=None):
    """(rise of the least-squares line over the last 80% of the workload, median there), or
    None.  The workload ends at t_end (the first stable process done with its plan)."""
    import numpy as np
    if t_end is not None:
        ts, ys = zip(*[(t, y) for t, y in zip(ts, ys) if t <= t_end]) if ts and ts[0] <= t_end else ((), ())
    if len(ts) < 3:
        return None
    t0, t1 = ts[0], ts[-1]
    w = [(t, y) for t, y in zip(ts, ys) if t >= t0 + WARMUP * (t1 - t0)]
    if len(w) < 3:
        return None
    t, y = np.array(w, dtype=float).T
    if t[-1] == t[0]:
        return None
    slope = np.polyfit(t, y, 1)[0]
    return float(slope * (t[-1] - t[0])), float(np.median(y))


def verdict(ts, ys, floor, t_end=None):
    g = growth(ts, ys, t_end)
    if g is None:
        return None
    rise, median = g
    return {"growth": rise, "median": median, "flat": rise <= REL * median + floor}


class Sampler:
    def __init__(self, run, every: float):
        import psutil
        self.psutil = psutil
        self.run, self.every = run, every
        d = run.cfg.trace_dir
        self.paths = (os.path.join(d, "resources-rss.csv"), os.path.join(d, "resources-bus.csv"))
        self.rss_f = open(self.paths[0], "w", buffering=1)  # lines on disk as they come
        self.bus_f = open(self.paths[1], "w", buffering=1)
        self.rss_f.write("t_s,process,pid,rss_bytes\n")
        self.bus_f.write("t_s," + ",".join(SEGMENT) + "\n")
        lim, info = run.bus.limits, run.bus.info()
        self.capacity = {"peers": lim.max_peers, "nodes": lim.max_nodes, "handles": lim.max_handles,
                         "entries_in_use": lim.max_entries, "pool_used": info["pool_size"]}
        self.procs = {}       # pid -> psutil.Process
        self.series = {}      # stable process -> ([t], [rss])
        self.mortal_peak = {}  # mortal process -> [first t, peak rss]
        self.seg = ([], {k: [] for k in SEGMENT})
        self.last = 0.0
        self.t_end = None     # end of the workload: the first sample with a stable process done

    def tick(self):
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.sample(now - self.run.t_go)

    def rss(self, pid):
        p = self.procs.get(pid)
        try:
            if p is None:
                p = self.procs[pid] = self.psutil.Process(pid)
            return p.memory_info().rss
        except self.psutil.Error:
            self.procs.pop(pid, None)
            return None

    def sample(self, t):
        run = self.run
        c = run.counters
        stable = [(i, c[i * STRIDE + PID]) for i in range(run.n_stable)]
        mortal = run.churn.pids() if run.churn else []
        for i, pid in [(-1, os.getpid()), *stable, *mortal]:
            if not pid:
                continue
            r = self.rss(pid)
            if not r:  # gone, or a zombie (RSS 0) not yet joined
                continue
            self.rss_f.write(f"{t:.3f},{i},{pid},{r}\n")
            if i >= run.n_stable:
                peak = self.mortal_peak.setdefault(i, [t, 0])
                peak[1] = max(peak[1], r)
            else:
                ts, ys = self.series.setdefault(i, ([], []))
                ts.append(t)
                ys.append(r)
        live = {pid for _, pid in stable + mortal}
        for pid in [p for p in self.procs if p not in live and p != os.getpid()]:
            del self.procs[pid]
        if self.t_end is None and any(s >= ST_SENT for s in run.states()):
            self.t_end = t
        info = run.bus.info()
        self.bus_f.write(f"{t:.3f}," + ",".join(str(info[k]) for k in SEGMENT) + "\n")
        self.seg[0].append(t)
        for k in SEGMENT:
            self.seg[1][k].append(info[k])

    def finish(self, final_use) -> dict:
        """Close the files, judge flatness, draw the plot; the summary's `resources`."""
        self.rss_f.close()
        self.bus_f.close()
        out = {"samples": len(self.seg[0]), "every_s": self.every, "csv": list(self.paths)}
        out["workload_end_s"] = self.t_end
        rss = {i: verdict(ts, ys, RSS_FLOOR, self.t_end) for i, (ts, ys) in self.series.items()}
        judged = {i: v for i, v in rss.items() if v is not None}
        worst = max(judged.items(), key=lambda kv: kv[1]["growth"], default=None)
        out["rss"] = {"judged": len(judged), "flat": all(v["flat"] for v in judged.values()),
                      "worst": {"process": worst[0], **worst[1]} if worst else None}
        peaks = sorted(self.mortal_peak.values())
        out["mortal_peak_rss"] = verdict([p[0] for p in peaks], [p[1] for p in peaks], RSS_FLOOR)
        out["segment"] = {k: verdict(self.seg[0], self.seg[1][k], TABLE_FLOOR * self.capacity[k], self.t_end)
                          for k in SEGMENT}
        out["final_use"] = final_use
        out["back_to_zero"] = bool(final_use) and not any(final_use.values())
        verdicts = [out["rss"]["flat"] if judged else None, (out["mortal_peak_rss"] or {}).get("flat"),
                    *((v or {}).get("flat") for v in out["segment"].values())]
        out["flat"] = all(v is not False for v in verdicts)
        try:
            out["plot"] = self.plot()
        except Exception as e:  # a plot must not fail the run
            out["plot_error"] = f"{type(e).__name__}: {e}"
        return out

    def plot(self) -> str:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a, b) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
        for ts, ys in self.series.values():
            a.plot(ts, [y / 2**20 for y in ys], color="0.6", lw=0.5)
        if self.mortal_peak:
            a.scatter([p[0] for p in self.mortal_peak.values()],
                      [p[1] / 2**20 for p in self.mortal_peak.values()], s=4, color="tab:red",
                      label="peak RSS of each mortal process (at its start time)")
        a.plot([], [], color="0.6", lw=0.5, label="RSS of each stable process")
        a.set_ylabel("RSS (MiB)")
        ts = self.seg[0]
        every = max(1, len(ts) // 25)  # ~25 markers a line: the shape tells the series in grey print
        for k, marker in zip(SEGMENT, "o^sDv"):
            b.plot(ts, [100 * y / self.capacity[k] for y in self.seg[1][k]], marker=marker, ms=4,
                   markevery=every, label=f"{k} (of {self.capacity[k]:,})", lw=0.8)
        b.set_ylabel("segment use (% of table)")
        if self.t_end is not None:  # named in the legend: a label on the line would cross the series
            a.axvline(self.t_end, color="k", ls=":", lw=0.8)
            b.axvline(self.t_end, color="k", ls=":", lw=0.8, label="workload ends,\nthe drain follows")
        b.set_xlabel("seconds since the start")
        for ax in (a, b):  # beside the panel, never over a series
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, borderaxespad=0)
        cfg = self.run.cfg
        fig.suptitle(f"bus1py stress: memory and segment use over the run ({cfg.processes} "
                     f"processes" + (f", {cfg.churn_slots} of them mortal" if cfg.churn else "")
                     + f", seed {cfg.seed})")
        fig.tight_layout()
        path = os.path.join(self.run.cfg.trace_dir, "resources.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path
