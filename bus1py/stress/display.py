"""Live progress and the final summary of a stress run (rich + psutil).

Invariants:
  - The display only reads: shared counters the children publish and /proc via psutil;
    it never talks to a child, so a slow terminal cannot slow the workload down.
  - It stays readable at 256 processes: one aggregate block plus the top few processes
    by CPU, never one line per process.
  - Rates are differences of monotonic counter readings over monotonic time.
"""
from __future__ import annotations

import time

import psutil
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .slots import (ACTIONS, DELIVERED, ERRORS, MAX_DEPTH, PID, SENT, SIG_RECV, SIG_SENT, STATE,
                    STRIDE, ST_DONE, ST_FAILED, ST_RUN, ST_SENT, ST_START)

STATE_NAMES = {ST_START: "starting", ST_RUN: "running", ST_SENT: "draining", ST_DONE: "done",
               ST_FAILED: "failed"}


def _mib(n):
    return f"{n / (1 << 20):,.0f} MiB"


class LiveMonitor:
    """Callable monitor for runner.run_stress: refreshes a rich Live view on a terminal,
    else (when enabled) writes timestamped progress lines to stderr."""

    def __init__(self, console, top: int = 5, enabled: bool = True):
        from ..cli.term import PhaseLines
        self.console = console
        self.top = top
        self.enabled = enabled and console.is_terminal
        self.lines = PhaseLines("bus1py stress") if enabled and not console.is_terminal else None
        self.live = None
        self.last = None  # (time, sent, delivered)
        self.rate = (0.0, 0.0)
        self.procs = {}
        self.cpu = {}
        self.rss = {}
        self.peaks = {"cpu_total_pct": 0.0, "rss_total": 0, "rss_max": 0, "send_rate": 0.0,
                      "deliver_rate": 0.0}
        self.last_ps = 0.0

    def __call__(self, run, phase):
        if phase == "done":
            if self.live:
                self.live.update(self.render(run, phase))
                self.live.stop()
                self.live = None
            return
        now = time.monotonic()
        self.sample_psutil(run, now)
        if self.enabled and self.live is None:
            self.live = Live(self.render(run, phase), console=self.console, refresh_per_second=4,
                             transient=False)
            self.live.start()
        elif self.live:
            self.live.update(self.render(run, phase))
        else:
            view = self.render(run, phase)  # still track rates and peaks
            if self.lines:
                head, line1 = view.renderables[:2]
                self.lines(phase, f"{head.plain.removeprefix('bus1py stress ')}; {line1.plain}")

    def sample_psutil(self, run, now):
        if now - self.last_ps < 0.9:
            return
        self.last_ps = now
        c = run.counters
        for i in range(run.cfg.processes):
            pid = c[i * STRIDE + PID]
            if not pid:
                continue
            p = self.procs.get(i)
            try:
                if p is None:
                    p = self.procs[i] = psutil.Process(pid)
                    p.cpu_percent(None)
                with p.oneshot():
                    self.cpu[i] = p.cpu_percent(None)
                    self.rss[i] = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self.cpu[i] = 0.0
        total_cpu = sum(self.cpu.values())
        total_rss = sum(self.rss.values())
        self.peaks["cpu_total_pct"] = max(self.peaks["cpu_total_pct"], total_cpu)
        self.peaks["rss_total"] = max(self.peaks["rss_total"], total_rss)
        self.peaks["rss_max"] = max([self.peaks["rss_max"], *self.rss.values()])

    def render(self, run, phase):
        cfg, c, n = run.cfg, run.counters, run.cfg.processes
        col = lambda k: [c[i * STRIDE + k] for i in range(n)]
        sent, deliv = sum(col(SENT)), sum(col(DELIVERED))
        now = time.monotonic()
        if self.last and now - self.last[0] > 0.2:
            dt = now - self.last[0]
            self.rate = ((sent - self.last[1]) / dt, (deliv - self.last[2]) / dt)
            self.last = (now, sent, deliv)
            self.peaks["send_rate"] = max(self.peaks["send_rate"], self.rate[0])
            self.peaks["deliver_rate"] = max(self.peaks["deliver_rate"], self.rate[1])
        elif not self.last:
            self.last = (now, sent, deliv)
        states = col(STATE)
        counts = {STATE_NAMES.get(s, "leaving"): states.count(s) for s in sorted(set(states))}
        elapsed = now - run.t_go if run.t_go else 0.0
        goal = f"{cfg.duration:g} s" if cfg.duration else f"{cfg.messages:,} messages/process"
        head = Text.assemble(
            ("bus1py stress ", "bold"), f"{n} processes, seed {cfg.seed}, {elapsed:5.1f} s (goal {goal})",
            (f"  inject={cfg.inject}" if cfg.inject else "", "bold red"),
            f"  [{', '.join(f'{v} {k}' for k, v in counts.items())}]")
        depth = col(MAX_DEPTH)
        line1 = Text(f"sent {sent:,} ({self.rate[0]:,.0f}/s)   delivered {deliv:,} ({self.rate[1]:,.0f}/s)   "
                     f"signals {sum(col(SIG_SENT)):,} sent / {sum(col(SIG_RECV)):,} received   "
                     f"actions {sum(col(ACTIONS)):,}   errors {sum(col(ERRORS)):,}   "
                     f"max queue {max(depth):,}")
        cpus, rss = self.cpu, self.rss
        line2 = Text(f"CPU {sum(cpus.values()):.0f}% total (mean {sum(cpus.values()) / max(1, len(cpus)):.1f}%, "
                     f"max {max(cpus.values(), default=0):.0f}%)   RSS {_mib(sum(rss.values()))} total "
                     f"(mean {_mib(sum(rss.values()) / max(1, len(rss)))}, max {_mib(max(rss.values(), default=0))})")
        table = Table(title=f"top {self.top} by CPU", title_justify="left", expand=False, box=None)
        for h in ("proc", "pid", "state", "CPU %", "RSS", "sent", "delivered", "max queue", "errors"):
            table.add_column(h, justify="right")
        for i in sorted(cpus, key=lambda i: -cpus[i])[: self.top]:
            b = i * STRIDE
            table.add_row(str(i), str(c[b + PID]), STATE_NAMES.get(c[b + STATE], "?"), f"{cpus[i]:.0f}",
                          _mib(rss.get(i, 0)), f"{c[b + SENT]:,}", f"{c[b + DELIVERED]:,}",
                          f"{c[b + MAX_DEPTH]:,}", f"{c[b + ERRORS]:,}")
        return Group(head, line1, line2, table)


def errors_by_errno(results) -> dict:
    out = {}
    for r in results:
        for key, v in (r.get("errors") or {}).items():
            out[key] = out.get(key, 0) + v
    return dict(sorted(out.items()))


def summary_table(res, lat: dict | None):
    """The end-of-run table: messages, deliveries, throughput, latency, depth, errors."""
    rs = [r for r in res.results if "failed" not in r]
    sent = sum(r["sent"] for r in rs)
    deliv = sum(r["delivered"] for r in rs)
    active = (max((r["sent_at"] for r in rs), default=0) - min((r["start"] for r in rs), default=0)) or 1e-9
    total = (max((r["end"] for r in rs), default=0) - min((r["start"] for r in rs), default=0)) or 1e-9
    cfg = res.config
    t = Table(title=f"bus1py stress: {cfg.processes} processes, seed {cfg.seed}, "
                    f"transport {cfg.transport}" + (f", protocol {cfg.protocol}" if cfg.protocol else "")
                    + (f", chaos delay ≤{cfg.chaos_delay * 1e3:g} ms" if cfg.chaos_delay else "")
                    + (f", inject={cfg.inject}" if cfg.inject else ""), show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    kinds = {}
    for r in rs:
        for k, v in r.get("kinds", {}).items():
            kinds[k] = kinds.get(k, 0) + v
    t.add_row("result", "[green]ok[/green]" if res.ok else "[red]FAILED[/red]: " + "; ".join(res.failures[:3]))
    t.add_row("actions", ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items())) or "none")
    if res.skipped:
        t.add_row("skipped", "; ".join(f"{k} ({why})" for k, why in res.skipped.items()))
    t.add_row("messages sent", f"{sent:,}")
    t.add_row("deliveries", f"{deliv:,}")
    t.add_row("signals", f"{sum(r['signals_sent'] for r in rs):,} sent, "
                         f"{sum(r['signals_received'] for r in rs):,} received")
    t.add_row("throughput", f"{sent / active:,.0f} messages/s, {deliv / total:,.0f} deliveries/s "
                            f"(workload {active:.2f} s, with drain {total:.2f} s)")
    if lat and "p50" in lat:
        t.add_row("delivery latency (µs)", "  ".join(f"{k} {lat[k]:,.0f}" for k in
                                                      ("p50", "p90", "p99", "p99.9", "max")))
        if lat.get("unmatched_deliveries"):
            t.add_row("[red]deliveries with no send[/red]", f"{lat['unmatched_deliveries']:,}")
    elif not cfg.trace_dir:
        t.add_row("delivery latency", "(no trace: --no-trace)")
    depths = [r["max_depth"] for r in rs]
    if depths:
        t.add_row("queue depth reached", f"max {max(depths):,}, mean of per-process max "
                                         f"{sum(depths) / len(depths):,.1f}")
    errs = errors_by_errno(res.results)
    t.add_row("errors by errno", ", ".join(f"{k} {v:,}" for k, v in errs.items()) or "none")
    if res.samples:
        s = res.samples
        t.add_row("peaks (psutil)", f"CPU {s['cpu_total_pct']:.0f}% total, RSS {_mib(s['rss_total'])} "
                                    f"total, {_mib(s['rss_max'])} largest process")
    if cfg.trace_dir:
        t.add_row("trace", f"{cfg.trace_dir}: {sum(r['trace_rows'] for r in rs):,} rows in "
                           f"{sum(r['trace_files'] for r in rs):,} files, "
                           f"{sum(r['trace_bytes'] for r in rs) / (1 << 20):,.1f} MiB")
    return t


def resources_lines(r: dict) -> list:
    """The resource summary (resources.Sampler.finish) in words: flat or not, and by how much."""
    def judged(v, unit=1, fmt="{:,.0f}"):
        if v is None:
            return "too few samples"
        word = "flat" if v["flat"] else "[red]NOT flat[/red]"
        return f"{word} (rise {fmt.format(v['growth'] / unit)} over the last 80%, median {fmt.format(v['median'] / unit)})"

    mib = 2 ** 20
    w = r["rss"]["worst"]
    lines = [f"resources: {r['samples']:,} samples every {r['every_s']:g} s -> " + ", ".join(r["csv"])]
    lines.append(f"  RSS, stable processes and the coordinator (-1): {r['rss']['judged']} judged, "
                 + ("none judged" if w is None else
                    ("all flat" if r["rss"]["flat"] else "[red]NOT all flat[/red]")
                    + f"; largest rise: process {w['process']}, {judged(w, mib, '{:.1f} MiB')}"))
    lines.append(f"  RSS peaks of the mortal processes, by generation: {judged(r['mortal_peak_rss'], mib, '{:.1f} MiB')}")
    for k, v in r["segment"].items():
        lines.append(f"  segment {k}: {judged(v)}")
    zero = "[green]all zero[/green]" if r["back_to_zero"] else f"[red]NOT zero: {r['final_use']}[/red]"
    lines.append(f"  segment use once every process was gone: {zero}")
    if r.get("plot"):
        lines.append(f"  plot: {r['plot']}")
    return lines
