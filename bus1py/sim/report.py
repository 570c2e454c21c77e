"""The study's results as data (aggregate), as tables (rich) and as figures (matplotlib).

aggregate() is the analysis: rows of the sweep (one per run) become one row per
protocol x mode x n x network delay x send clock, with the mean over runs, the half-width of
its 95% t-interval (`_ci`) and the min/max. The tables and the figures only render that
data, so tests compare data, not pictures. Protocols are named by `label` everywhere a
reader sees them: "prs (reconstructed)", because our PRS is not the paper's.

Figures (PNG) of the baseline (per-process send clock), one series per protocol, unicast and
multicast side by side; error bars are 95% t-intervals over the runs:
  per_copy.png      dependents and control bytes per data copy against n, linear axes (the
                    unit of seed 001's "RST = n^2", its Fig. 2/3 as they probably were)
  dependents.png    dependents per message, summed over its destinations, symlog axis
  bytes.png         control bytes per message, summed over its destinations, symlog axis
  delay.png         delivery delay (mean, and p99 dashed) against n (not in the paper)
  control.png       control messages per message against n (bus1's and buffer's price)
  net_delay.png     bytes per message against the network's mean delay, at the largest n
                    (only when the sweep has more than one network delay)
"""
from __future__ import annotations

import os
from collections import defaultdict

from .. import causal
from .stats import crossover, mean_ci

METRICS = ("dependents_per_msg", "bytes_per_msg", "control_msgs_per_msg", "delay_mean",
           "delay_p99", "buffered_max", "dependents_per_copy", "bytes_per_copy",
           "header_bytes_per_msg", "posted_fraction", "undelivered", "receive_events_per_s",
           "seconds", "fanout", "ci_max", "ci_per_copy", "ci_empty_fraction",
           "bytes_per_copy_indexed", "bytes_per_copy_literal", "dependents_per_copy_literal")
GROUP = ("protocol", "mode", "n", "net_delay", "clock")
#: a group column's value in rows written before the column existed
_DEFAULT = {"clock": "process"}
#: the plot style of a protocol no class has (a row of a CSV from another build)
_NO_STYLE = ("black", "o", "-")


def _protocol(proto: str):
    """The class of the protocol named `proto` (bus1py.causal), None if there is none."""
    try:
        return causal.protocol_class(proto)
    except ValueError:
        return None


def label(proto: str) -> str:
    """What a reader is told the protocol is (Protocol.label, else its name)."""
    cls = _protocol(proto)
    return (cls and cls.label) or proto


def style(proto: str) -> tuple:
    """(colour, marker, line style) of the protocol's curves (Protocol.style)."""
    cls = _protocol(proto)
    return cls.style if cls else _NO_STYLE


def aggregate(rows) -> list[dict]:
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(_DEFAULT.get(k) if r.get(k) in (None, "") else r[k]
                     for k in GROUP)].append(r)
    out = []
    order = {p: i for i, p in enumerate(causal.PROTOCOLS)}
    for key in sorted(groups, key=lambda k: (order.get(k[0], 99), k[1], k[2], k[3], k[4])):
        rs = groups[key]
        agg = dict(zip(GROUP, key))
        agg["runs"] = len(rs)
        for m in METRICS:
            # rows from an older CSV (or of another protocol) may lack a column: use what is there
            vals = [float(r[m]) for r in rs if isinstance(r.get(m), (int, float))]
            if vals:
                agg[m], agg[m + "_ci"] = mean_ci(vals)
                agg[m + "_min"], agg[m + "_max"] = min(vals), max(vals)
        out.append(agg)
    return out


def baseline(agg) -> list[dict]:
    """The cells of the per-process send clock (the sensitivity study's other cells out)."""
    return [a for a in agg if a["clock"] == "process"]


def _fmt(x: float) -> str:
    if x >= 1e5:
        return f"{x:.3g}"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}"


def _backlog(a) -> str:
    """A note when the protocol could not transmit what it accepted (a growing backlog)."""
    f = a.get("posted_fraction", 1.0)
    return "" if f >= 0.95 else f" (backlog: {f:.0%} of copies posted)"


def print_tables(agg, console) -> None:
    """One table per mode (and delay): per protocol and n, dependents / bytes / control msgs."""
    from rich.table import Table
    keys = {(a["mode"], a["net_delay"]) for a in agg}
    for (mode, delay) in sorted(keys, key=lambda k: (k[0] != "unicast", k[1])):
        cells = [a for a in agg if a["mode"] == mode and a["net_delay"] == delay]
        ns = sorted({a["n"] for a in cells})
        t = Table(title=f"{mode}, network delay mean {delay:g} s: per message, summed over "
                        "destinations — dependents / control bytes / control messages",
                  title_justify="left")
        t.add_column("protocol")
        for n in ns:
            t.add_column(f"n={n}", justify="right")
        t.add_column("delay mean/p99 at max n", justify="right")
        for proto in dict.fromkeys(a["protocol"] for a in cells):
            row = {a["n"]: a for a in cells if a["protocol"] == proto}
            vals = []
            for n in ns:
                a = row.get(n)
                vals.append("" if a is None else
                            f"{_fmt(a['dependents_per_msg'])} / {_fmt(a['bytes_per_msg'])}"
                            f" / {_fmt(a['control_msgs_per_msg'])}")
            last = row[max(row)]
            flag = "" if last["undelivered"] == 0 else f" ({last['undelivered']:.0f} lost!)"
            vals.append(f"{last['delay_mean'] * 1e3:.0f} / {last['delay_p99'] * 1e3:.0f} ms{flag}"
                        + _backlog(last))
            t.add_row(label(proto), *vals)
        console.print(t)


def _tables(agg):
    """Per table (unicast first, then by network delay): mode, delay, its cells, its n, its
    run counts."""
    keys = {(a["mode"], a["net_delay"]) for a in agg}
    for (mode, delay) in sorted(keys, key=lambda k: (k[0] != "unicast", k[1])):
        cells = [a for a in agg if a["mode"] == mode and a["net_delay"] == delay]
        yield (mode, delay, cells, sorted({a["n"] for a in cells}),
               sorted({a["runs"] for a in cells}))


def markdown(agg) -> str:
    """The overhead tables as Markdown: one per mode and network delay, a row per protocol,
    per n the dependents / control bytes / control messages per message (summed over its
    destinations), then per-copy bytes and the delivery delay at the largest n."""
    out = []
    for mode, delay, cells, ns, runs in _tables(agg):
        out.append(f"**{mode}**, network delay mean {delay:g} s, "
                   f"{'/'.join(map(str, runs))} run(s) per cell: dependents / control bytes / "
                   "control messages per message")
        out.append("")
        out.append("| protocol | " + " | ".join(f"n={n}" for n in ns)
                   + f" | bytes per copy, n={ns[-1]} | delay mean / p99, n={ns[-1]} |")
        out.append("|---|" + "---:|" * (len(ns) + 2))
        for proto in dict.fromkeys(a["protocol"] for a in cells):
            row = {a["n"]: a for a in cells if a["protocol"] == proto}
            vals = [("" if n not in row else
                     f"{_fmt(row[n]['dependents_per_msg'])} / {_fmt(row[n]['bytes_per_msg'])}"
                     f" / {_fmt(row[n]['control_msgs_per_msg'])}") for n in ns]
            last = row[max(row)]
            vals.append(_fmt(last["bytes_per_copy"]))
            vals.append(f"{last['delay_mean'] * 1e3:.0f} / {last['delay_p99'] * 1e3:.0f} ms"
                        + _backlog(last))
            out.append(f"| {label(proto)} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def markdown_per_copy(agg) -> str:
    """Per data copy, dependents and control bytes, mean ± 95% half-width over the runs, one
    table per mode (and network delay): the unit of the paper's "RST carries n^2"."""
    out = []
    for mode, delay, cells, ns, runs in _tables(agg):
        out += [f"**{mode}**, network delay mean {delay:g} s, {'/'.join(map(str, runs))} run(s) "
                "per cell: dependents / control bytes **per copy**, mean ± 95% CI half-width", "",
                "| protocol | " + " | ".join(f"n={n}" for n in ns) + " |",
                "|---|" + "---:|" * len(ns)]
        for proto in dict.fromkeys(a["protocol"] for a in cells):
            row = {a["n"]: a for a in cells if a["protocol"] == proto}
            vals = [("" if n not in row else
                     f"{_pm(row[n], 'dependents_per_copy')} / {_pm(row[n], 'bytes_per_copy')}")
                    for n in ns]
            out.append(f"| {label(proto)} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def crossovers(agg, a="prs", b="rst", metric="bytes_per_copy") -> list[dict]:
    """Per mode (and network delay) of the baseline where both protocols ran: where a's
    `metric` rises above b's for good, with its 95% interval (stats.crossover)."""
    out = []
    agg = baseline(agg)
    for mode, delay in sorted({(x["mode"], x["net_delay"]) for x in agg}):
        sa = {x["n"]: x for x in agg if (x["protocol"], x["mode"], x["net_delay"]) == (a, mode, delay)}
        sb = {x["n"]: x for x in agg if (x["protocol"], x["mode"], x["net_delay"]) == (b, mode, delay)}
        ns = sorted(set(sa) & set(sb))
        if len(ns) < 2:
            continue
        c = crossover(ns, [sa[n][metric] for n in ns], [sa[n].get(metric + "_ci", 0) for n in ns],
                      [sb[n][metric] for n in ns], [sb[n].get(metric + "_ci", 0) for n in ns])
        out.append({"mode": mode, "net_delay": delay, "ns": ns, **c,
                    "ratio": {n: sa[n][metric] / sb[n][metric] for n in ns}})
    return out


def _where(x, ns) -> str:
    if x is None:
        return f"not above at n ≤ {ns[-1]}"
    if x == float("-inf"):
        return f"already above at n = {ns[0]}"
    return f"n ≈ {x:.2f}"


def markdown_crossovers(agg, a="prs", b="rst") -> str:
    lines = []
    for c in crossovers(agg, a, b):
        lines.append(f"- {c['mode']}, delay {c['net_delay']:g} s: {label(a)} control bytes per "
                     f"copy rise above {label(b)}'s at {_where(c['at'], c['ns'])} (95% interval: "
                     f"{_where(c['lo'], c['ns'])} to {_where(c['hi'], c['ns'])}); ratio "
                     + ", ".join(f"n={n}: {r:.2f}" for n, r in c["ratio"].items()))
    return "\n".join(lines) + ("\n" if lines else "")


def _pm(a, m) -> str:
    half = a.get(m + "_ci", 0.0)
    return _fmt(a[m]) if half < 0.05 else f"{_fmt(a[m])} ± {half:.2g}"


def _series(agg, mode, delay):
    by = defaultdict(list)
    for a in agg:
        if a["mode"] == mode and a["net_delay"] == delay:
            by[a["protocol"]].append(a)
    return {p: sorted(v, key=lambda a: a["n"]) for p, v in by.items()}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _middle_delay(agg):
    delays = sorted({a["net_delay"] for a in agg})
    return delays[len(delays) // 2]


def _draw(ax, agg, mode, metric, delay):
    """One series per protocol with 95% t-interval bars."""
    for proto, pts in _series(agg, mode, delay).items():
        pts = [a for a in pts if metric in a]
        if not pts:
            continue
        colour, marker, line = style(proto)
        ax.errorbar([a["n"] for a in pts], [a[metric] for a in pts],
                    yerr=[a.get(metric + "_ci", 0.0) for a in pts], color=colour,
                    marker=marker, ms=5, capsize=3, linestyle=line, label=label(proto))


def _grid(agg, rows=1):
    """A figure with a column per mode present: (figure, axes rows, modes)."""
    modes = [m for m in ("unicast", "multicast") if any(a["mode"] == m for a in agg)]
    fig, axes = _plt().subplots(rows, len(modes), figsize=(6.2 * len(modes), 4.2 * rows + 0.4),
                                squeeze=False)
    return fig, axes, modes


def _finish(fig, axes, title, path):
    """Legend right of the first row, the title, saved and closed."""
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _vs_n(agg, metric, ylabel, title, path, log=True, p99=False):
    delay = _middle_delay(agg)
    fig, axes, modes = _grid(agg)
    for ax, mode in zip(axes[0], modes):
        _draw(ax, agg, mode, metric, delay)
        if p99:
            for proto, pts in _series(agg, mode, delay).items():
                ax.plot([a["n"] for a in pts], [a["delay_p99"] for a in pts], linestyle="--",
                        lw=0.8, color=style(proto)[0])
        ax.set_title(f"{mode}")
        ax.set_xlabel("processes n")
        ax.set_ylabel(ylabel)
        if log == "log":
            ax.set_yscale("log")
        else:
            if log:
                ax.set_yscale("symlog", linthresh=1)
            ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, axes, f"{title} (network delay mean {delay:g} s; bars: 95% CI over "
                   "runs)", path)


def _per_copy(agg, path):
    """Dependents and bytes per data copy, linear axes: rows metric, columns mode."""
    delay = _middle_delay(agg)
    metrics = (("dependents_per_copy", "dependents per copy"),
               ("bytes_per_copy", "control bytes per copy"))
    fig, axes, modes = _grid(agg, rows=2)
    for row, (metric, ylabel) in zip(axes, metrics):
        for ax, mode in zip(row, modes):
            _draw(ax, agg, mode, metric, delay)
            ax.set_title(f"{mode}: {ylabel}")
            ax.set_xlabel("processes n")
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
    return _finish(fig, axes, "Per data copy, linear axes (seed 001 Fig. 2/3's probable unit; "
                   f"network delay mean {delay:g} s; bars: 95% CI over runs)", path)


def _vs_delay(agg, path):
    nmax = max(a["n"] for a in agg)
    fig, axes, modes = _grid(agg)
    for ax, mode in zip(axes[0], modes):
        by = defaultdict(list)
        for a in agg:
            if a["mode"] == mode and a["n"] == nmax:
                by[a["protocol"]].append(a)
        for proto, pts in by.items():
            pts.sort(key=lambda a: a["net_delay"])
            colour, marker, line = style(proto)
            ax.errorbar([a["net_delay"] for a in pts], [a["bytes_per_msg"] for a in pts],
                        yerr=[a.get("bytes_per_msg_ci", 0.0) for a in pts], color=colour,
                        marker=marker, ms=5, capsize=3, linestyle=line, label=label(proto))
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("network delay mean (s)")
        ax.set_ylabel("control bytes per message")
        ax.set_title(f"{mode}, n={nmax}")
        ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, axes, "How the overhead moves with the network's delay (send interval "
                   "mean fixed; bars: 95% CI over runs)", path)


def write_plots(agg, outdir) -> list[str]:
    """The figures of the baseline cells of `agg` (see the module docstring)."""
    agg = baseline(agg)
    os.makedirs(outdir, exist_ok=True)
    j = lambda name: os.path.join(outdir, name)  # noqa: E731
    paths = [
        _per_copy(agg, j("per_copy.png")),
        _vs_n(agg, "dependents_per_msg", "dependents per message (sum over destinations)",
              "Dependents per message, summed over its destinations", j("dependents.png")),
        _vs_n(agg, "bytes_per_msg", "control bytes per message (sum over destinations)",
              "Control bytes per message, summed over its destinations", j("bytes.png")),
        _vs_n(agg, "delay_mean", "delivery delay (s)", "Delivery delay, send to delivery: "
              "mean (solid), p99 (dashed)", j("delay.png"), log="log", p99=True),
        _vs_n(agg, "control_msgs_per_msg", "control messages per message",
              "Control-only wires per message", j("control.png"), log=False),
    ]
    if len({a["net_delay"] for a in agg}) > 1:
        paths.append(_vs_delay(agg, j("net_delay.png")))
    return paths
