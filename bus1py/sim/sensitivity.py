"""Which of seed 001's conclusions survive when a parameter the paper leaves open changes.

One factor at a time around the baseline (per-process send clock, the first network delay,
JPCY with explicit sender ids and our S4/S5 order): each other network delay, the
system-wide send clock (rows of the sweep's `--vary`), and two readings of JPCY computed from
the baseline's own jpcy runs (bus1py.sim.ciwire: they change what a wire carries, not what a
process keeps): a sender-indexed CI vector, and the literal S4-before-S5 order.

Each conclusion is a predicate over one level's cells of rst, prs and jpcy, per copy (the
paper's figures are lost, so only these stated, qualitative claims can be checked); `table`
renders holds / fails with the figure that decides it.

Invariants: pure functions of the aggregate rows (report.aggregate); a conclusion whose
protocols or n are missing at a level says so instead of guessing.
"""
from __future__ import annotations

import math

PAPER = ("rst", "prs", "jpcy")


def levels(agg) -> list[tuple[str, dict]]:
    """(name, {(protocol, mode, n): cell}) for the baseline and each one-factor level."""
    base_delay = min((a["net_delay"] for a in agg if a["clock"] == "process"),
                     key=lambda d: (abs(d - 0.05), d))

    def view(pred):
        return {(a["protocol"], a["mode"], a["n"]): a for a in agg if pred(a)}

    base = view(lambda a: a["clock"] == "process" and a["net_delay"] == base_delay)
    out = [(f"baseline (delay {base_delay:g} s, clock per process)", base)]
    for d in sorted({a["net_delay"] for a in agg if a["clock"] == "process"} - {base_delay}):
        out.append((f"network delay {d:g} s",
                    view(lambda a, d=d: a["clock"] == "process" and a["net_delay"] == d)))
    for c in sorted({a["clock"] for a in agg} - {"process"}):
        out.append((f"send clock: one per {c}",
                    view(lambda a, c=c: a["clock"] == c and a["net_delay"] == base_delay)))
    if any(p == "jpcy" and "bytes_per_copy_indexed" in a for (p, _m, _n), a in base.items()):
        out.append(("JPCY sender-indexed CI", _jpcy_reading(base, "bytes_per_copy_indexed",
                                                            "dependents_per_copy")))
        out.append(("JPCY literal S4/S5 order", _jpcy_reading(base, "bytes_per_copy_literal",
                                                              "dependents_per_copy_literal")))
    return out


def _jpcy_reading(base, bytes_key, deps_key):
    out = dict(base)
    for key, a in base.items():
        if key[0] == "jpcy" and bytes_key in a:
            out[key] = dict(a, bytes_per_copy=a[bytes_key], dependents_per_copy=a[deps_key])
    return out


#: the paper's range of n (seed 001 section 6.2: "10 node system" to "50 node system")
N_RANGE = (10, 50)


def _ns(v, mode, protos=PAPER):
    return sorted(n for (p, m, n) in v if m == mode and p == protos[0]
                  and N_RANGE[0] <= n <= N_RANGE[1] and all((q, mode, n) in v for q in protos))


def _get(v, p, mode, n, metric="bytes_per_copy"):
    return v[(p, mode, n)][metric]


def smallest_dependents(v):
    """§6.3/§7: JPCY carries the smallest number of dependents (per copy, every n, both modes)."""
    worst = None
    for mode in ("unicast", "multicast"):
        for n in _ns(v, mode):
            j = _get(v, "jpcy", mode, n, "dependents_per_copy")
            other = min(_get(v, p, mode, n, "dependents_per_copy") for p in ("rst", "prs"))
            r = j / other
            if worst is None or r > worst[0]:
                worst = (r, mode, n)
    return worst and (worst[0] < 1, f"JPCY/min(others) ≤ {worst[0]:.2f} ({worst[1]} n={worst[2]})")


def least_bytes(v):
    """§6.3 Fig. 3: JPCY has the least overhead (bytes per copy, every n, both modes)."""
    worst = None
    for mode in ("unicast", "multicast"):
        for n in _ns(v, mode):
            r = _get(v, "jpcy", mode, n) / min(_get(v, p, mode, n) for p in ("rst", "prs"))
            if worst is None or r > worst[0]:
                worst = (r, mode, n)
    return worst and (worst[0] < 1, f"JPCY/min(others) ≤ {worst[0]:.2f} ({worst[1]} n={worst[2]})")


def dependent_size(v):
    """§6.3: the average size of one dependent is JPCY > PRS > RST (every n, both modes)."""
    ok, shown = True, None
    for mode in ("unicast", "multicast"):
        for n in _ns(v, mode):
            size = {p: _get(v, p, mode, n) / _get(v, p, mode, n, "dependents_per_copy")
                    for p in PAPER}
            ok &= size["jpcy"] > size["prs"] > size["rst"]
            if shown is None or (mode == "unicast" and n == max(_ns(v, mode))):
                shown = size            # the figure shown: unicast at the largest n
    return shown and (bool(ok), "B/dependent at the largest n, unicast: " + ", ".join(
        f"{p} {shown[p]:.2f}" for p in ("jpcy", "prs", "rst")))


def multicast_savings(v):
    """§6.3/§7: more savings in multicast (JPCY's bytes per copy below unicast's, every n)."""
    ns = sorted(set(_ns(v, "unicast", ("jpcy",))) & set(_ns(v, "multicast", ("jpcy",))))
    if not ns:
        return None
    r = [_get(v, "jpcy", "multicast", n) / _get(v, "jpcy", "unicast", n) for n in ns]
    return max(r) < 1, f"JPCY multicast/unicast per copy {min(r):.2f}–{max(r):.2f}"


def prs_worse_in_multicast(v):
    """§6.3: "more savings in multicast … but PRS does not show a good feature": read as JPCY's
    edge over PRS being larger in multicast than in unicast (every n)."""
    ns = sorted(set(_ns(v, "unicast")) & set(_ns(v, "multicast")))
    if not ns:
        return None
    ratio = {m: [_get(v, "jpcy", m, n) / _get(v, "prs", m, n) for n in ns]
             for m in ("unicast", "multicast")}
    ok = all(mu < uu for mu, uu in zip(ratio["multicast"], ratio["unicast"]))
    n = ns[-1]
    return ok, (f"JPCY/PRS per copy at n={n}: unicast {ratio['unicast'][-1]:.1%}, "
                f"multicast {ratio['multicast'][-1]:.1%}")


def scalable(v):
    """§6.1/§6.3: JPCY's overhead grows slowly, "nearly O(n)": read as a growth exponent of
    bytes per copy from the smallest to the largest n below 1.5 (RST's is 2), both modes."""
    worst = None
    for mode in ("unicast", "multicast"):
        ns = _ns(v, mode, ("jpcy",))
        if len(ns) < 2:
            continue
        e = math.log(_get(v, "jpcy", mode, ns[-1]) / _get(v, "jpcy", mode, ns[0])) \
            / math.log(ns[-1] / ns[0])
        if worst is None or e > worst[0]:
            worst = (e, mode)
    return worst and (worst[0] < 1.5, f"growth exponent ≤ {worst[0]:.2f} ({worst[1]})")


def prs_above_rst_beyond_25(v):
    """§6.3: in unicast PRS costs more than RST when n exceeds 25 (and not below)."""
    ns = _ns(v, "unicast", ("prs", "rst"))
    if not ns:
        return None
    above = [n for n in ns if _get(v, "prs", "unicast", n) > _get(v, "rst", "unicast", n)]
    ok = above == [n for n in ns if n > 25]
    r = {n: _get(v, "prs", "unicast", n) / _get(v, "rst", "unicast", n) for n in ns}
    return ok, "PRS/RST unicast: " + ", ".join(f"n={n} {r[n]:.2f}" for n in ns)


def prs_below_two_thirds(v):
    """§6.3: PRS "should have the number of dependents less than ⅔n² … but it approaches this
    bound": PRS unicast dependents per copy at or below ⅔n², and above half of it."""
    ns = _ns(v, "unicast", ("prs",))
    if not ns:
        return None
    f = [_get(v, "prs", "unicast", n, "dependents_per_copy") / (n * n) for n in ns]
    return all(0.5 <= x <= 2 / 3 for x in f), f"PRS dependents/n² {min(f):.2f}–{max(f):.2f}"


CONCLUSIONS = (
    ("JPCY carries the fewest dependents", smallest_dependents),
    ("JPCY carries the fewest bytes", least_bytes),
    ("one dependent: JPCY > PRS > RST bytes", dependent_size),
    ("JPCY saves more in multicast", multicast_savings),
    ("PRS does worse than JPCY in multicast", prs_worse_in_multicast),
    ("JPCY scales nearly O(n)", scalable),
    ("PRS > RST in unicast beyond n=25", prs_above_rst_beyond_25),
    ("PRS dependents approach ⅔n² from below", prs_below_two_thirds),
)


def evaluate(agg) -> list[tuple[str, list]]:
    """[(level, [(conclusion, holds or None, figure)])]"""
    out = []
    for name, v in levels(agg):
        res = []
        for title, fn in CONCLUSIONS:
            r = fn(v)
            res.append((title, None, "not run") if r is None else (title, r[0], r[1]))
        out.append((name, res))
    return out


def table(agg) -> str:
    """Markdown: a row per conclusion, a column per level; cells "holds"/"fails" and the
    deciding figure (PRS is our reconstruction: its rows judge the reconstruction, which
    `report.label` names everywhere)."""
    ev = evaluate(agg)
    head = "| seed 001 conclusion | " + " | ".join(name for name, _ in ev) + " |"
    lines = [head, "|---|" + "---|" * len(ev)]
    for i, (title, _fn) in enumerate(CONCLUSIONS):
        cells = []
        for _name, res in ev:
            _t, ok, fig = res[i]
            word = "n/a" if ok is None else ("**holds**" if ok else "fails")
            cells.append(f"{word}: {fig}")
        lines.append(f"| {title.replace('PRS', 'PRS (reconstructed)', 1)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
