"""The report's plots (matplotlib, written next to BENCHMARKS.md)."""
from __future__ import annotations

import math

from .common import SIZES, fmt_size
from .sections import best


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def unicast_plot(out, rows):
    """One horizontal bar per row and placement, the sizes side by side: labels read level
    and every row has its place, with no gaps."""
    plt = _plt()
    keys = list(dict.fromkeys((n, p) for n, p, _ in rows))
    labels = [f"{n} ({p})" for n, p in keys]
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.32 * len(keys) * len(SIZES) + 1.8), sharey=True)
    h = 0.8 / len(SIZES)
    for j, size in enumerate(SIZES):
        ys = [i + (j - (len(SIZES) - 1) / 2) * h for i in range(len(keys))]
        colour = f"C{j}"
        axes[0].barh(ys, [rows.get((n, p, size), {}).get("rate", 0) for n, p in keys], h, color=colour,
                     label=fmt_size(size))
        med = [rows.get((n, p, size), {}).get("rtt_med", 0) for n, p in keys]
        p99 = [rows.get((n, p, size), {}).get("rtt_p99", float("nan")) for n, p in keys]
        axes[1].barh(ys, med, h, color=colour, label=f"{fmt_size(size)} median")
        axes[1].scatter(p99, ys, marker="|", s=120, color="k", zorder=3, label="p99" if j == 0 else None)
    axes[0].set_title("bus1py and its peers: one-way throughput (msg/s, median)")
    axes[1].set_title("round trip (µs): bars median, ticks p99 (per-message rows)")
    axes[0].set_yticks(range(len(keys)))
    axes[0].set_yticklabels(labels, fontsize=8)
    axes[0].invert_yaxis()
    for ax in axes:
        ax.set_xscale("log")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    p = out / "unicast.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def sweep_plot(out, sweep):
    """msg/s and MB/s against payload size, each transport at its better placement."""
    plt = _plt()
    rows, sizes = sweep["rows"], sweep["sizes"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    colours = _plt().get_cmap("tab20").colors
    markers = "o^sDvP*Xh<>p"
    for i, name in enumerate(dict.fromkeys(k[0] for k in rows)):
        pts = [(s, best(rows, s, name=name)) for s in sizes]
        pts = [(s, b[1]["rate"]) for s, b in pts if b]
        if not pts:
            continue
        # every series its own colour and marker: bus1py's rows thick and solid
        style = dict(marker=markers[i % len(markers)], color=colours[i % len(colours)],
                     lw=2.2 if name.startswith("bus1py") else 1.2,
                     ls="-" if name.startswith("bus1py") else "--", label=name)
        a1.plot([s for s, _ in pts], [r for _, r in pts], **style)
        a2.plot([s for s, _ in pts], [r * s / 1e6 for s, r in pts], **style)
    a1.set_title("payload sweep: one-way msg/s (median, better placement)")
    a2.set_title("payload sweep: one-way MB/s of payload")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([fmt_size(s) for s in sizes], rotation=30)
        ax.set_xlabel("payload")
        ax.grid(alpha=0.3)
    a1.legend(fontsize=7)
    fig.tight_layout()
    p = out / "sweep.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def multicast_plot(out, mc):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name in dict.fromkeys(n for n, _ in mc):
        ks = sorted(k for n, k in mc if n == name)
        ax.plot(ks, [mc[(name, k)]["rate"] for k in ks], "o-", label=name)
    ax.axhline(150e3, ls="--", color="gray", lw=1, label="target k=4: 150k/s")
    allk = sorted({k for _, k in mc})
    ax.set_xscale("log", base=2)
    ax.set_xticks(allk)
    ax.set_xticklabels([str(k) for k in allk])
    ax.set_xlabel("receivers k")
    ax.set_ylabel("per-receiver msg/s (median)")
    ax.set_title("multicast, 64 B")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = out / "multicast.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def queue_cost_plot(out, qc):
    plt = _plt()
    rows = qc["rows"]
    ms = [r["m"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    ax.plot(ms, [r["raw_ns"] for r in rows], "o-", label="send+recv pair (raw cffi calls), median")
    ax.plot(ms, [r["raw_min_ns"] for r in rows], "o:", color="C0", alpha=0.6, label="the same, min of reps")
    ax.plot(ms, [r["c_ns"] for r in rows], "s-", color="C1", label="C side (min, cffi call cost removed)")
    a0, b0 = qc["fit"]
    ax.plot(ms, [a0 + b0 * math.log2(m) for m in ms], "k--", lw=1,
            label=f"C-side fit {a0:.0f} {'+' if b0 >= 0 else '-'} {abs(b0):.1f}*log2(m) ns")
    ax.set_title(f"queue operation cost vs queue length "
                 f"(m={ms[-1]:,} / m={ms[0]}: {qc['ratio_raw_ns']:.2f}x)")
    ax.set_ylabel("ns per send+recv pair (thread CPU time)")
    ax.legend(fontsize=8)
    ax2.plot(ms, [r["api_ns"] for r in rows], "^-", color="C2", label="Peer.send + Peer.recv(0), median")
    ax2.set_title("the same through the Python API")
    ax2.legend(fontsize=8)
    for a_ in (ax, ax2):
        a_.set_xscale("log")
        a_.set_ylim(bottom=0)
        a_.set_xlabel("entries already queued m (log scale)")
        a_.grid(alpha=0.3)
    fig.tight_layout()
    p = out / "queue_cost.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def make_plots(out, res):
    files = []
    uni, sweep, mc, qc = res.get("unicast"), res.get("sweep"), res.get("multicast"), res.get("queue")
    if uni and uni["rows"]:
        files.append(unicast_plot(out, uni["rows"]))
    if sweep and sweep["rows"]:
        files.append(sweep_plot(out, sweep))
    if mc:
        files.append(multicast_plot(out, mc))
    if qc:
        files.append(queue_cost_plot(out, qc))
    return files
