"""The study's results as data (aggregate), as tables (rich) and as figures (matplotlib).

aggregate() is the analysis: rows of the sweep (one per run) become one row per
protocol x mode x n x network delay, with the mean over runs and the min/max spread. The
table and the figures only render that data, so tests compare data, not pictures.

Figures (PNG), one line per protocol, unicast and multicast side by side:
  dependents.png    dependents per message against n (seed 001 Fig. 2)
  bytes.png         control bytes per message against n (seed 001 Fig. 3)
  delay.png         delivery delay (mean, and p99 dashed) against n (not in the paper)
  control.png       control messages per message against n (bus1's and buffer's price)
  net_delay.png     bytes per message against the network's mean delay, at the largest n
                    (only when the sweep has more than one network delay)
"""
from __future__ import annotations

import os
from collections import defaultdict

from .. import causal

METRICS = ("dependents_per_msg", "bytes_per_msg", "control_msgs_per_msg", "delay_mean",
           "delay_p99", "buffered_max", "dependents_per_copy", "bytes_per_copy",
           "header_bytes_per_msg", "posted_fraction", "undelivered", "receive_events_per_s",
           "seconds")
GROUP = ("protocol", "mode", "n", "net_delay")


def aggregate(rows) -> list[dict]:
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in GROUP)].append(r)
    out = []
    order = {p: i for i, p in enumerate(causal.PROTOCOLS)}
    for key in sorted(groups, key=lambda k: (order.get(k[0], 99), k[1], k[2], k[3])):
        rs = groups[key]
        agg = dict(zip(GROUP, key))
        agg["runs"] = len(rs)
        for m in METRICS:
            # rows from an older CSV may lack a column: average what is there
            vals = [float(r[m]) for r in rs if isinstance(r.get(m), (int, float))]
            if vals:
                agg[m] = sum(vals) / len(vals)
                agg[m + "_min"], agg[m + "_max"] = min(vals), max(vals)
        out.append(agg)
    return out


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
            t.add_row(proto, *vals)
        console.print(t)


def markdown(agg) -> str:
    """The overhead tables as Markdown: one per mode and network delay, a row per protocol,
    per n the dependents / control bytes / control messages per message (summed over its
    destinations), then per-copy bytes and the delivery delay at the largest n."""
    out = []
    keys = {(a["mode"], a["net_delay"]) for a in agg}
    for (mode, delay) in sorted(keys, key=lambda k: (k[0] != "unicast", k[1])):
        cells = [a for a in agg if a["mode"] == mode and a["net_delay"] == delay]
        ns = sorted({a["n"] for a in cells})
        runs = sorted({a["runs"] for a in cells})
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
            out.append(f"| {proto} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def _series(agg, mode, metric, delay):
    by = defaultdict(list)
    for a in agg:
        if a["mode"] == mode and a["net_delay"] == delay:
            by[a["protocol"]].append(a)
    return {p: sorted(v, key=lambda a: a["n"]) for p, v in by.items()}


def _style(proto):
    styles = {"fifo": ":", "buffer": ":", "bus1": "-", "jpcy": "-", "ks": "--"}
    return styles.get(proto, "-.")


def _vs_n(agg, metric, ylabel, title, path, log=True, p99=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    delay = sorted({a["net_delay"] for a in agg})[len({a["net_delay"] for a in agg}) // 2]
    modes = [m for m in ("unicast", "multicast") if any(a["mode"] == m for a in agg)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.2 * len(modes), 4.6), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for proto, pts in _series(agg, mode, metric, delay).items():
            xs = [a["n"] for a in pts]
            ys = [a[metric] for a in pts]
            err = [[a[metric] - a[metric + "_min"] for a in pts],
                   [a[metric + "_max"] - a[metric] for a in pts]]
            line = ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=2,
                               linestyle=_style(proto), label=proto)
            if p99:
                ax.plot(xs, [a["delay_p99"] for a in pts], linestyle="--", lw=0.8,
                        color=line[0].get_color())
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
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{title} (network delay mean {delay:g} s; bars: min-max over runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _vs_delay(agg, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nmax = max(a["n"] for a in agg)
    modes = [m for m in ("unicast", "multicast") if any(a["mode"] == m for a in agg)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.2 * len(modes), 4.6), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        by = defaultdict(list)
        for a in agg:
            if a["mode"] == mode and a["n"] == nmax:
                by[a["protocol"]].append(a)
        for proto, pts in by.items():
            pts.sort(key=lambda a: a["net_delay"])
            ax.plot([a["net_delay"] for a in pts], [a["bytes_per_msg"] for a in pts],
                    marker="o", ms=4, linestyle=_style(proto), label=proto)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("network delay mean (s)")
        ax.set_ylabel("control bytes per message")
        ax.set_title(f"{mode}, n={nmax}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("How the overhead moves with the network's delay (send interval mean fixed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(agg, outdir) -> list[str]:
    os.makedirs(outdir, exist_ok=True)
    j = lambda name: os.path.join(outdir, name)  # noqa: E731
    paths = [
        _vs_n(agg, "dependents_per_msg", "dependents per message", "Dependents per message "
              "(seed 001 Fig. 2)", j("dependents.png")),
        _vs_n(agg, "bytes_per_msg", "control bytes per message", "Control bytes per message "
              "(seed 001 Fig. 3)", j("bytes.png")),
        _vs_n(agg, "delay_mean", "delivery delay (s)", "Delivery delay, send to delivery: "
              "mean (solid), p99 (dashed)", j("delay.png"), log="log", p99=True),
        _vs_n(agg, "control_msgs_per_msg", "control messages per message",
              "Control-only wires per message", j("control.png"), log=False),
    ]
    if len({a["net_delay"] for a in agg}) > 1:
        paths.append(_vs_delay(agg, j("net_delay.png")))
    return paths
